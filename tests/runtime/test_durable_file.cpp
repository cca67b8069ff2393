// runtime/durable_file.h: CRC-32C against the standard's check values, files
// written and replaced whole, and the errors a full disk and a missing
// folder give, provoked for real (a tmpfs of 64 KiB: tests/small_tmpfs.h).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/durable_file.h"
#include "runtime/error.h"
#include "tests/skip.h"
#include "tests/small_tmpfs.h"

using namespace spmd;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct TempDir {
  TempDir() {
    char name[] = "/tmp/spmd_test_durable_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

}  // namespace

TEST_CASE("crc32c gives the Castagnoli CRC's check values", "[durable][crc]") {
  // The catalogue's check value, and RFC 3720's (iSCSI) test vectors.
  const std::string digits = "123456789";
  CHECK(crc32c(0, digits.data(), digits.size()) == 0xE3069283u);
  CHECK(crc32c(0, nullptr, 0) == 0u);
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[size_t(i)] = static_cast<unsigned char>(i);
  for (int i = 0; i < 32; ++i) down[size_t(i)] = static_cast<unsigned char>(31 - i);
  CHECK(crc32c(0, zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(0, ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(0, up.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(0, down.data(), 32) == 0x113FDB5Cu);
  // Continued over pieces of any length (the 8-byte steps and the tail).
  std::vector<unsigned char> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  const uint32_t whole = crc32c(0, bytes.data(), bytes.size());
  for (size_t cut : {size_t(1), size_t(7), size_t(8), size_t(13), size_t(999)})
    CHECK(crc32c(crc32c(0, bytes.data(), cut), bytes.data() + cut, bytes.size() - cut) == whole);
}

TEST_CASE("files written durably hold what was written; replaced ones are whole", "[durable]") {
  TempDir tmp;
  const std::string path = tmp.path + "/a.bin";
  const std::string head = "head", body(100000, 'x');
  const ByteSpan spans[] = {{head.data(), head.size()}, {body.data(), body.size()}};
  write_durably(path, spans, 2);
  CHECK(read_all(path) == head + body);
  replace_durably(tmp.path + "/latest", "step_1\n");
  replace_durably(tmp.path + "/latest", "step_2\n");
  CHECK(read_all(tmp.path + "/latest") == "step_2\n");
  CHECK_FALSE(fs::exists(tmp.path + "/latest.tmp"));
  CHECK_NOTHROW(sync_folder(tmp.path));

  CHECK_THROWS_WITH(write_durably(tmp.path + "/no/such/file", "x"),
                    Catch::Contains("cannot create " + tmp.path + "/no/such/file") &&
                        Catch::Contains("No such file or directory"));
  CHECK_THROWS_WITH(sync_folder(tmp.path + "/none"),
                    Catch::Contains("cannot open the folder " + tmp.path + "/none"));
}

TEST_CASE("a full disk is an error naming the file, the bytes needed and the bytes free",
          "[durable][.enospc]") {
  const testing::TmpfsRun run = testing::run_on_small_tmpfs(64 << 10, [](const std::string& mnt) {
    bool ok = true;
    auto expect = [&](bool cond, const std::string& what) {
      if (!cond) std::fprintf(stderr, "FAILED: %s\n", what.c_str());
      ok = ok && cond;
    };
    const std::string big(256 << 10, 'b');  // 256 KiB on a 64 KiB disk
    try {
      write_durably(mnt + "/big.bin", big);
      expect(false, "writing 256 KiB to a 64 KiB tmpfs did not throw");
    } catch (const Error& e) {
      const std::string m = e.what();
      expect(
          m.find("cannot write " + mnt + "/big.bin: No space left on device") != std::string::npos,
          "the message names the file and the errno: " + m);
      expect(m.find("needs 256.0 KiB") != std::string::npos &&
                 m.find(" free on " + mnt) != std::string::npos,
             "the message gives the bytes needed and free: " + m);
    }
    std::error_code ec;
    fs::remove(mnt + "/big.bin", ec);
    // A replace that cannot be written leaves the old file whole and no .tmp.
    replace_durably(mnt + "/latest", "step_1\n");
    try {
      replace_durably(mnt + "/latest", big);
      expect(false, "replacing with 256 KiB on a 64 KiB tmpfs did not throw");
    } catch (const Error& e) {
      expect(std::string(e.what()).find("No space left on device") != std::string::npos,
             std::string("the replace's message: ") + e.what());
    }
    expect(read_all(mnt + "/latest") == "step_1\n", "the old file is intact");
    expect(!fs::exists(mnt + "/latest.tmp"), "no temporary file is left");
    return ok;
  });
  if (run == testing::TmpfsRun::kUnavailable) {
    WARN("no mount namespace for a small tmpfs (not root, and no user namespaces): skipped");
    testing::mark_skipped();
    return;
  }
  CHECK(run == testing::TmpfsRun::kPassed);
}
