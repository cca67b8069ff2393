// data/gpt2_bpe.h without GPT-2's files: the byte-to-character map, the
// chunks of the pre-tokenization worked out by hand from its regular
// expression, a small vocabulary written here whose merges are replayed by
// hand, each malformed vocabulary file refused naming its file and line,
// and decode(encode(x)) == x for random bytes, invalid UTF-8 included.
// test_gpt2_tiktoken.cpp checks GPT-2's own files against tiktoken.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <set>

#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/unicode_classes.h"
#include "tests/error_of.h"

using namespace spmd::data;
using Catch::Matchers::Contains;
using spmd::testing::error_of;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/spmd_test_gpt2_bpe_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> chunks(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view c : gpt2_chunks(text)) out.emplace_back(c);
  return out;
}

std::string utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | c >> 6), out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xE0 | c >> 12), out += char(0x80 | (c >> 6 & 0x3F)),
        out += char(0x80 | (c & 0x3F));
  }
  return out;
}

// A token as the files write it: each byte as its character of the map.
std::string written(std::string_view bytes) {
  std::string out;
  for (char b : bytes) out += utf8(gpt2_byte_char(static_cast<unsigned char>(b)));
  return out;
}

// JSON for `written`: the characters of the map are printable, so only the
// quote and the backslash need escapes.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

// A vocabulary of the 256 bytes (id = the byte) and three merges:
//   rank 0: a b -> "ab" (256)   rank 1: a a -> "aa" (257)   rank 2: aa ab -> "aaab" (258)
struct SmallVocab {
  std::string encoder = temp_path("encoder.json"), vocab = temp_path("vocab.bpe");
  SmallVocab() {
    std::ofstream e(encoder);
    e << "{";
    for (int b = 0; b < 256; ++b)
      e << json_string(written(std::string(1, char(b)))) << ": " << b << ", ";
    e << "\"ab\": 256, \"aa\": 257, \"aaab\": 258}";
    std::ofstream(vocab) << "#version: 0.2\na b\na a\naa ab\n";
  }
  ~SmallVocab() {
    std::remove(encoder.c_str());
    std::remove(vocab.c_str());
  }
};

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("GPT-2's byte map: printable bytes are themselves, the 68 others U+0100 on",
          "[data][gpt2]") {
  CHECK(gpt2_byte_char('!') == U'!');
  CHECK(gpt2_byte_char('~') == U'~');
  CHECK(gpt2_byte_char(0xE9) == U'\u00e9');  // é is printable: itself
  CHECK(gpt2_byte_char(0) == U'\u0100');     // the first of the others
  CHECK(gpt2_byte_char('\n') == U'\u010a');  // 10 bytes before it are others: 0..9
  CHECK(gpt2_byte_char(' ') == U'\u0120');   // 'Ġ': 32 others before it, 0..31
  CHECK(gpt2_byte_char(0xAD) == U'\u0143');  // the last of the 68
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) seen.insert(gpt2_byte_char(uint8_t(b)));
  CHECK(seen.size() == 256);
}

TEST_CASE("Unicode classes: letters, numbers and whitespace of several scripts", "[data][gpt2]") {
  CHECK(char_class(U'a') == CharClass::kLetter);
  CHECK(char_class(U'\u00e9') == CharClass::kLetter);  // é
  CHECK(char_class(U'\u65e5') == CharClass::kLetter);  // 日
  CHECK(char_class(U'\u0416') == CharClass::kLetter);  // Ж
  CHECK(char_class(U'7') == CharClass::kNumber);
  CHECK(char_class(U'\u00bd') == CharClass::kNumber);  // ½ (No)
  CHECK(char_class(U'\u0663') == CharClass::kNumber);  // Arabic-Indic three (Nd)
  CHECK(char_class(U'\u2167') == CharClass::kNumber);  // Roman numeral eight (Nl)
  CHECK(char_class(U'\u3000') == CharClass::kWhitespace);
  CHECK(char_class(U'\u0085') == CharClass::kWhitespace);
  CHECK(char_class(0x1C) == CharClass::kOther);           // not White_Space (isspace() says so)
  CHECK(char_class(U'\u0301') == CharClass::kOther);      // a combining mark (Mn)
  CHECK(char_class(U'\U0001F600') == CharClass::kOther);  // an emoji (So)
  CHECK(char_class(0x110000) == CharClass::kOther);
}

TEST_CASE("pre-tokenization cuts as GPT-2's regular expression, worked by hand", "[data][gpt2]") {
  using V = std::vector<std::string>;
  CHECK(chunks("Hello world") == V{"Hello", " world"});
  CHECK(chunks("I'm here's") == V{"I", "'m", " here", "'s"});
  CHECK(chunks("don't'RE") == V{"don", "'t", "'", "RE"});  // contractions: lower case only
  CHECK(chunks("we'll they've") == V{"we", "'ll", " they", "'ve"});
  CHECK(chunks("a   b") == V{"a", "  ", " b"});        // the run leaves its last space
  CHECK(chunks("a\n\nb") == V{"a", "\n", "\n", "b"});  // "\n" before "b" stands alone
  CHECK(chunks("x  ") == V{"x", "  "});                // a run at the end stays whole
  CHECK(chunks("  trailing  ") == V{" ", " trailing", "  "});
  CHECK(chunks("123abc 4.5") == V{"123", "abc", " 4", ".", "5"});
  CHECK(chunks("?!? ...") == V{"?!?", " ..."});
  CHECK(chunks("tab\there") == V{"tab", "\t", "here"});
  CHECK(chunks("a\r\nb") == V{"a", "\r", "\n", "b"});
  CHECK(chunks("h\u00e9llo w\u00f6rld") == V{"h\u00e9llo", " w\u00f6rld"});
  CHECK(chunks("\u65e5\u672c 42\u00bd") == V{"\u65e5\u672c", " 42\u00bd"});
  CHECK(chunks("a\u3000b") == V{"a", "\u3000", "b"});  // U+3000 is whitespace, not ' '
}

TEST_CASE("invalid UTF-8: each bad byte is one 'other' character", "[data][gpt2]") {
  using V = std::vector<std::string>;
  CHECK(chunks("ab\xff\xfe!cd") == V{"ab", "\xff\xfe!", "cd"});
  CHECK(chunks(" \xc3") == V{" \xc3"});                            // a truncated sequence
  CHECK(chunks("\xc0\xaf") == V{"\xc0\xaf"});                      // an overlong '/'
  CHECK(chunks("x\xed\xa0\x80y") == V{"x", "\xed\xa0\x80", "y"});  // a surrogate
  CHECK(chunks("\xe2\x82") == V{"\xe2\x82"});
}

TEST_CASE("a small vocabulary: merges replayed by rank, the leftmost of equals", "[data][gpt2]") {
  const SmallVocab files;
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(files.encoder, files.vocab);
  CHECK(t.vocab_size() == 259);
  CHECK(t.merge_count() == 3);
  // a a a b: (a b) ranks 0 -> a a ab; (a a) ranks 1 -> aa ab; (aa ab) ranks 2.
  CHECK(t.encode("aaab") == std::vector<int64_t>{258});
  // a a a a: (a a) three times, the leftmost first -> aa a a -> aa aa (no merge).
  CHECK(t.encode("aaaa") == std::vector<int64_t>{257, 257});
  // Merges never cross chunks: " ab" is one chunk, "ab" of "ab!" another.
  CHECK(t.encode("ab!aaab") == std::vector<int64_t>{256, '!', 258});
  CHECK(t.encode(" ab") == std::vector<int64_t>{' ', 256});
  CHECK(t.decode({258, ' ', 256}) == "aaab ab");
  // Chunks of more than 256 bytes merge through a heap, in the same order:
  // 1,001 a's are 500 "aa" and an "a"; "aaab" 100 times are 100 "aaab".
  CHECK(t.encode(std::string(1001, 'a')) == [] {
    std::vector<int64_t> v(500, 257);
    v.push_back('a');
    return v;
  }());
  std::string aaab;
  for (int i = 0; i < 100; ++i) aaab += "aaab";
  CHECK(t.encode(aaab) == std::vector<int64_t>(100, 258));
  CHECK(t.token_bytes(257) == "aa");
  CHECK_THAT(error_of([&] { t.decode({259}); }),
             Contains("id 259 is not in the vocabulary of 259"));
}

TEST_CASE("decode(encode(x)) == x for random bytes, invalid UTF-8 included", "[data][gpt2]") {
  const SmallVocab files;
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(files.encoder, files.vocab);
  std::mt19937 rng(36);
  const std::vector<std::string> pieces = {"a",          "b",    "ab",   " ",       "  ",
                                           "\n",         "'s",   "1",    "\u00e9",  "\u65e5",
                                           "\U0001F600", "\xff", "\xc3", "\xe2\x82"};
  for (int n = 0; n < 200; ++n) {
    std::string x;
    const int len = int(rng() % 64);
    for (int i = 0; i < len; ++i)
      x += rng() % 3 == 0 ? std::string(1, char(rng() % 256)) : pieces[rng() % pieces.size()];
    INFO("case " << n);
    CHECK(t.decode(t.encode(x)) == x);
  }
  CHECK(t.encode("").empty());
}

TEST_CASE("a malformed vocabulary is refused naming the file and the line", "[data][gpt2]") {
  const SmallVocab good;
  const auto load_error = [](const std::string& encoder, const std::string& vocab) {
    return error_of([&] { Gpt2Tokenizer::load(encoder, vocab); });
  };
  CHECK_THAT(load_error(write_file("colon.json", "{\n  \"a\" 1}"), good.vocab),
             Contains("colon.json:2:7: expected ':' after a token"));
  CHECK_THAT(load_error(write_file("escape.json", "{\"\\q\": 0}"), good.vocab),
             Contains("escape.json:1:3: an unknown escape"));
  CHECK_THAT(load_error(write_file("bytes.json", "{\"a\": 0}"), good.vocab),
             Contains("bytes.json: byte 0 has no token of its own"));
  CHECK_THAT(load_error(write_file("gap.json", "{\"a\": 0, \"b\": 2}"), good.vocab),
             Contains("gap.json: no token has id 1"));
  CHECK_THAT(load_error(write_file("space.json", "{\"a b\": 0}"), good.vocab),
             Contains("space.json:1:2: token \"a b\" is not written in GPT-2's byte characters"));
  CHECK_THAT(load_error(write_file("dupid.json", "{\"a\": 0, \"b\": 0}"), good.vocab),
             Contains("dupid.json:1:10: id 0 again (first at "));
  CHECK_THAT(load_error(good.encoder, write_file("twice.bpe", "#version: 0.2\na b\na b\n")),
             Contains("twice.bpe:3: this merge again"));
  CHECK_THAT(load_error(good.encoder, write_file("noversion.bpe", "a b\n")),
             Contains("noversion.bpe:1: expected the \"#version: ...\" line"));
  CHECK_THAT(load_error(good.encoder, write_file("one.bpe", "#version: 0.2\na b\nab\n")),
             Contains("one.bpe:3: expected a merge \"left right\", got \"ab\""));
  CHECK_THAT(load_error(good.encoder, write_file("unknown.bpe", "#version: 0.2\nb c\n")),
             Contains("unknown.bpe:2: \"bc\" is not a token of"));
  CHECK_THAT(load_error(good.encoder, write_file("blank.bpe", "#version: 0.2\n\na b\n")),
             Contains("blank.bpe:2: a blank line between merges"));
  CHECK_THAT(load_error(good.encoder, temp_path("missing.bpe")), Contains("cannot open"));
  for (const char* name :
       {"colon.json", "escape.json", "bytes.json", "gap.json", "space.json", "dupid.json",
        "twice.bpe", "noversion.bpe", "one.bpe", "unknown.bpe", "blank.bpe"})
    std::remove(temp_path(name).c_str());
}
