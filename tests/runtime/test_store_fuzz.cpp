// A seeded random-input harness for the TCPStore server's parser, over real
// sockets: random bytes, frames with random lengths and bodies, and valid
// requests with bytes flipped, cut short or extended, each on its own
// connection to a live server. After every few inputs a real client checks
// that the server still answers and still holds what it was told. Bounded:
// SPMD_FUZZ_SECONDS (default 3) or SPMD_FUZZ_INPUTS (default 4000),
// whichever ends first; SPMD_FUZZ_SEED picks the inputs (default fixed, so a
// CI failure replays; the seed is printed on failure).
#include <poll.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <random>

#include "runtime/socket.h"
#include "runtime/store_wire.h"
#include "runtime/tcp_store.h"

using namespace spmd;
using namespace std::chrono_literals;
using store_wire::Op;
using store_wire::Writer;

namespace {

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

std::vector<uint8_t> hello() { return Writer().u32(store_wire::kMagic).u16(1).finish(); }

// One well-formed request of a random op, on keys of a small set (so that
// some requests meet keys that exist), with short timeouts.
std::vector<uint8_t> valid_request(std::mt19937_64& rng) {
  auto key = [&] { return str_cat("k", rng() % 8); };
  auto value = [&] { return std::string(rng() % 40, char('a' + rng() % 26)); };
  const int64_t timeout_ms = int64_t(rng() % 30);
  Writer w;
  switch (1 + rng() % 8) {
    case 1:
      return w.u8(uint8_t(Op::kSet)).str(key()).str(value()).finish();
    case 2:
      return w.u8(uint8_t(Op::kGet)).str(key()).i64(timeout_ms).finish();
    case 3:
      return w.u8(uint8_t(Op::kAdd)).str(key()).i64(int64_t(rng() % 5) - 2).finish();
    case 4:
      return w.u8(uint8_t(Op::kCompareSet)).str(key()).str(value()).str(value()).finish();
    case 5:
      return w.u8(uint8_t(Op::kWait)).keys({key(), key()}).i64(timeout_ms).finish();
    case 6:
      return w.u8(uint8_t(Op::kCheck)).keys({key()}).finish();
    case 7:
      return w.u8(uint8_t(Op::kDeleteKey)).str(key()).finish();
    default:
      return w.u8(uint8_t(Op::kNumKeys)).finish();
  }
}

// Flips, cuts or extends `bytes`, or rewrites its length prefix.
void mutate(std::vector<uint8_t>& bytes, std::mt19937_64& rng) {
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    switch (rng() % 5) {
      case 0:
        bytes[rng() % bytes.size()] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:
        bytes[rng() % bytes.size()] = uint8_t(rng());
        break;
      case 2:
        bytes.resize(rng() % bytes.size());
        break;
      case 3:
        for (int i = int(rng() % 16); i > 0; --i) bytes.push_back(uint8_t(rng()));
        break;
      default:
        if (bytes.size() >= 4) {
          const uint32_t len = rng() % 3 == 0 ? uint32_t(rng()) : uint32_t(rng() % 64);
          for (int i = 0; i < 4; ++i) bytes[i] = uint8_t(len >> (8 * i));
        }
    }
  }
}

std::vector<uint8_t> random_input(std::mt19937_64& rng) {
  std::vector<uint8_t> in;
  switch (rng() % 4) {
    case 0:  // noise
      for (int i = int(rng() % 64); i > 0; --i) in.push_back(uint8_t(rng()));
      return in;
    case 1: {  // a mutated greeting
      in = hello();
      mutate(in, rng);
      return in;
    }
    default: {  // a greeting, valid requests, one of them mutated
      in = hello();
      const int n = 1 + int(rng() % 4), bad = int(rng() % n);
      for (int i = 0; i < n; ++i) {
        std::vector<uint8_t> req = valid_request(rng);
        if (i == bad) mutate(req, rng);
        in.insert(in.end(), req.begin(), req.end());
      }
      return in;
    }
  }
}

// Sends `bytes` on a fresh connection and reads what comes back for a
// moment; the server may close it at any point (that is its answer to
// garbage), so errors on this side are expected and ignored.
void throw_at(uint16_t port, const std::vector<uint8_t>& bytes) {
  net::Socket s = net::connect_tcp("127.0.0.1", port, 2s);
  try {
    net::send_all(s.fd(), bytes.data(), bytes.size(), net::Clock::now() + 1s);
  } catch (const Error&) {
    return;
  }
  const auto deadline = net::Clock::now() + 5ms;
  for (;;) {
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, net::poll_timeout_ms(deadline)) <= 0) return;
    uint8_t buf[512];
    if (::recv(s.fd(), buf, sizeof buf, 0) <= 0) return;
  }
}

}  // namespace

TEST_CASE("fuzz: the store server survives random and mutated frames, and stays correct",
          "[store][fuzz]") {
  const uint64_t seed = uint64_t(env_long("SPMD_FUZZ_SEED", 20261201));
  const auto budget = std::chrono::seconds(env_long("SPMD_FUZZ_SECONDS", 3));
  const long max_inputs = env_long("SPMD_FUZZ_INPUTS", 4000);
  INFO("SPMD_FUZZ_SEED=" << seed);
  TCPStoreOptions so;
  so.is_server = true;
  so.timeout = 3s;
  TCPStore server(so);
  TCPStoreOptions co;
  co.port = server.port();
  co.timeout = 3s;
  TCPStore client(co);
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  long inputs = 0;
  for (; inputs < max_inputs && std::chrono::steady_clock::now() - start < budget; ++inputs) {
    std::vector<uint8_t> in = random_input(rng);
    INFO("input #" << inputs << " of " << in.size() << " bytes");
    throw_at(server.port(), in);
    if (inputs % 50 == 0) {  // still serving, still right
      const std::string key = str_cat("check/", inputs);
      client.set(key, std::string_view("v"));
      REQUIRE(client.get_string(key) == "v");
      REQUIRE(client.add("check/count", 1) == inputs / 50 + 1);
    }
  }
  WARN("store fuzz: " << inputs << " inputs, seed " << seed);
  CHECK(inputs > 100);
  client.set("final", std::string_view("ok"));
  CHECK(client.get_string("final") == "ok");
}
