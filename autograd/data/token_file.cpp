// llm.c-style token files (token_file.h).
#include "autograd/data/token_file.h"

#include <array>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "runtime/resource_limits.h"

namespace spmd::data {
namespace {

constexpr int32_t kMagic = 20240520;
constexpr int32_t kVersion = 1;
constexpr size_t kHeaderInts = 256;

}  // namespace

void write_token_file(const std::string& path, const std::vector<int64_t>& tokens,
                      int64_t vocab_size) {
  SPMD_CHECK(vocab_size >= 0 && vocab_size <= 65536, "write_token_file: vocab_size ", vocab_size,
             " does not fit uint16 tokens");
  SPMD_CHECK(tokens.size() <= size_t(INT32_MAX), "write_token_file: ", tokens.size(),
             " tokens are more than the header's int32 count holds");
  std::array<int32_t, kHeaderInts> header{};
  header[0] = kMagic, header[1] = kVersion;
  header[2] = int32_t(tokens.size()), header[3] = int32_t(vocab_size);
  std::vector<uint16_t> data(tokens.size());
  const int64_t limit = vocab_size > 0 ? vocab_size : 65536;
  for (size_t i = 0; i < tokens.size(); ++i) {
    SPMD_CHECK(tokens[i] >= 0 && tokens[i] < limit, "write_token_file: token ", i, " is ",
               tokens[i], ", outside [0, ", limit, ")");
    data[i] = uint16_t(tokens[i]);
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 2));
  out.flush();
  SPMD_CHECK(out.good(), "write_token_file: cannot write ", path);
}

TokenFile read_token_file(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  SPMD_CHECK(!ec, "read_token_file: cannot read ", path, " (", ec.message(), ")");
  std::ifstream in(path, std::ios::binary);
  SPMD_CHECK(in.good(), "read_token_file: cannot open ", path);
  std::array<int32_t, kHeaderInts> header{};
  in.read(reinterpret_cast<char*>(header.data()), sizeof header);
  SPMD_CHECK(in.good() && header[0] == kMagic, path,
             " is not a token file (no llm.c header: ", "its first int32 is not ", kMagic,
             "); spmd-tokenize writes them");
  SPMD_CHECK(header[1] == kVersion, path, ": token file version ", header[1], ", expected ",
             kVersion);
  const uint64_t count = uint64_t(uint32_t(header[2]));
  SPMD_CHECK(bytes == sizeof header + 2 * count, path, ": the header says ", count, " tokens (",
             sizeof header + 2 * count, " bytes) but the file has ", bytes, " bytes");
  // The file's uint16 tokens, then each as an int64 here and in the dataset's split.
  check_memory_fits(str_cat("reading the token file ", path, " (", count, " tokens)"),
                    count * (2 + 8 + 8));
  std::vector<uint16_t> data(count);
  in.read(reinterpret_cast<char*>(data.data()), std::streamsize(2 * count));
  SPMD_CHECK(in.good() || count == 0, "read_token_file: error reading ", path);
  TokenFile file;
  file.vocab_size = header[3];
  file.tokens.assign(data.begin(), data.end());
  for (size_t i = 0; i < data.size() && file.vocab_size > 0; ++i)
    SPMD_CHECK(data[i] < file.vocab_size, path, ": token ", i, " is ", data[i],
               ", at or above the header's vocabulary size ", file.vocab_size);
  return file;
}

}  // namespace spmd::data
