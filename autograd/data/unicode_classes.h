// UTF-8 code points and the classes that GPT-2's pre-tokenization tells
// apart (autograd/data/gpt2_bpe.h): letters (\p{L}), numbers (\p{N}),
// whitespace (\s, the White_Space property) and everything else.
//
// The tables are generated: scripts/gen_unicode_classes.py writes
// unicode_classes.cpp from Python's unicodedata, and kUnicodeVersion says
// which Unicode that was. A code point assigned after that version is
// "other".
#pragma once

#include <cstddef>

namespace spmd::data {

enum class CharClass : unsigned char { kOther, kLetter, kNumber, kWhitespace };

// The Unicode version of the tables, e.g. "14.0.0".
extern const char* const kUnicodeVersion;

// The class of code point `c`; kOther for anything outside [0, 0x10FFFF].
CharClass char_class(char32_t c);

// The length of the well-formed UTF-8 sequence at `s` (at most `left` bytes
// there), or 0 when the bytes there are not one: Unicode's table 3-7, so no
// overlong form, no surrogate, nothing above U+10FFFF. Sets `c` to its code
// point. REQUIRES: left >= 1.
inline size_t utf8_sequence(const unsigned char* s, size_t left, char32_t& c) {
  const unsigned char b = s[0];
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the bounds of the second byte
  if (b < 0x80) {
    c = b;
    return 1;
  } else if (b >= 0xC2 && b <= 0xDF) {
    n = 2, c = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3, c = b & 0x0F;
    if (b == 0xE0) lo = 0xA0;  // below: an overlong form
    if (b == 0xED) hi = 0x9F;  // above: a surrogate
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4, c = b & 0x07;
    if (b == 0xF0) lo = 0x90;  // below: an overlong form
    if (b == 0xF4) hi = 0x8F;  // above: beyond U+10FFFF
  } else {
    return 0;
  }
  if (n > left || s[1] < lo || s[1] > hi) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    c = c << 6 | (s[k] & 0x3F);
  }
  return n;
}

}  // namespace spmd::data
