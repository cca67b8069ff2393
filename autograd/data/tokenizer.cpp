// Bytes to ids and back.
#include "autograd/data/tokenizer.h"

#include "runtime/error.h"

namespace spmd::data {

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(int64_t(static_cast<unsigned char>(c)));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) {
    SPMD_CHECK(id >= 0 && id < kVocabSize, "ByteTokenizer::decode: id ", id,
               " is not a byte (0..255)");
    text.push_back(static_cast<char>(id));
  }
  return text;
}

}  // namespace spmd::data
