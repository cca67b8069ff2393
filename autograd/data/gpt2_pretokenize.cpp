// GPT-2's pre-tokenization, its regular expression written out by hand
// (gpt2_bpe.h has the expression). At each position the alternatives are
// tried in the expression's order, and the first that matches makes the
// chunk:
//
//   1. an apostrophe and one of s, t, re, ve, m, ll, d (lower case only);
//   2. an optional space (U+0020 alone) and a run of letters, or of numbers,
//      or of "other" characters (neither whitespace, letter nor number);
//   3. whitespace: the whole run when it ends the text; else the run but its
//      last character (\s+(?!\S) backs off one, so that last character is
//      left to start the next chunk: " word" takes its space back); a run of
//      one character before a non-space is a chunk of its own (\s+).
//
// Characters are UTF-8 code points; a byte that does not begin a
// well-formed sequence is one character of class "other".
#include <string_view>
#include <vector>

#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/unicode_classes.h"

namespace spmd::data {
namespace {

struct Char {
  CharClass cls;
  size_t size;  // its bytes in the text
};

Char char_at(std::string_view text, size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + i;
  if (*s < 0x80) return {char_class(*s), 1};
  char32_t c = 0;
  const size_t n = utf8_sequence(s, text.size() - i, c);
  return n == 0 ? Char{CharClass::kOther, 1} : Char{char_class(c), n};
}

// The end of the contraction at `i` ('s 't 're 've 'm 'll 'd), or `i`.
size_t contraction_end(std::string_view text, size_t i) {
  if (text[i] != '\'') return i;
  for (std::string_view suffix : {"s", "t", "re", "ve", "m", "ll", "d"})
    if (text.substr(i + 1, suffix.size()) == suffix) return i + 1 + suffix.size();
  return i;
}

// The end of the run of characters of class `cls` that starts at `i`.
size_t run_end(std::string_view text, size_t i, CharClass cls) {
  while (i < text.size()) {
    const Char c = char_at(text, i);
    if (c.cls != cls) break;
    i += c.size;
  }
  return i;
}

}  // namespace

size_t gpt2_chunk_end(std::string_view text, size_t start) {
  if (const size_t end = contraction_end(text, start); end != start) return end;  // 1.
  const Char first = char_at(text, start);
  if (first.cls != CharClass::kWhitespace) return run_end(text, start, first.cls);  // 2.
  if (text[start] == ' ' && start + 1 < text.size()) {                              // 2., " x"
    const Char next = char_at(text, start + 1);
    if (next.cls != CharClass::kWhitespace) return run_end(text, start + 1, next.cls);
  }
  // 3. A run of whitespace: find its end and where its last character starts.
  size_t last = start, end = start + first.size;
  while (end < text.size()) {
    const Char c = char_at(text, end);
    if (c.cls != CharClass::kWhitespace) break;
    last = end;
    end += c.size;
  }
  if (end == text.size() || last == start) return end;
  return last;
}

std::vector<std::string_view> gpt2_chunks(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start < text.size();) {
    const size_t end = gpt2_chunk_end(text, start);
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

}  // namespace spmd::data
