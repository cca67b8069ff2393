// TCPStore beyond the common semantics: many real client processes adding at
// once, a server that survives malformed and oversized messages from a raw
// socket, the pre-bound listener, and clear errors for a taken port or an
// absent server.
#include <poll.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <thread>

#include "runtime/rendezvous.h"
#include "runtime/socket.h"
#include "runtime/spawn.h"
#include "runtime/store_wire.h"
#include "runtime/tcp_store.h"

using namespace spmd;
using namespace std::chrono_literals;

namespace {

TCPStoreOptions server_options() {
  TCPStoreOptions o;
  o.is_server = true;
  o.timeout = 3s;
  return o;
}

// A raw client: connect and write bytes as they are.
net::Socket raw_client(uint16_t port, const std::vector<uint8_t>& bytes) {
  net::Socket s = net::connect_tcp("127.0.0.1", port, 2s);
  if (!bytes.empty()) net::send_all(s.fd(), bytes.data(), bytes.size(), net::Clock::now() + 2s);
  return s;
}

// Reads until the server closes the connection; returns what it sent before,
// or throws when it keeps the connection open past 2 s.
std::vector<uint8_t> read_until_closed(int fd) {
  std::vector<uint8_t> got;
  auto deadline = net::Clock::now() + 2s;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, net::poll_timeout_ms(deadline)) == 0)
      throw std::runtime_error("the server kept a bad connection open");
    uint8_t buf[256];
    ssize_t k = ::recv(fd, buf, sizeof buf, 0);
    if (k <= 0) return got;
    got.insert(got.end(), buf, buf + k);
  }
}

std::vector<uint8_t> hello(uint16_t version = store_wire::kVersion) {
  return store_wire::Writer().u32(store_wire::kMagic).u16(version).finish();
}

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("TCPStore: 8 processes add concurrently and see each other's keys", "[store][tcp]") {
  constexpr int kWorld = 8, kAdds = 50;
  SpawnOptions opts;
  opts.timeout = 60s;
  spawn(
      kWorld,
      [](int rank) {
        Rendezvous rv = rendezvous("env://", -1, -1, 20s);
        Store& store = *rv.store;
        for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
        store.set("from/" + std::to_string(rank), std::to_string(rank * rank));
        store_barrier(store, "adds_done", rank, kWorld, 20s);
        SPMD_CHECK(store.add("counter", 0) == kWorld * kAdds, "counter is ",
                   store.add("counter", 0));
        for (int r = 0; r < kWorld; ++r)
          SPMD_CHECK(store.get_string("from/" + std::to_string(r)) == std::to_string(r * r),
                     "bad value from rank ", r);
        store_barrier(store, "reads_done", rank, kWorld, 20s);  // rank 0 hosts: wait for all
      },
      opts);
}

TEST_CASE("TCPStore: threads sharing one client never wait behind a blocked get", "[store][tcp]") {
  TCPStore store(server_options());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      if (t == 0) CHECK(store.get_string("go") == "now");  // blocks until the end
      for (int i = 0; i < 200; ++i) store.add("n", 1);
    });
  for (int i = 0; i < 200; ++i) store.add("n", 1);
  std::this_thread::sleep_for(20ms);
  store.set("go", "now");
  for (auto& t : threads) t.join();
  CHECK(store.add("n", 0) == 5 * 200);
}

TEST_CASE("TCPStore: malformed clients lose their connection, the server carries on",
          "[store][tcp]") {
  TCPStore store(server_options());
  store.set("before", "1");
  // A client that stays connected through all of it, mid-request at the end.
  TCPStoreOptions client;
  client.port = store.port();
  client.timeout = 3s;
  TCPStore bystander(client);

  SECTION("plain garbage") {
    auto s = raw_client(store.port(), {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '\n'});
    CHECK_NOTHROW(read_until_closed(s.fd()));
  }
  SECTION("an oversized frame length") {
    auto s = raw_client(store.port(), concat(hello(), {0xff, 0xff, 0xff, 0xff, 1, 2, 3}));
    CHECK_NOTHROW(read_until_closed(s.fd()));
  }
  SECTION("an unknown operation") {
    auto s = raw_client(store.port(), concat(hello(), store_wire::Writer().u8(99).finish()));
    CHECK_NOTHROW(read_until_closed(s.fd()));
  }
  SECTION("a key length that runs past the frame") {
    auto frame = store_wire::Writer().u8(1).u32(1000).u8('k').finish();  // kSet, key of 1000?
    auto s = raw_client(store.port(), concat(hello(), frame));
    CHECK_NOTHROW(read_until_closed(s.fd()));
  }
  SECTION("a wait with an absurd key count") {
    auto frame = store_wire::Writer().u8(5).u32(0x7fffffff).i64(10).finish();
    auto s = raw_client(store.port(), concat(hello(), frame));
    CHECK_NOTHROW(read_until_closed(s.fd()));
  }
  SECTION("trailing bytes after a well-formed request") {
    auto frame = store_wire::Writer().u8(8).u8(0).finish();  // kNumKeys takes no fields
    auto s = raw_client(store.port(), concat(hello(), frame));
    CHECK_NOTHROW(read_until_closed(s.fd()));
  }
  SECTION("another protocol version gets an error, then the close") {
    auto s = raw_client(store.port(), hello(77));
    std::vector<uint8_t> got = read_until_closed(s.fd());
    REQUIRE(got.size() > 5);
    CHECK(got[4] == static_cast<uint8_t>(store_wire::Status::kError));
    CHECK(std::string(got.begin(), got.end()).find("version 1") != std::string::npos);
  }
  SECTION("a client that leaves in the middle of a frame, and one parked in get") {
    auto half = raw_client(store.port(), concat(hello(), {20, 0, 0, 0, 1, 2}));
    half.close();
    auto parked = raw_client(
        store.port(), concat(hello(), store_wire::Writer().u8(2).str("never").i64(60000).finish()));
    std::this_thread::sleep_for(20ms);
    parked.close();
  }
  // The server is still up and still serves both old and new clients.
  CHECK(store.get_string("before") == "1");
  CHECK(bystander.add("after", 1) == 1);
  TCPStore late(client);
  CHECK(late.get_string("before") == "1");
}

TEST_CASE("TCPStore: serving on a pre-bound listening socket", "[store][tcp]") {
  net::Socket listener = net::listen_tcp("", 0);
  uint16_t port = net::local_port(listener.fd());
  TCPStoreOptions o = server_options();
  o.listen_fd = listener.release();
  TCPStore store(o);
  CHECK(store.port() == port);
  store.set("k", "v");
  TCPStoreOptions c;
  c.port = port;
  c.timeout = 2s;
  CHECK(TCPStore(c).get_string("k") == "v");
  CHECK(store.local_address() == "127.0.0.1");
}

TEST_CASE("TCPStore: a taken port and an absent server are clear errors", "[store][tcp]") {
  net::Socket taken = net::listen_tcp("", 0);
  TCPStoreOptions o = server_options();
  o.port = net::local_port(taken.fd());
  CHECK_THROWS_WITH(TCPStore(o), Catch::Contains("already in use"));

  // Find a port nobody serves: bind one, then let it go.
  uint16_t free_port = net::local_port(net::listen_tcp("", 0).fd());
  TCPStoreOptions c;
  c.port = free_port;
  c.timeout = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(TCPStore(c), Catch::Contains("127.0.0.1:" + std::to_string(free_port)) &&
                                     Catch::Contains("no server answered"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  c.host = "no-such-host.invalid";
  CHECK_THROWS_AS(TCPStore(c), InvalidArgument);
}

TEST_CASE("TCPStore: the host keeps serving until its clients leave, within its linger",
          "[store][tcp]") {
  auto host = std::make_unique<TCPStore>(server_options());
  TCPStoreOptions c;
  c.port = host->port();
  c.timeout = 2s;
  auto client = std::make_unique<TCPStore>(c);
  auto t0 = std::chrono::steady_clock::now();
  std::thread closer([&] { host.reset(); });
  std::this_thread::sleep_for(200ms);
  client->set("still", "served");  // the host's destructor is running, the server is not gone
  CHECK(client->get_string("still") == "served");
  client.reset();
  closer.join();
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 200ms);
  CHECK(took < 5s);

  TCPStoreOptions o = server_options();
  o.linger = 100ms;
  host = std::make_unique<TCPStore>(o);
  c.port = host->port();
  client = std::make_unique<TCPStore>(c);
  t0 = std::chrono::steady_clock::now();
  host.reset();  // the client stays: the linger bounds the wait
  took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 100ms);
  CHECK(took < 2s);
}

TEST_CASE("TCPStore: a client whose server dies gets a CommError, not a hang", "[store][tcp]") {
  TCPStoreOptions o = server_options();
  o.linger = 0ms;
  auto server = std::make_unique<TCPStore>(o);
  TCPStoreOptions c;
  c.port = server->port();
  c.timeout = 2s;
  TCPStore client(c);
  client.set("k", "v");
  server.reset();
  CHECK_THROWS_AS(client.get("k"), CommError);
}
