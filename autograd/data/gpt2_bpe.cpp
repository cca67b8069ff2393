// GPT-2's byte-level BPE: encoding a text chunk by chunk, each chunk's bytes
// merged by rank, and decoding (gpt2_bpe.h). The vocabulary files are read
// in gpt2_vocab.cpp, the chunks cut in gpt2_pretokenize.cpp.
#include "autograd/data/gpt2_bpe.h"

#include <functional>
#include <limits>
#include <queue>

#include "runtime/error.h"

namespace spmd::data {
namespace {

constexpr int32_t kNoMerge = std::numeric_limits<int32_t>::max();  // a rank above every merge's
// The cache of one encode() keeps this many distinct chunks at most, and
// none longer than kMaxCachedBytes; when full it starts again empty.
constexpr size_t kMaxCachedChunks = size_t(1) << 18;
constexpr size_t kMaxCachedBytes = 64;
// Chunks longer than this merge through a heap (merge_long_chunk): the scan
// of merge_chunk costs the chunk's length for each merge, so a chunk of a
// million letters would take hours.
constexpr size_t kLongChunkBytes = 256;

}  // namespace

const Gpt2Tokenizer::Merge* Gpt2Tokenizer::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// ids[i] is a token of the chunk, ranks[i] the rank of the merge of ids[i]
// and ids[i + 1] (kNoMerge when there is none, and for the last token).
// Each step merges the pair of lowest rank, the leftmost of equals (equal
// ranks can only be the same pair), and looks up the two pairs it changed.
void Gpt2Tokenizer::merge_chunk(std::string_view chunk, std::vector<int32_t>& ids,
                                std::vector<int32_t>& ranks) const {
  if (chunk.size() > kLongChunkBytes) return merge_long_chunk(chunk, ids);
  ids.clear();
  for (char c : chunk) ids.push_back(byte_token_[static_cast<unsigned char>(c)]);
  const auto rank_at = [&](size_t i) {
    if (i + 1 >= ids.size()) return kNoMerge;
    const Merge* m = find_merge(ids[i], ids[i + 1]);
    return m ? m->rank : kNoMerge;
  };
  ranks.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ranks[i] = rank_at(i);
  while (ids.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < ids.size(); ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoMerge) break;
    ids[best] = find_merge(ids[best], ids[best + 1])->merged;
    ids.erase(ids.begin() + std::ptrdiff_t(best) + 1);
    ranks.erase(ranks.begin() + std::ptrdiff_t(best) + 1);
    ranks[best] = rank_at(best);
    if (best > 0) ranks[best - 1] = rank_at(best - 1);
  }
}

// The same merges in the same order as merge_chunk (the lowest rank, the
// leftmost of equals), each found in a min-heap of (rank, position) rather
// than by a scan: the tokens form a linked list over the chunk's byte
// positions, a merge joins a token with the next one, and the two pairs it
// changes go on the heap. An entry whose pair is no longer there (one of its
// tokens merged since) is skipped when it comes up.
void Gpt2Tokenizer::merge_long_chunk(std::string_view chunk, std::vector<int32_t>& ids) const {
  struct Candidate {
    int32_t rank, left, right;
    size_t pos;  // where the left token starts
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const size_t n = chunk.size(), kNone = n;  // kNone: no token there
  // The token that starts at each byte position (-1 once merged into the
  // one before), and the start of the next and of the previous token.
  std::vector<int32_t> tokens(n);
  std::vector<size_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = byte_token_[static_cast<unsigned char>(chunk[i])];
    next[i] = i + 1;
    prev[i] = i == 0 ? kNone : i - 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](size_t i) {  // the pair of token i and the next, if it merges
    if (next[i] == kNone) return;
    if (const Merge* m = find_merge(tokens[i], tokens[next[i]]))
      heap.push({m->rank, tokens[i], tokens[next[i]], i});
  };
  for (size_t i = 0; i < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t i = c.pos, j = next[i];
    if (tokens[i] != c.left || j == kNone || tokens[j] != c.right) continue;  // stale
    tokens[i] = find_merge(c.left, c.right)->merged;
    tokens[j] = -1;
    next[i] = next[j];
    if (next[j] != kNone) prev[next[j]] = i;
    if (prev[i] != kNone) push(prev[i]);
    push(i);
  }
  ids.clear();
  for (size_t i = 0; i != kNone; i = next[i]) ids.push_back(tokens[i]);
}

std::vector<int64_t> Gpt2Tokenizer::encode(std::string_view text) const {
  struct Span {
    size_t offset, size;  // into `cached`
  };
  std::unordered_map<std::string_view, Span> cache;  // chunk (a view of `text`) -> its ids
  std::vector<int32_t> cached;                       // the cached chunks' ids, back to back
  std::vector<int32_t> ids, ranks;                   // merge_chunk's buffers, reused
  std::vector<int64_t> out;
  out.reserve(text.size() / 4 + 16);
  for (size_t start = 0; start < text.size();) {
    const size_t end = gpt2_chunk_end(text, start);
    const std::string_view chunk = text.substr(start, end - start);
    start = end;
    if (chunk.size() == 1) {
      out.push_back(byte_token_[static_cast<unsigned char>(chunk[0])]);
      continue;
    }
    if (const auto hit = cache.find(chunk); hit != cache.end()) {
      const auto first = cached.begin() + std::ptrdiff_t(hit->second.offset);
      out.insert(out.end(), first, first + std::ptrdiff_t(hit->second.size));
      continue;
    }
    merge_chunk(chunk, ids, ranks);
    out.insert(out.end(), ids.begin(), ids.end());
    if (chunk.size() > kMaxCachedBytes) continue;
    if (cache.size() == kMaxCachedChunks) cache.clear(), cached.clear();
    cache.emplace(chunk, Span{cached.size(), ids.size()});
    cached.insert(cached.end(), ids.begin(), ids.end());
  }
  return out;
}

const std::string& Gpt2Tokenizer::token_bytes(int64_t id) const {
  SPMD_CHECK(id >= 0 && id < vocab_size(), "Gpt2Tokenizer: id ", id,
             " is not in the vocabulary of ", vocab_size());
  return bytes_[size_t(id)];
}

std::string Gpt2Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) text += token_bytes(id);
  return text;
}

}  // namespace spmd::data
