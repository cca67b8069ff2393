// Store semantics, the same cases for every kind of store (HashStore,
// FileStore, TCPStore, PrefixStore over a TCPStore): the expected values are
// the contract of runtime/store.h worked through by hand.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <thread>

#include "runtime/error.h"
#include "runtime/file_store.h"
#include "runtime/hash_store.h"
#include "runtime/prefix_store.h"
#include "runtime/tcp_store.h"

using namespace spmd;
using namespace std::chrono_literals;

namespace {

std::string temp_path(const char* tag) {
  return "/tmp/spmd_test_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" +
         std::to_string(std::rand());
}

std::shared_ptr<Store> make_store(const std::string& kind) {
  if (kind == "hash") return std::make_shared<HashStore>(2s);
  if (kind == "file") return std::make_shared<FileStore>(temp_path("fs"), 1, 2s);
  TCPStoreOptions o;
  o.is_server = true;
  o.timeout = 2s;
  auto tcp = std::make_shared<TCPStore>(o);
  if (kind == "tcp") return tcp;
  return std::make_shared<PrefixStore>("job7", tcp);  // "prefix"
}

Bytes bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

}  // namespace

TEST_CASE("every store: set, get, overwrite, binary values", "[store]") {
  auto kind = GENERATE(as<std::string>{}, "hash", "file", "tcp", "prefix");
  INFO("store kind " << kind);
  auto store = make_store(kind);
  store->set("a", "1");
  CHECK(store->get_string("a") == "1");
  store->set("a", "two");
  CHECK(store->get_string("a") == "two");
  Bytes binary{0, 1, 0, 255, 10, 13};
  store->set("bin", binary);
  CHECK(store->get("bin") == binary);
  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  store->set("big", big);
  CHECK(store->get("big") == big);
  store->set("", "empty key");
  CHECK(store->get_string("") == "empty key");
}

TEST_CASE("every store: add counts from zero and refuses non-integers", "[store]") {
  auto kind = GENERATE(as<std::string>{}, "hash", "file", "tcp", "prefix");
  INFO("store kind " << kind);
  auto store = make_store(kind);
  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -2) == 3);
  CHECK(store->add("n", 0) == 3);
  CHECK(store->get_string("n") == "3");
  store->set("word", "hello");
  CHECK_THROWS_AS(store->add("word", 1), InvalidArgument);
  CHECK_THROWS_WITH(store->add("word", 1),
                    Catch::Contains("word'") && Catch::Contains("not an integer"));
  CHECK(store->get_string("word") == "hello");  // unchanged by the refused add
}

TEST_CASE("every store: compare_set follows the contract", "[store]") {
  auto kind = GENERATE(as<std::string>{}, "hash", "file", "tcp", "prefix");
  INFO("store kind " << kind);
  auto store = make_store(kind);
  // Absent and expected non-empty: nothing happens, the key stays absent.
  CHECK(store->compare_set("k", bytes("x"), bytes("y")).empty());
  CHECK_FALSE(store->check({"k"}));
  // Absent and expected empty: created.
  CHECK(store->compare_set("k", {}, bytes("first")) == bytes("first"));
  // Present and equal: swapped.
  CHECK(store->compare_set("k", bytes("first"), bytes("second")) == bytes("second"));
  // Present and different: the current value comes back, unchanged.
  CHECK(store->compare_set("k", bytes("first"), bytes("third")) == bytes("second"));
  CHECK(store->get_string("k") == "second");
}

TEST_CASE("every store: check, delete_key, num_keys", "[store]") {
  auto kind = GENERATE(as<std::string>{}, "hash", "file", "tcp", "prefix");
  INFO("store kind " << kind);
  auto store = make_store(kind);
  CHECK(store->num_keys() == 0);
  store->set("x", "1");
  store->set("y", "2");
  store->add("z", 1);
  CHECK(store->num_keys() == 3);
  CHECK(store->check({"x", "y"}));
  CHECK_FALSE(store->check({"x", "nope"}));
  CHECK(store->delete_key("x"));
  CHECK_FALSE(store->delete_key("x"));
  CHECK_FALSE(store->check({"x"}));
  CHECK(store->num_keys() == 2);
  CHECK_THROWS_AS(store->get("x", 50ms), TimeoutError);
}

TEST_CASE("every store: get and wait time out naming the missing key", "[store]") {
  auto kind = GENERATE(as<std::string>{}, "hash", "file", "tcp", "prefix");
  INFO("store kind " << kind);
  auto store = make_store(kind);
  store->set("here", "1");
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(store->get("never-set", 150ms), Catch::Contains("never-set"));
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 150ms);
  CHECK(waited < 2s);
  try {
    store->wait({"here", "absent-one"}, 100ms);
    FAIL("wait returned although a key is missing");
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    size_t pos = what.find("waiting for key");
    REQUIRE(pos != std::string::npos);
    CHECK(what.find("absent-one'", pos) != std::string::npos);
    CHECK(what.find("here'", pos) == std::string::npos);  // only the missing are named
  }
  store->set_timeout(120ms);
  CHECK_THROWS_AS(store->get("still-never"), TimeoutError);  // the store's own timeout
}

TEST_CASE("every store: a waiter wakes when another thread sets the key", "[store]") {
  auto kind = GENERATE(as<std::string>{}, "hash", "file", "tcp", "prefix");
  INFO("store kind " << kind);
  auto store = make_store(kind);
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    store->set("late", "arrived");
  });
  // One store object in both threads: the blocked get must not stop the set.
  CHECK(store->get_string("late") == "arrived");
  store->wait({"late"}, 1s);
  writer.join();
}

TEST_CASE("PrefixStore keeps namespaces apart over one base store", "[store]") {
  auto base = std::make_shared<HashStore>(1s);
  PrefixStore a("a", base), b("b", base);
  a.set("x", "from a");
  b.set("x", "from b");
  CHECK(a.get_string("x") == "from a");
  CHECK(b.get_string("x") == "from b");
  CHECK(base->get_string("a/x") == "from a");
  CHECK(a.add("n", 2) == 2);
  CHECK(b.add("n", 5) == 5);
  CHECK_FALSE(a.check({"only-b"}));
  CHECK(base->num_keys() == 4);
  CHECK_THROWS_AS(PrefixStore("p", nullptr), InvalidArgument);
}

TEST_CASE("HashStore: concurrent adds from many threads all count", "[store]") {
  HashStore store(2s);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) store.add("count", 1);
    });
  for (auto& t : threads) t.join();
  CHECK(store.add("count", 0) == 8 * 500);
}
