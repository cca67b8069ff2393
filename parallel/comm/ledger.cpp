// The ledger: folding calls into a rolling hash, its text form, and finding
// the first collective on which the ranks' records disagree.
#include "parallel/comm/ledger.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "runtime/error.h"

namespace spmd::dist {

namespace {

// splitmix64's finalizer: every input bit moves every output bit.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One word into the rolling hash: a multiply (odd, so no two states meet)
// and a shift that brings the product's high bits down to the low ones.
// Cheaper than mix(): the call path folds a few words per collective.
uint64_t step(uint64_t h, uint64_t word) {
  h = (h ^ word) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}

// A call's compared fields but the tag and dims, in one word:
//   op | dtype << 8 | reduce op << 16 | (ndim + 1) << 24 | has a tag << 31 | root << 32.
uint64_t head_word(const LedgerCall& c) {
  return uint64_t(c.op) | uint64_t(c.dtype) << 8 | uint64_t(c.reduce_op) << 16 |
         uint64_t(uint8_t(c.ndim + 1)) << 24 | uint64_t(c.tag != nullptr) << 31 |
         uint64_t(uint32_t(c.root)) << 32;
}

// The rolling hash `hash` after the call `c`.
uint64_t fold(uint64_t hash, const LedgerCall& c) {
  uint64_t h = step(hash, head_word(c)) ^ c.tag_hash;
  for (int i = 0; i < c.ndim; ++i) h = step(h, uint64_t(c.dims[i]));
  return h;
}

// An entry as the call it records.
LedgerCall call_of(const LedgerEntry& e) {
  const bool tagged = e.tag[0] != '\0';
  return {e.op,
          e.dtype,
          e.reduce_op,
          e.root,
          e.ndim,
          e.dims.data(),
          tagged ? &e.tag : nullptr,
          tagged ? tag_hash(e.tag) : 0};
}

bool reduces(OpType op) {
  return op == OpType::kAllReduce || op == OpType::kReduce || op == OpType::kReduceScatter;
}

// The entry of `record` with sequence number s, if it kept it.
const LedgerEntry* entry_at(const LedgerRecord& record, uint64_t s) {
  const uint64_t first = record.count - record.entries.size();
  if (s < first || s >= record.count) return nullptr;
  return &record.entries[s - first];
}

// Ranks grouped by the call they made at one sequence number; the largest
// group (ties: the one holding the lowest rank) first, the reference.
using CallGroups = std::vector<std::pair<const LedgerEntry*, std::vector<int>>>;
CallGroups group_calls(const std::vector<std::pair<int, const LedgerEntry*>>& calls) {
  std::map<uint64_t, size_t> index;
  CallGroups groups;
  for (const auto& [rank, entry] : calls) {
    auto [it, fresh] = index.emplace(entry->fingerprint(), groups.size());
    if (fresh) groups.push_back({entry, {}});
    groups[it->second].second.push_back(rank);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return groups;
}

std::string report_split(uint64_t seq, const CallGroups& groups, std::string_view group) {
  std::string text;
  for (size_t i = 1; i < groups.size(); ++i) {
    text += str_cat(i > 1 ? "; " : "", rank_list(groups[i].second), " called ",
                    groups[i].first->describe(), " as collective #", seq, " of group ", group);
  }
  return str_cat(text, ", ", rank_list(groups[0].second), " called ", groups[0].first->describe());
}

// Ranks that issued fewer collectives than the others, named at the first
// one they lack.
std::string report_behind(const std::vector<const LedgerRecord*>& have, uint64_t m,
                          std::string_view group) {
  std::vector<int> behind;
  std::vector<std::pair<int, const LedgerEntry*>> ahead;
  std::vector<int> ahead_unkept;
  const LedgerRecord* lagger = nullptr;
  for (const LedgerRecord* r : have) {
    if (r->count == m) {
      behind.push_back(r->rank);
      lagger = r;
    } else if (const LedgerEntry* e = entry_at(*r, m)) {
      ahead.emplace_back(r->rank, e);
    } else {
      ahead_unkept.push_back(r->rank);
    }
  }
  const LedgerEntry* last = entry_at(*lagger, m - 1);
  const std::string last_text = m == 0 ? "it has issued none"
                                : last ? str_cat("its last: #", m - 1, " ", last->describe())
                                       : str_cat("its last: #", m - 1);
  std::string text =
      str_cat(rank_list(behind), behind.size() > 1 ? " have" : " has", " not called collective #",
              m, " of group ", group, " (", last_text, ")");
  if (!ahead.empty()) {
    const CallGroups calls = group_calls(ahead);
    text += str_cat(", ", rank_list(calls[0].second), " called ", calls[0].first->describe());
  }
  if (!ahead_unkept.empty()) text += str_cat(", ", rank_list(ahead_unkept), " are past it");
  return text;
}

}  // namespace

// --- Entries -------------------------------------------------------------------------

uint64_t LedgerEntry::fingerprint() const { return fold(0, call_of(*this)); }

std::string LedgerEntry::describe() const {
  std::string args;
  if (ndim >= 0) {
    args = str_cat(dtype_name(dtype), "[");
    for (int i = 0; i < ndim; ++i) args += str_cat(i ? "," : "", dims[i]);
    args += "]";
  } else if (op != OpType::kBarrier) {
    args = std::string(dtype_name(dtype));
  }
  if (reduces(op) && reduce_op != ReduceOp::kSum) args += str_cat(", ", reduce_op_name(reduce_op));
  if (root >= 0) args += str_cat(", root ", root);
  std::string text = str_cat(op_name(op), "(", args, ")");
  if (!tag_view().empty()) text += str_cat(" at ", tag_view());
  return text;
}

std::string_view LedgerEntry::tag_view() const {
  return std::string_view(tag.data(), std::find(tag.begin(), tag.end(), '\0') - tag.begin());
}

void LedgerEntry::set_tag(std::string_view text) {
  tag.fill('\0');
  const size_t n = std::min(text.size(), kTagBytes - 1);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = text[i];
    tag[i] = (c <= ' ' || c == 0x7f) ? '_' : char(c);
  }
}

// --- The ledger ----------------------------------------------------------------------

uint64_t tag_hash(const std::array<char, LedgerEntry::kTagBytes>& tag) {
  if (tag[0] == '\0') return 0;
  uint64_t h = 0;
  for (size_t i = 0; i < tag.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, tag.data() + i, 8);
    h = mix(h ^ word);
  }
  return h;
}

// The writer's side of the seqlock: clear the stamp, write the words, set
// the stamp. The release fence keeps the cleared stamp ahead of the words
// for a reader; the stamp's release store keeps the words ahead of it.
void Ledger::record(uint64_t seq, const LedgerCall& c, int64_t issued_us) {
  constexpr auto relaxed = std::memory_order_relaxed;
  hash_ = fold(hash_, c);
  Slot& s = ring_[seq % kKept];
  s.stamp.store(0, relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.head.store(head_word(c), relaxed);
  s.hash.store(hash_, relaxed);
  s.issued_us.store(issued_us, relaxed);
  for (int i = 0; i < c.ndim; ++i) s.dims[i].store(c.dims[i], relaxed);
  if (c.tag) {
    for (int i = 0; i < kTagWords; ++i) {
      uint64_t word = 0;
      std::memcpy(&word, c.tag->data() + 8 * i, 8);
      s.tag[i].store(word, relaxed);
    }
  }
  s.stamp.store(seq + 1, std::memory_order_release);
  count_.store(seq + 1, std::memory_order_release);
}

void Ledger::record(const LedgerEntry& entry) {
  record(entry.seq, call_of(entry), entry.issued_us);
}

// The reader's side: the slot's words, kept only if its stamp says entry
// `seq` before and after reading them.
bool Ledger::read(uint64_t seq, LedgerEntry& out) const {
  constexpr auto relaxed = std::memory_order_relaxed;
  const Slot& s = ring_[seq % kKept];
  if (s.stamp.load(std::memory_order_acquire) != seq + 1) return false;
  const uint64_t head = s.head.load(relaxed);
  out.seq = seq;
  out.op = OpType(uint8_t(head));
  out.dtype = DType(uint8_t(head >> 8));
  out.reduce_op = ReduceOp(uint8_t(head >> 16));
  out.ndim = int32_t((head >> 24) & 0x7f) - 1;
  out.root = int32_t(uint32_t(head >> 32));
  out.hash = s.hash.load(relaxed);
  out.issued_us = s.issued_us.load(relaxed);
  out.tag.fill('\0');
  if (head & (uint64_t(1) << 31)) {
    for (int i = 0; i < kTagWords; ++i) {
      const uint64_t word = s.tag[i].load(relaxed);
      std::memcpy(out.tag.data() + 8 * i, &word, 8);
    }
    out.tag.back() = '\0';  // a torn read is dropped below; never a tag without its end
  }
  const int ndim = std::min<int>(out.ndim, Shape::kMaxDims);  // likewise
  for (int i = 0; i < ndim; ++i) out.dims[i] = s.dims[i].load(relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return s.stamp.load(relaxed) == seq + 1;
}

LedgerRecord Ledger::snapshot(int rank) const {
  for (;;) {
    LedgerRecord r;
    r.rank = rank;
    r.count = count();
    const size_t kept = size_t(std::min<uint64_t>(r.count, kKept));
    // Newest first. A slot the writer rewrote meanwhile ends the copy: the
    // older ones were rewritten before it. Only the newest one missing (the
    // writer went round the whole ring meanwhile) needs a fresh start.
    std::array<LedgerEntry, kKept> newest_first;
    size_t have = 0;
    while (have < kept && read(r.count - 1 - have, newest_first[have])) ++have;
    if (kept > 0 && have == 0) continue;
    r.entries.assign(newest_first.rend() - have, newest_first.rend());
    r.hash = have ? r.entries.back().hash : 0;
    return r;
  }
}

// --- Text form -----------------------------------------------------------------------
//
//   spmd-ledger 1 <rank> <count> <hash> <final>
//   <seq> <hash> <op> <dtype> <reduce op> <root> <ndim> <dims...> <tag or ->   (per entry)

std::string encode(const LedgerRecord& r) {
  std::ostringstream out;
  out << "spmd-ledger 1 " << r.rank << ' ' << r.count << ' ' << r.hash << ' ' << int(r.final)
      << '\n';
  for (const LedgerEntry& e : r.entries) {
    out << e.seq << ' ' << e.hash << ' ' << int(e.op) << ' ' << int(e.dtype) << ' '
        << int(e.reduce_op) << ' ' << e.root << ' ' << e.ndim;
    for (int i = 0; i < e.ndim; ++i) out << ' ' << e.dims[i];
    out << ' ' << (e.tag_view().empty() ? std::string_view("-") : e.tag_view()) << '\n';
  }
  return out.str();
}

std::optional<LedgerRecord> decode(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic;
  int version = 0, final = 0;
  LedgerRecord r;
  if (!(in >> magic >> version >> r.rank >> r.count >> r.hash >> final)) return std::nullopt;
  if (magic != "spmd-ledger" || version != 1 || r.rank < 0) return std::nullopt;
  r.final = final != 0;
  LedgerEntry e;
  int op = 0, dtype = 0, redop = 0;
  while (in >> e.seq >> e.hash >> op >> dtype >> redop >> e.root >> e.ndim) {
    if (op < 1 || op > int(OpType::kAllToAllv) || dtype < 0 || dtype > int(DType::kBool) ||
        redop < 0 || redop > int(ReduceOp::kMax) || e.ndim < -1 || e.ndim > Shape::kMaxDims) {
      return std::nullopt;
    }
    e.op = OpType(op), e.dtype = DType(dtype), e.reduce_op = ReduceOp(redop);
    for (int i = 0; i < e.ndim; ++i) {
      if (!(in >> e.dims[i])) return std::nullopt;
    }
    std::string tag;
    if (!(in >> tag)) return std::nullopt;
    e.set_tag(tag == "-" ? "" : tag);
    r.entries.push_back(e);
  }
  if (!in.eof() || r.entries.size() > Ledger::kKept || r.entries.size() > r.count) {
    return std::nullopt;
  }
  for (size_t i = 0; i < r.entries.size(); ++i) {  // the last entries, in order
    if (r.entries[i].seq != r.count - r.entries.size() + i) return std::nullopt;
  }
  return r;
}

// --- Comparing ranks -----------------------------------------------------------------

std::optional<std::string> find_desync(const std::vector<std::optional<LedgerRecord>>& records,
                                       std::string_view group, bool behind) {
  std::vector<const LedgerRecord*> have;
  for (const auto& r : records) {
    if (r) have.push_back(&*r);
  }
  if (have.size() < 2) return std::nullopt;
  uint64_t low = 0, m = UINT64_MAX, most = 0;  // the kept windows' overlap; counts
  for (const LedgerRecord* r : have) {
    low = std::max<uint64_t>(low, r->count - r->entries.size());
    m = std::min(m, r->count);
    most = std::max(most, r->count);
  }
  // 1. The first collective every rank kept on which their calls differ.
  for (uint64_t s = low; s < m; ++s) {
    std::vector<std::pair<int, const LedgerEntry*>> calls;
    for (const LedgerRecord* r : have) calls.emplace_back(r->rank, entry_at(*r, s));
    const CallGroups groups = group_calls(calls);
    if (groups.size() > 1) return report_split(s, groups, group);
  }
  // 2. The same calls in the windows, but different histories before them.
  if (m > 0 && low < m) {
    std::vector<std::pair<int, uint64_t>> hashes;
    for (const LedgerRecord* r : have) hashes.emplace_back(r->rank, entry_at(*r, m - 1)->hash);
    std::vector<int> odd;
    for (const auto& [rank, h] : hashes) {
      if (h != hashes[0].second) odd.push_back(rank);
    }
    if (!odd.empty()) {
      return str_cat(rank_list(odd), " issued different collectives from rank ", hashes[0].first,
                     " of group ", group, " before #", low,
                     " (further back than the ledger keeps; set call-site tags to narrow it)");
    }
  }
  // 3. The same history, but some ranks are behind the others.
  if (behind && most > m) return report_behind(have, m, group);
  return std::nullopt;
}

std::string rank_list(const std::vector<int>& ranks_in) {
  std::vector<int> ranks = ranks_in;
  std::sort(ranks.begin(), ranks.end());
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) text += ", ";
    if (j >= i + 2) {
      text += str_cat(ranks[i], "-", ranks[j]);
      i = j + 1;
    } else {
      text += str_cat(ranks[i]);
      ++i;
    }
  }
  return text;
}

}  // namespace spmd::dist
