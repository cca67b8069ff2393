// Byte-pair encoding: chunks, training by merging the most frequent pair,
// encoding by replaying the merges (bpe.h).
#include "autograd/data/bpe.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "runtime/error.h"

namespace spmd::data {
namespace {

bool is_letter(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

// Replaces every (a, b) in `s`, left to right, by `merged`.
void merge_in(std::vector<int32_t>& s, int32_t a, int32_t b, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
      s[out++] = merged;
      ++i;
    } else {
      s[out++] = s[i];
    }
  }
  s.resize(out);
}

}  // namespace

std::vector<std::string_view> bpe_chunks(std::string_view t) {
  std::vector<std::string_view> out;
  const auto at = [&](size_t i) { return static_cast<unsigned char>(t[i]); };
  size_t i = 0;
  while (i < t.size()) {
    const size_t k = at(i) == ' ' && i + 1 < t.size() ? i + 1 : i;  // an optional leading space
    size_t j = i + 1;
    if (is_letter(at(k))) {
      for (j = k; j < t.size() && is_letter(at(j));) ++j;
    } else if (is_digit(at(k))) {
      for (j = k; j < t.size() && is_digit(at(j));) ++j;
    } else if (is_space(at(i))) {
      for (j = i; j < t.size() && is_space(at(j));) ++j;
      // A run's last space goes with the word after it (" the").
      if (j < t.size() && j - i > 1 && at(j - 1) == ' ' && (is_letter(at(j)) || is_digit(at(j))))
        --j;
    }
    out.push_back(t.substr(i, j - i));
    i = j;
  }
  return out;
}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges)
    : merges_(std::move(merges)) {
  bytes_.resize(256);
  for (int b = 0; b < 256; ++b) bytes_[size_t(b)] = std::string(1, static_cast<char>(b));
  for (const auto& [a, b] : merges_) {
    const int32_t id = int32_t(bytes_.size());
    SPMD_CHECK(a >= 0 && b >= 0 && a < id && b < id, "BpeTokenizer: merge ", id - 256, " (", a,
               ", ", b, ") names a token not yet defined");
    bytes_.push_back(bytes_[size_t(a)] + bytes_[size_t(b)]);
  }
}

BpeTokenizer BpeTokenizer::train(std::string_view text, int64_t vocab_size) {
  SPMD_CHECK(vocab_size >= 256 && vocab_size <= 65536, "BpeTokenizer::train: vocab_size must ",
             "be in [256, 65536] (the bytes, and what a uint16 token holds), got ", vocab_size);
  // Each distinct chunk once, with its count, in a fixed (sorted) order.
  std::map<std::string_view, int64_t> counts;
  for (std::string_view c : bpe_chunks(text)) ++counts[c];
  struct Word {
    std::vector<int32_t> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [chunk, n] : counts) {
    Word w{{}, n};
    for (char c : chunk) w.symbols.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(w));
  }
  std::unordered_map<uint64_t, int64_t> pairs;  // (left, right) -> occurrences in the text
  const auto count_pairs = [&](const Word& w, int64_t sign) {
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
      pairs[pair_key(w.symbols[i], w.symbols[i + 1])] += sign * w.count;
  };
  for (const Word& w : words) count_pairs(w, +1);

  std::vector<std::pair<int32_t, int32_t>> merges;
  while (256 + int64_t(merges.size()) < vocab_size) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, n] : pairs)
      if (n > best_count || (n == best_count && n > 0 && key < best)) best = key, best_count = n;
    if (best_count < 2) break;  // nothing left that a merge would shorten twice
    const int32_t a = int32_t(best >> 32), b = int32_t(best & 0xffffffffu);
    const int32_t merged = 256 + int32_t(merges.size());
    merges.emplace_back(a, b);
    for (Word& w : words) {
      bool has = false;
      for (size_t i = 0; i + 1 < w.symbols.size() && !has; ++i)
        has = w.symbols[i] == a && w.symbols[i + 1] == b;
      if (!has) continue;
      count_pairs(w, -1);
      merge_in(w.symbols, a, b, merged);
      count_pairs(w, +1);
    }
    for (auto it = pairs.begin(); it != pairs.end();) it = it->second == 0 ? pairs.erase(it) : ++it;
  }
  return BpeTokenizer(std::move(merges));
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::unordered_map<uint64_t, int32_t> rank;  // pair -> its merge's index
  for (size_t i = 0; i < merges_.size(); ++i)
    rank[pair_key(merges_[i].first, merges_[i].second)] = int32_t(i);
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;  // chunk -> its tokens
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 2);
  for (std::string_view chunk : bpe_chunks(text)) {
    auto [it, fresh] = cache.try_emplace(chunk);
    std::vector<int32_t>& s = it->second;
    if (fresh) {
      for (char c : chunk) s.push_back(static_cast<unsigned char>(c));
      while (s.size() > 1) {  // the earliest-learned merge among the neighbours, then again
        int32_t first = -1;
        for (size_t i = 0; i + 1 < s.size(); ++i) {
          auto r = rank.find(pair_key(s[i], s[i + 1]));
          if (r != rank.end() && (first < 0 || r->second < first)) first = r->second;
        }
        if (first < 0) break;
        merge_in(s, merges_[size_t(first)].first, merges_[size_t(first)].second, 256 + first);
      }
    }
    ids.insert(ids.end(), s.begin(), s.end());
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) {
    SPMD_CHECK(id >= 0 && id < vocab_size(), "BpeTokenizer::decode: id ", id,
               " is not in the vocabulary of ", vocab_size());
    text += bytes_[size_t(id)];
  }
  return text;
}

void BpeTokenizer::save(const std::string& path) const {
  std::ofstream out(path);
  out << "spmd-bpe 1\nvocab_size " << vocab_size() << "\n";
  for (const auto& [a, b] : merges_) out << a << " " << b << "\n";
  out.flush();
  SPMD_CHECK(out.good(), "BpeTokenizer::save: cannot write ", path);
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::ifstream in(path);
  SPMD_CHECK(in.good(), "BpeTokenizer::load: cannot open ", path);
  std::string line;
  int64_t n = 0;
  SPMD_CHECK(std::getline(in, line) && line == "spmd-bpe 1", path,
             ":1: not an spmd-bpe vocabulary (its first line must be \"spmd-bpe 1\")");
  SPMD_CHECK(
      std::getline(in, line) &&
          std::sscanf(line.c_str(), "vocab_size %lld", reinterpret_cast<long long*>(&n)) == 1 &&
          n >= 256 && n <= 65536,
      path, ":2: expected \"vocab_size N\" with N in [256, 65536], got \"", line, "\"");
  std::vector<std::pair<int32_t, int32_t>> merges;
  for (int64_t i = 0; i < n - 256; ++i) {
    int a = -1, b = -1;
    char extra = 0;
    SPMD_CHECK(std::getline(in, line) && std::sscanf(line.c_str(), "%d %d %c", &a, &b, &extra) == 2,
               path, ":", i + 3, ": expected a merge \"left right\", got \"", line, "\"");
    SPMD_CHECK(a >= 0 && b >= 0 && a < 256 + i && b < 256 + i, path, ":", i + 3, ": merge (", a,
               ", ", b, ") names a token not yet defined (ids below ", 256 + i, ")");
    merges.emplace_back(a, b);
  }
  SPMD_CHECK(!std::getline(in, line) || line.empty(), path, ": more merges than vocab_size ", n,
             " allows");
  return BpeTokenizer(std::move(merges));
}

}  // namespace spmd::data
