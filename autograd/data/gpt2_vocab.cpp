// Reading GPT-2's vocabulary files (gpt2_bpe.h): encoder.json, a flat JSON
// object of token -> id read by a small reader of that one shape, and
// vocab.bpe, one merge a line. Tokens in both are written in GPT-2's
// byte-to-character map, turned back into bytes here.
#include <fstream>
#include <sstream>

#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/unicode_classes.h"
#include "runtime/error.h"

namespace spmd::data {
namespace {

constexpr char32_t kMappedLimit = 0x100 + 68;  // every character of the map is below

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPMD_CHECK(in.good(), "Gpt2Tokenizer: cannot open ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | c >> 6), out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | c >> 12), out += char(0x80 | (c >> 6 & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | c >> 18), out += char(0x80 | (c >> 12 & 0x3F));
    out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
  }
}

// Reads `{"token": id, ...}`, each string with JSON's escapes; throws
// naming the file, line and column of anything else.
class EncoderJsonReader {
 public:
  EncoderJsonReader(std::string path, std::string text)
      : path_(std::move(path)), text_(std::move(text)) {}

  // Calls on_entry(token, id, at) for each entry, in the file's order; `at`
  // is the token's offset in the file, for position().
  template <class F>
  void read(F on_entry) {
    expect('{', "the object's '{'");
    if (skip_space() == '}') return end();
    while (true) {
      skip_space();
      const size_t at = pos_;
      std::string token = read_string();
      expect(':', "':' after a token");
      const int64_t id = read_id();
      on_entry(std::move(token), id, at);
      const char next = skip_space();
      if (next == '}') return end();
      expect(',', "',' or '}' after an id");
    }
  }
  // "FILE:LINE:COLUMN" of offset `at`, for messages.
  std::string position(size_t at) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i)
      text_[i] == '\n' ? (++line, column = 1) : ++column;
    return str_cat(path_, ":", line, ":", column);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    SPMD_THROW(InvalidArgument, position(pos_), ": ", what);
  }
  char skip_space() {
    while (pos_ < text_.size() && std::string_view(" \t\r\n").find(text_[pos_]) != npos) ++pos_;
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  void expect(char c, const char* what) {
    if (skip_space() != c) fail(str_cat("expected ", what));
    ++pos_;
  }
  void end() {
    ++pos_;
    if (skip_space() != '\0') fail("expected the end of the file after the object's '}'");
  }
  int64_t read_id() {
    skip_space();
    const size_t first = pos_;
    int64_t id = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9' && id < (1 << 30))
      id = id * 10 + (text_[pos_++] - '0');
    if (pos_ == first || id >= (1 << 30)) fail("expected an id (an integer in [0, 2^30))");
    return id;
  }
  uint32_t read_hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++pos_) {
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("expected four hex digits after \\u");
      v = v << 4 | uint32_t(d);
    }
    return v;
  }
  std::string read_string();

  static constexpr size_t npos = std::string_view::npos;
  std::string path_, text_;
  size_t pos_ = 0;
};

std::string EncoderJsonReader::read_string() {
  if (skip_space() != '"') fail("expected a token (a JSON string)");
  ++pos_;
  std::string out;
  while (true) {
    if (pos_ >= text_.size()) fail("a string that does not end");
    const char c = text_[pos_++];
    if (c == '"') return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    const char e = pos_ < text_.size() ? text_[pos_] : '\0';
    ++pos_;
    const std::string_view from = "\"\\/bfnrt", to = "\"\\/\b\f\n\r\t";
    if (const size_t k = from.find(e); e != '\0' && k != npos) {
      out += to[k];
    } else if (e == 'u') {
      char32_t cp = read_hex4();
      if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair: \uD83D\uDE00
        if (text_.compare(pos_, 2, "\\u") != 0) fail("a lone high surrogate");
        pos_ += 2;
        const uint32_t low = read_hex4();
        if (low < 0xDC00 || low > 0xDFFF) fail("a high surrogate without its low one");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        fail("a lone low surrogate");
      }
      append_utf8(out, cp);
    } else {
      pos_ -= 2;  // at the backslash
      fail("an unknown escape in a string");
    }
  }
}

// The byte each character of GPT-2's map stands for, -1 for the others.
std::array<int, kMappedLimit> byte_of_char() {
  std::array<int, kMappedLimit> out;
  out.fill(-1);
  for (int b = 0; b < 256; ++b) out[gpt2_byte_char(uint8_t(b))] = b;
  return out;
}

// `token`'s bytes, or false when a character of it is not in the map.
bool token_to_bytes(const std::string& token, std::string& bytes) {
  static const std::array<int, kMappedLimit> kByteOf = byte_of_char();
  bytes.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    char32_t c = 0;
    const size_t n = utf8_sequence(s + i, token.size() - i, c);
    if (n == 0 || c >= kMappedLimit || kByteOf[c] < 0) return false;
    bytes += char(kByteOf[c]);
    i += n;
  }
  return !token.empty();
}

// encoder.json read: every id 0..N-1 once.
struct Encoder {
  std::vector<std::string> bytes;                  // id -> the token's bytes
  std::unordered_map<std::string, int32_t> id_of;  // the token as written -> id
};

Encoder read_encoder(const std::string& path) {
  Encoder e;
  constexpr size_t kNone = std::string::npos;
  std::vector<size_t> at_of;  // id -> its entry's offset in the file, kNone when none yet
  EncoderJsonReader json(path, read_whole(path));
  json.read([&](std::string token, int64_t id, size_t at) {
    std::string bytes;
    SPMD_CHECK(token_to_bytes(token, bytes), json.position(at), ": token \"", token,
               "\" is not written in GPT-2's byte characters");
    if (size_t(id) >= at_of.size())
      at_of.resize(size_t(id) + 1, kNone), e.bytes.resize(size_t(id) + 1);
    SPMD_CHECK(at_of[size_t(id)] == kNone, json.position(at), ": id ", id, " again (first at ",
               json.position(at_of[size_t(id)]), ")");
    SPMD_CHECK(e.id_of.emplace(std::move(token), int32_t(id)).second, json.position(at),
               ": token \"", bytes, "\" again");
    e.bytes[size_t(id)] = std::move(bytes);
    at_of[size_t(id)] = at;
  });
  for (size_t id = 0; id < at_of.size(); ++id)
    SPMD_CHECK(at_of[id] != kNone, path, ": no token has id ", id, " (ids must be 0..",
               at_of.size() - 1, ", each once)");
  return e;
}

// Reads vocab.bpe: "#version..." then "left right" a line, both halves and
// their concatenation tokens of encoder.json; calls on_merge(left, right,
// merged, "FILE:LINE") for each, in rank order.
template <class F>
void read_merges(const std::string& path, const std::string& encoder_json,
                 const std::unordered_map<std::string, int32_t>& id_of, F on_merge) {
  std::istringstream in(read_whole(path));
  std::string line;
  SPMD_CHECK(std::getline(in, line) && line.rfind("#version", 0) == 0, path,
             ":1: expected the \"#version: ...\" line first");
  int64_t number = 1;
  int64_t blank = 0;  // the first blank line: allowed at the end of the file only
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      blank = blank == 0 ? number : blank;
      continue;
    }
    SPMD_CHECK(blank == 0, path, ":", blank, ": a blank line between merges");
    const size_t space = line.find(' ');
    SPMD_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                   line.find(' ', space + 1) == std::string::npos,
               path, ":", number, ": expected a merge \"left right\", got \"", line, "\"");
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    int32_t ids[3];
    const std::string parts[3] = {left, right, left + right};
    for (int k = 0; k < 3; ++k) {
      const auto it = id_of.find(parts[k]);
      SPMD_CHECK(it != id_of.end(), path, ":", number, ": \"", parts[k], "\" is not a token of ",
                 encoder_json);
      ids[k] = it->second;
    }
    on_merge(ids[0], ids[1], ids[2], str_cat(path, ":", number));
  }
}

}  // namespace

char32_t gpt2_byte_char(uint8_t byte) {
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  if (printable(byte)) return byte;
  char32_t next = 0x100;  // the others, in byte order
  for (int b = 0; b < byte; ++b) next += printable(b) ? 0 : 1;
  return next;
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
  return load(dir + "/encoder.json", dir + "/vocab.bpe");
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json, const std::string& vocab_bpe) {
  Gpt2Tokenizer t;
  Encoder encoder = read_encoder(encoder_json);
  t.bytes_ = std::move(encoder.bytes);
  for (int b = 0; b < 256; ++b) {
    std::string one;
    append_utf8(one, gpt2_byte_char(uint8_t(b)));
    const auto it = encoder.id_of.find(one);
    SPMD_CHECK(it != encoder.id_of.end(), encoder_json, ": byte ", b,
               " has no token of its own (\"", one, "\")");
    t.byte_token_[size_t(b)] = it->second;
  }
  read_merges(vocab_bpe, encoder_json, encoder.id_of,
              [&](int32_t left, int32_t right, int32_t merged, const std::string& where) {
                const Merge merge{int32_t(t.merges_.size()), merged};
                SPMD_CHECK(t.merges_.emplace(pair_key(left, right), merge).second, where,
                           ": this merge again");
              });
  return t;
}

}  // namespace spmd::data
