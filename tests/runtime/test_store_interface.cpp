// The interface the store uses (runtime/socket.h, runtime/tcp_store.h): a
// connection from a chosen source address, a server bound to one address
// alone, SPMD_SOCKET_IFNAME read into both by the rendezvous, and the
// errors a user meets when the name or the address is wrong. All on
// loopback, which holds every address of 127/8: 127.0.0.2 and 127.0.0.3
// stand for a second and a third interface.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/error.h"
#include "runtime/rendezvous.h"
#include "runtime/socket.h"
#include "runtime/tcp_store.h"
#include "tests/scoped_env.h"

using namespace spmd;
using namespace std::chrono_literals;

namespace {

using Env = spmd::testing::ScopedEnv;

// A port that nothing listens on (bound, then let go).
uint16_t free_port() { return net::local_port(net::listen_tcp("", 0).fd()); }

}  // namespace

TEST_CASE("connect_tcp leaves from the source address it is given", "[socket]") {
  net::Socket server = net::listen_tcp("127.0.0.1", 0);
  const uint16_t port = net::local_port(server.fd());
  CHECK(net::local_ip(net::connect_tcp("127.0.0.1", port, 2s).fd()) == "127.0.0.1");
  CHECK(net::local_ip(net::connect_tcp("127.0.0.1", port, 2s, "127.0.0.2").fd()) == "127.0.0.2");
  CHECK(net::local_ip(net::connect_tcp("localhost", port, 2s, "127.0.0.3").fd()) == "127.0.0.3");
  // 203.0.113.77 (TEST-NET-3, documentation only) is no address of this
  // machine: refused at once, not retried.
  const auto t0 = net::Clock::now();
  CHECK_THROWS_WITH(net::connect_tcp("127.0.0.1", port, 5s, "203.0.113.77"),
                    Catch::Contains("cannot use 203.0.113.77 as a source"));
  CHECK(net::Clock::now() - t0 < 1s);
  CHECK_THROWS_AS(net::connect_tcp("127.0.0.1", port, 1s, "not-an-address"), InvalidArgument);
}

TEST_CASE("interface_from_env names the interface, or lists those that exist", "[socket]") {
  {
    Env spmd(net::kSocketIfnameVar, nullptr);
    CHECK_FALSE(net::interface_from_env({net::kSocketIfnameVar}).has_value());
  }
  {
    Env spmd(net::kSocketIfnameVar, "lo");
    std::optional<net::NamedInterface> lo = net::interface_from_env({net::kSocketIfnameVar});
    REQUIRE(lo.has_value());
    CHECK(lo->address == "127.0.0.1");
    CHECK(lo->describe() == "SPMD_SOCKET_IFNAME=lo (127.0.0.1)");
  }
  {
    Env spmd(net::kSocketIfnameVar, "nosuch0");
    CHECK_THROWS_WITH(net::interface_from_env({net::kSocketIfnameVar}),
                      Catch::Contains("SPMD_SOCKET_IFNAME=nosuch0: no interface of that name has "
                                      "an IPv4 address; those that have one: ") &&
                          Catch::Contains("lo (127.0.0.1)"));
  }
}

TEST_CASE("a store server bound to one address serves there and nowhere else", "[store][tcp]") {
  TCPStoreOptions o;
  o.host = "127.0.0.2";
  o.is_server = true;
  o.listen_host = "127.0.0.2";
  o.timeout = 2s;
  TCPStore server(o);
  server.set("k", "v");

  TCPStoreOptions c;
  c.host = "127.0.0.2";
  c.port = server.port();
  c.source = "127.0.0.3";
  c.timeout = 2s;
  TCPStore client(c);
  CHECK(client.get_string("k") == "v");
  CHECK(client.local_address() == "127.0.0.3");  // the source, not the route's choice

  // The same port on 127.0.0.1 has no server: refused until the timeout.
  c.host = "127.0.0.1";
  c.timeout = 300ms;
  const auto t0 = net::Clock::now();
  CHECK_THROWS_WITH(TCPStore(c), Catch::Contains(str_cat("connect to 127.0.0.1:", server.port(),
                                                         " from 127.0.0.3: no server answered")));
  CHECK(net::Clock::now() - t0 < 2s);
}

TEST_CASE("SPMD_SOCKET_IFNAME chooses the store's address in the rendezvous", "[rendezvous]") {
  const uint16_t port = free_port();
  {  // rank 0 of a world of one hosts the store on lo's address and reaches it from there
    Env spmd(net::kSocketIfnameVar, "lo");
    Rendezvous rv = rendezvous(str_cat("tcp://127.0.0.1:", port), 0, 1, 3s);
    CHECK(dynamic_cast<TCPStore&>(*rv.store).local_address() == "127.0.0.1");
  }
  {  // the server listens on 127.0.0.1 alone: a client that looks for it on 127.0.0.2
     // fails within its timeout, naming the store, the source and the variable
    Env spmd(net::kSocketIfnameVar, "lo");
    TCPStoreOptions o;
    o.is_server = true;
    o.listen_host = "127.0.0.1";
    TCPStore server(o);
    const auto t0 = net::Clock::now();
    CHECK_THROWS_WITH(
        rendezvous(str_cat("tcp://127.0.0.2:", server.port()), 1, 2, 500ms),
        Catch::Contains(str_cat("connect to 127.0.0.2:", server.port(), " from 127.0.0.1")) &&
            Catch::Contains("this process connects from SPMD_SOCKET_IFNAME=lo (127.0.0.1): "
                            "can that address reach 127.0.0.2?"));
    CHECK(net::Clock::now() - t0 < 3s);
  }
  {  // a name no interface has stops the rendezvous before it connects
    Env spmd(net::kSocketIfnameVar, "nosuch0");
    CHECK_THROWS_WITH(rendezvous(str_cat("tcp://127.0.0.1:", port), 0, 1, 1s),
                      Catch::Contains("SPMD_SOCKET_IFNAME=nosuch0: no interface") &&
                          Catch::Contains("lo (127.0.0.1)"));
  }
}
