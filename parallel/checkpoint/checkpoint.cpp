// Saving a sharded checkpoint (parallel/checkpoint/checkpoint.h; loading
// is load.cpp).
//
// Save, in three steps that meet through the world's store:
//   1. rank 0 makes an empty "<dir>.tmp"; the others wait for it;
//   2. every rank writes its blocks to one safetensors file there and posts
//      its part of the index (the blocks, their files, keys and offsets);
//   3. rank 0 merges the parts, checks that they make every tensor whole,
//      writes index.json and renames the folder to <dir>; every rank waits
//      for that outcome, so all return together or all throw.
//
// Durability: every file is written, fsync'ed and checked
// (runtime/durable_file.h); the temporary folder is synced before its rename
// and its parent after it, so a checkpoint that has its name has its bytes.
// Every block carries checksums of its values in the index (a load checks
// the bytes it reads against them).
#include "parallel/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "parallel/checkpoint/index.h"
#include "parallel/placement.h"
#include "runtime/durable_file.h"
#include "runtime/fault.h"
#include "tensor/ops.h"

namespace spmd::dist {

namespace fs = std::filesystem;

namespace {

// Beside a checkpoint at <dir>: the folder a save writes before its rename,
// and where an older checkpoint steps aside when the rename cannot swap.
constexpr const char* kWriting = ".tmp";
constexpr const char* kSetAside = ".old";

bool writes_blocks(const LayoutMeta& layout);

// --- Save ----------------------------------------------------------------------------------

// The store keys through which the ranks of one save_sharded call meet:
// "<group>/checkpoint/<dir>/<n>/<what>". n numbers the calls for this dir:
// each rank adds 1 to a counter on entry, then posts "arrived<rank>". All
// adds of call n come before any of call n+1, because rank 0 answers only
// once every rank has arrived, and no rank leaves a call before reading an
// answer of rank 0's. A value is "ok:<payload>" or "error:<what went wrong>".
class SaveRound {
 public:
  SaveRound(ProcessGroup& world, const std::string& dir)
      : store_(*world.store_ptr()), timeout_(world.timeout()) {
    const std::string base = str_cat(world.name(), "/checkpoint/", dir);
    const int64_t call = (store_.add(base + "/calls", 1) - 1) / world.size();
    prefix_ = str_cat(base, "/", call, "/");
    previous_ = str_cat(base, "/", call - 1, "/");
    post(str_cat("arrived", world.rank()), "ok:");
  }

  // Rank 0: waits up to the world's timeout for every rank to have arrived
  // (TimeoutError naming those that have not).
  void wait_for_all(int world_size) {
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) keys.push_back(str_cat(prefix_, "arrived", r));
    store_.wait(keys, timeout_);
  }

  void post(const std::string& what, const std::string& value) {
    store_.set(prefix_ + what, value);
  }
  // The payload posted under `what`, waiting up to the world's timeout;
  // throws Error with the poster's message when it failed.
  std::string payload(const std::string& what) {
    const Bytes bytes = store_.get(prefix_ + what, timeout_);
    const std::string value(bytes.begin(), bytes.end());
    if (value.starts_with("error:")) throw Error(value.substr(6));
    SPMD_CHECK(value.starts_with("ok:"), "save_sharded: unexpected store value under ",
               prefix_ + what);
    return value.substr(3);
  }
  // Rank 0, once every rank has read them: this call's keys but the
  // outcome, and the previous call's outcome.
  void forget(int world_size) {
    store_.delete_key(prefix_ + "ready");
    for (int r = 0; r < world_size; ++r) {
      store_.delete_key(str_cat(prefix_, "arrived", r));
      store_.delete_key(str_cat(prefix_, "part", r));
    }
    store_.delete_key(previous_ + "done");
  }

 private:
  Store& store_;
  std::chrono::milliseconds timeout_;
  std::string prefix_, previous_;
};

// "ok:" and what f returns, or "error:", the context and what f threw.
std::string outcome(const std::function<std::string()>& f, const std::string& context) {
  try {
    return "ok:" + f();
  } catch (const std::exception& e) {
    return "error:" + context + e.what();
  }
}

// Step 1 on rank 0, once every rank has arrived: an empty temporary folder
// (a crashed save may have left one). A folder at `dir` will be replaced,
// so it must be a checkpoint (or empty), not some other folder.
std::string make_empty_folder(SaveRound& round, int world_size, const std::string& tmp,
                              const std::string& dir) {
  round.wait_for_all(world_size);
  SPMD_CHECK(!fs::exists(dir) || fs::exists(fs::path(dir) / kIndexFile) ||
                 (fs::is_directory(dir) && fs::is_empty(dir)),
             dir, " exists and is not a checkpoint (it has no ", kIndexFile,
             "); it is left as it is");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  return "";
}

// A block's name inside its file: the tensor's name, with "@" and the
// block's offset when the block is only part of it ("wqkv.weight@16,0").
std::string block_key(const std::string& name, const Block& b, const Shape& whole) {
  if (b.size == whole) return name;
  std::string key = name + "@";
  for (int d = 0; d < b.global_offset.ndim(); ++d) key += str_cat(d ? "," : "", b.global_offset[d]);
  return key;
}

// Step 2 on one rank: writes <tmp>/shard_rank<R>.safetensors (when it has
// any block to write) and returns this rank's part of the index.
CheckpointIndex write_shard(const TensorMap& state, const std::string& tmp, int rank) {
  const std::string file = str_cat("shard_rank", rank, ".safetensors");
  CheckpointIndex part;
  TensorMap blocks;  // the file's tensors, by key
  for (const auto& [name, t] : state) {
    SPMD_CHECK(t.defined(), "'", name, "' is an undefined tensor");
    const LayoutMeta* layout = placements_of(t);
    if (layout == nullptr && rank != 0) continue;  // a whole tensor: rank 0 writes it
    if (layout != nullptr) check_not_partial(name, *layout, "");
    SavedTensor& saved = part.tensors[name];
    saved = {t.dtype(), layout ? whole_shape(*layout) : t.shape(), {}};
    if (layout != nullptr && !writes_blocks(*layout)) continue;  // a copy of another rank's
    for (const Block& b : local_blocks(t)) {
      const std::string key = block_key(name, b, saved.shape);
      SPMD_CHECK(blocks.count(key) == 0, "two blocks would be saved as '", key, "'");
      // The bytes the file will hold (save_safetensors writes them as they
      // are), and their checksums.
      const Tensor host =
          ops::contiguous(ops::to(box_view(t, b.local_offset, b.size), Device::cpu()));
      blocks[key] = host;
      saved.blocks.push_back(
          {file, key, {b.global_offset, b.size}, chunk_checksums(host.raw_data(), host.nbytes())});
    }
  }
  if (!blocks.empty()) save_safetensors((fs::path(tmp) / file).string(), blocks);
  return part;
}

// Step 3 on rank 0: the parts in rank order, merged.
CheckpointIndex gather_index(SaveRound& round, int world_size) {
  CheckpointIndex index;
  index.world_size = world_size;
  for (int r = 0; r < world_size; ++r) {
    const std::string text = round.payload(str_cat("part", r));
    merge_index_part(index, index_from_json(text, str_cat("rank ", r, "'s part")), r);
  }
  round.forget(world_size);
  return index;
}

// Puts `tmp` where `dir` is. An older checkpoint at `dir` is swapped with
// the new one in one step (renameat2's RENAME_EXCHANGE), so that `dir` is
// never absent, even if the process dies here, and then removed from `tmp`.
// Where the filesystem cannot exchange (EINVAL, ENOSYS, ENOTSUP; any other
// error is thrown), the older one steps aside to "<dir>.old" first: a crash
// between the two renames leaves `dir` absent and the older checkpoint,
// whole, at "<dir>.old", where a resume that finds `dir` absent looks for
// it. The parent folder is synced after the rename, so the new name
// survives a crash.
void move_into_place(const std::string& tmp, const std::string& dir) {
  const std::string parent = fs::absolute(dir).parent_path().string();
  if (!fs::exists(dir)) {
    fs::rename(tmp, dir);
    sync_folder(parent);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    sync_folder(parent);
    fs::remove_all(tmp);  // the older checkpoint, now under the temporary name
    return;
  }
  // Only a filesystem (or kernel) that cannot exchange takes the two renames.
  SPMD_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "save_sharded: cannot swap ",
             tmp, " and ", dir, " (renameat2 RENAME_EXCHANGE): ", std::strerror(errno));
  const std::string old = dir + kSetAside;
  fs::remove_all(old);
  fs::rename(dir, old);
  fault_point("checkpoint.set_aside");  // `dir` absent, the older one at "<dir>.old"
  fs::rename(tmp, dir);
  sync_folder(parent);
  fs::remove_all(old);
}

// Step 3 on rank 0: the index, checked whole, then the rename. On failure
// the temporary folder goes too.
std::string finish(SaveRound& round, int world_size, const std::string& tmp, const std::string& dir,
                   const std::map<std::string, std::string>& files) {
  try {
    const CheckpointIndex index = gather_index(round, world_size);
    check_complete(index, "the merged index");
    for (const auto& [name, content] : files)
      write_durably((fs::path(tmp) / name).string(), content);
    write_checkpoint_index(index, (fs::path(tmp) / kIndexFile).string());
    fault_point("checkpoint.index");
    sync_folder(tmp);  // the shard files' and the index's names
    fault_point("checkpoint.synced");
    move_into_place(tmp, dir);
    fault_point("checkpoint.renamed");
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  return "";
}

}  // namespace

void save_sharded(const TensorMap& state, const std::string& dir, ProcessGroup& world,
                  const std::map<std::string, std::string>& files) {
  const std::string tmp = dir + kWriting, where = str_cat("save_sharded(", dir, "): ");
  const int rank = world.rank();
  fault_point("checkpoint.begin");
  SaveRound round(world, dir);

  // 1. Rank 0 makes the temporary folder; the others wait for it.
  if (rank == 0)
    round.post("ready", outcome([&] { return make_empty_folder(round, world.size(), tmp, dir); },
                                where + "rank 0: "));
  round.payload("ready");
  fault_point("checkpoint.folder");

  // 2. This rank's blocks, and its part of the index for rank 0.
  round.post(str_cat("part", rank),
             outcome([&] { return index_to_json(write_shard(state, tmp, rank)); },
                     str_cat("rank ", rank, ": ")));
  fault_point("checkpoint.shard");

  // 3. Rank 0 writes the index and renames; every rank learns how it went.
  if (rank == 0)
    round.post("done",
               outcome([&] { return finish(round, world.size(), tmp, dir, files); }, where));
  round.payload("done");
}

std::string saved_folder(const std::string& dir) {
  const std::string set_aside = dir + kSetAside;
  if (!fs::exists(dir) && fs::is_regular_file(fs::path(set_aside) / kIndexFile)) return set_aside;
  return dir;
}

bool save_leftover(const std::string& path, const std::string& in_use) {
  const fs::path p(path);
  if (p.extension() == kWriting) return true;
  return p.extension() == kSetAside && p.stem() != fs::path(in_use).filename();
}

// --- Helpers ---------------------------------------------------------------------------------

namespace {

// The world ranks of this rank's line along `axis` of `mesh`, sorted.
std::vector<int> line_ranks(const DeviceMesh& mesh, int axis) {
  const ProcessGroup& g = mesh.group(mesh.axis_names()[axis]);
  std::vector<int> ranks;
  for (int r = 0; r < g.size(); ++r) ranks.push_back(g.global_rank(r));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Whether this rank writes its blocks of a tensor. Along a Replicate axis
// the ranks hold the same blocks, and only coordinate 0 writes them, unless
// another level of the chain cuts across that line (FSDP's Shard(0) on dp
// over TP's Replicate on dp, or the reverse: then the blocks differ along it
// and every rank writes its own). The ranks' lines tell, whichever meshes
// the levels were placed on.
bool writes_blocks(const LayoutMeta& layout) {
  std::vector<std::vector<int>> cut;  // lines that some level shards along
  for (const LayoutMeta* l = &layout; l != nullptr; l = l->parent.get()) {
    for (int a = 0; a < l->mesh.ndim(); ++a)
      if (l->placements[a].is_shard()) cut.push_back(line_ranks(l->mesh, a));
  }
  for (const LayoutMeta* l = &layout; l != nullptr; l = l->parent.get()) {
    for (int a = 0; a < l->mesh.ndim(); ++a) {
      if (l->placements[a].is_shard() || l->mesh.coordinate()[a] == 0) continue;
      const std::vector<int> mine = line_ranks(l->mesh, a);
      const bool crossed = std::any_of(cut.begin(), cut.end(), [&](const std::vector<int>& c) {
        std::vector<int> common;
        std::set_intersection(mine.begin(), mine.end(), c.begin(), c.end(),
                              std::back_inserter(common));
        return common.size() > 1;  // more than this rank itself
      });
      if (!crossed) return false;
    }
  }
  return true;
}

}  // namespace

}  // namespace spmd::dist
