// The checkpoint index (parallel/checkpoint/index.h): boxes, the JSON form
// and its checksums, merging the ranks' parts and the checks that the
// blocks (and the tensors given to save or load) are consistent.
#include "parallel/checkpoint/index.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "parallel/placement.h"
#include "runtime/durable_file.h"

namespace spmd::dist {

using nlohmann::json;

std::optional<Box> intersection(const Box& a, const Box& b) {
  std::vector<int64_t> offset(a.offset.ndim()), size(a.offset.ndim());
  for (int d = 0; d < a.offset.ndim(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.size[d], b.offset[d] + b.size[d]);
    if (hi <= lo) return std::nullopt;
    offset[d] = lo;
    size[d] = hi - lo;
  }
  return Box{Shape(offset), Shape(size)};
}

std::string box_str(const Box& box) { return str_cat("offset ", box.offset, " size ", box.size); }

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::vector<uint32_t> chunk_checksums(const void* data, uint64_t n) {
  std::vector<uint32_t> out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t at = 0; at < n; at += kChecksumChunk)
    out.push_back(crc32c(0, p + at, size_t(std::min(kChecksumChunk, n - at))));
  return out;
}

// --- JSON ------------------------------------------------------------------------------------

namespace {

uint32_t parse_hex32(const json& j, const std::string& what) {
  const std::string s = j.is_string() ? j.get<std::string>() : "";
  SPMD_CHECK(s.size() == 8 && s.find_first_not_of("0123456789abcdef") == std::string::npos, what,
             " is not a checksum of 8 hex digits: ", j.dump());
  return uint32_t(std::stoul(s, nullptr, 16));
}

json block_to_json(const SavedBlock& b) {
  json crcs = json::array();
  for (uint32_t c : b.crc32c) crcs.push_back(hex32(c));
  return {{"file", b.file},
          {"key", b.key},
          {"offset", b.box.offset.to_vector()},
          {"size", b.box.size.to_vector()},
          {"crc32c", crcs}};
}

json tensor_to_json(const SavedTensor& t) {
  json blocks = json::array();
  for (const SavedBlock& b : t.blocks) blocks.push_back(block_to_json(b));
  return {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape.to_vector()}, {"blocks", blocks}};
}

// The checksum of the "tensors" object, over its canonical dump.
uint32_t tensors_checksum(const json& tensors) {
  const std::string text = tensors.dump();
  return crc32c(0, text.data(), text.size());
}

Shape shape_from_json(const json& j, const std::string& what) {
  SPMD_CHECK(j.is_array(), what, " is not a list of sizes: ", j.dump());
  Shape s;
  for (const json& d : j) {
    SPMD_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, what,
               " has a bad entry: ", j.dump());
    s.push_back(d.get<int64_t>());
  }
  return s;
}

SavedTensor tensor_from_json(const json& j, const std::string& what) {
  SavedTensor t;
  t.dtype = parse_dtype(j.at("dtype").get<std::string>());
  t.shape = shape_from_json(j.at("shape"), what + ": shape");
  for (const json& b : j.at("blocks")) {
    SavedBlock block{b.at("file").get<std::string>(),
                     b.at("key").get<std::string>(),
                     {shape_from_json(b.at("offset"), what + ": a block's offset"),
                      shape_from_json(b.at("size"), what + ": a block's size")},
                     {}};
    SPMD_CHECK(block.box.offset.ndim() == t.shape.ndim() && block.box.size.ndim() == t.shape.ndim(),
               what, ": block '", block.key, "' has ", block.box.offset.ndim(), "-d offsets for a ",
               t.shape.ndim(), "-d tensor");
    for (const json& c : b.at("crc32c"))
      block.crc32c.push_back(parse_hex32(c, what + ": a checksum of block '" + block.key + "'"));
    const uint64_t bytes = uint64_t(block.box.size.numel()) * element_size(t.dtype);
    const uint64_t chunks = (bytes + kChecksumChunk - 1) / kChecksumChunk;
    SPMD_CHECK(block.crc32c.size() == chunks, what, ": block '", block.key, "' has ",
               block.crc32c.size(), " checksums for its ", bytes, " bytes (", chunks,
               " expected: one per ", kChecksumChunk, " bytes)");
    t.blocks.push_back(std::move(block));
  }
  return t;
}

}  // namespace

// The JSON object whose checksum the index carries, written one line per
// block so that the index reads (and diffs) as a table: the text is that
// object's own fields, laid out, so the two cannot drift apart.
std::string index_to_json(const CheckpointIndex& index) {
  json tensors = json::object();
  for (const auto& [name, t] : index.tensors) tensors[name] = tensor_to_json(t);
  std::string out =
      str_cat("{\"format\": ", json(kIndexFormat).dump(), ", \"world_size\": ", index.world_size,
              ", \"tensors_crc32c\": \"", hex32(tensors_checksum(tensors)), "\",\n \"tensors\": {");
  const char* sep = "\n";
  for (const auto& [name, t] : tensors.items()) {
    out += str_cat(sep, "  ", json(name).dump(), ": {");
    for (const auto& [key, value] : t.items())
      if (key != "blocks") out += str_cat(json(key).dump(), ": ", value.dump(), ", ");
    out += "\"blocks\": [";
    const json& blocks = t.at("blocks");
    for (size_t i = 0; i < blocks.size(); ++i)
      out += str_cat(i ? ",\n" : "\n", "   ", blocks[i].dump());
    out += "]}";
    sep = ",\n";
  }
  return out + "}}";
}

CheckpointIndex index_from_json(const std::string& text, const std::string& where) {
  try {
    const json j = json::parse(text);
    SPMD_CHECK(j.is_object() && j.value("format", "") == kIndexFormat, where, ": not an index of ",
               kIndexFormat, " (its format is ", j.is_object() ? j.value("format", "none") : "none",
               ")");
    CheckpointIndex index;
    index.world_size = j.at("world_size").get<int>();
    const uint32_t expected = parse_hex32(j.at("tensors_crc32c"), where + ": tensors_crc32c");
    const uint32_t found = tensors_checksum(j.at("tensors"));
    SPMD_CHECK(found == expected, where, ": its tensors do not match its checksum (crc32c ",
               hex32(found), ", written ", hex32(expected),
               "): the index was changed or damaged after it was written");
    for (const auto& [name, t] : j.at("tensors").items())
      index.tensors[name] = tensor_from_json(t, str_cat(where, ": tensor '", name, "'"));
    return index;
  } catch (const json::exception& e) {  // not JSON, or a field missing or of the wrong type
    SPMD_THROW(InvalidArgument, where, ": malformed index (", e.what(), ")");
  }
}

CheckpointIndex read_checkpoint_index(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / kIndexFile;
  SPMD_CHECK(std::filesystem::is_directory(dir), "load_sharded: there is no checkpoint folder ",
             dir);
  std::ifstream in(path);
  SPMD_CHECK(in.good(), "load_sharded: ", dir, " holds no ", kIndexFile,
             " (not a checkpoint, or one whose save did not finish)");
  std::stringstream text;
  text << in.rdbuf();
  CheckpointIndex index = index_from_json(text.str(), path.string());
  for (const auto& [name, t] : index.tensors) check_blocks(name, t, path.string());
  return index;
}

void write_checkpoint_index(const CheckpointIndex& index, const std::string& path) {
  write_durably(path, index_to_json(index) + "\n");
}

// --- Merging and checking --------------------------------------------------------------------

void merge_index_part(CheckpointIndex& index, const CheckpointIndex& part, int rank) {
  for (const auto& [name, t] : part.tensors) {
    auto [it, inserted] = index.tensors.try_emplace(name, SavedTensor{t.dtype, t.shape, {}});
    SavedTensor& all = it->second;
    SPMD_CHECK(all.shape == t.shape && all.dtype == t.dtype, "'", name, "' is ", t.shape, " ",
               dtype_name(t.dtype), " on rank ", rank, " but ", all.shape, " ",
               dtype_name(all.dtype), " on a rank before it");
    for (const SavedBlock& b : t.blocks) {
      const bool listed =
          std::any_of(all.blocks.begin(), all.blocks.end(), [&](const SavedBlock& o) {
            return o.box.offset == b.box.offset && o.box.size == b.box.size;
          });
      if (!listed) all.blocks.push_back(b);
    }
  }
}

void check_blocks(const std::string& name, const SavedTensor& t, const std::string& where) {
  const Box whole{Shape(std::vector<int64_t>(t.shape.ndim(), 0)), t.shape};
  for (size_t i = 0; i < t.blocks.size(); ++i) {
    const Box& b = t.blocks[i].box;
    const std::optional<Box> inside = intersection(b, whole);
    const bool empty = b.size.numel() == 0;
    SPMD_CHECK(empty || (inside && inside->size == b.size), where, ": block '", t.blocks[i].key,
               "' (", box_str(b), ") reaches outside '", name, "' of shape ", t.shape);
    for (size_t j = 0; j < i; ++j) {
      SPMD_CHECK(!intersection(b, t.blocks[j].box), where, ": blocks '", t.blocks[j].key, "' in ",
                 t.blocks[j].file, " and '", t.blocks[i].key, "' in ", t.blocks[i].file, " of '",
                 name, "' overlap (", box_str(t.blocks[j].box), ", ", box_str(b), ")");
    }
  }
}

void check_complete(const CheckpointIndex& index, const std::string& where) {
  for (const auto& [name, t] : index.tensors) {
    check_blocks(name, t, where);
    int64_t saved = 0;
    for (const SavedBlock& b : t.blocks) saved += b.box.size.numel();
    SPMD_CHECK(saved == t.shape.numel(), where, ": the blocks of '", name, "' hold ", saved,
               " of its ", t.shape.numel(), " elements: no rank wrote the rest (are its ",
               "placements the same on every rank?)");
  }
}

void check_not_partial(const std::string& name, const LayoutMeta& layout,
                       const std::string& prefix) {
  for (const LayoutMeta* l = &layout; l != nullptr; l = l->parent.get()) {
    for (int a = 0; a < l->mesh.ndim(); ++a) {
      SPMD_CHECK(l->placements[a].kind != Placement::Kind::kPartial, prefix, "'", name,
                 "' is Partial() on axis ", l->mesh.axis_names()[a],
                 ": a checkpoint holds values, not terms of a sum (reduce it first)");
    }
  }
}

}  // namespace spmd::dist
