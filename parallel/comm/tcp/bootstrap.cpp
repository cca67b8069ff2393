// Connecting the full mesh through the store (see the header).
#include "parallel/comm/tcp/bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "parallel/comm/tcp/wire.h"
#include "runtime/error.h"
#include "runtime/socket.h"

namespace spmd::dist::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// The first message on every mesh socket.
struct Hello {
  uint32_t magic = kMagic;
  uint32_t group = 0;
  int32_t rank = 0;
  int32_t channel = 0;  // 0: collectives, 1: point-to-point
};

// The local address of the interface the kernel would route `host` through
// (a UDP "connect" sends nothing); empty when host does not resolve.
std::string route_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string ip;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
      ip = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return ip;
}

std::chrono::milliseconds time_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

void tune_socket(int fd, size_t send_buffer) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (send_buffer > 0) {
    const int bytes = int(std::min<size_t>(send_buffer, 1 << 30));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  net::set_nonblocking(fd, true);
  net::set_cloexec(fd);
}

std::string addr_key(const std::string& group, int rank) { return str_cat(group, "/addr/", rank); }

// The interfaces the variables name, spmd's first, then Gloo's
// (torch.distributed's TCP backend reads it).
std::optional<net::NamedInterface> named_interface() {
  return net::interface_from_env({net::kSocketIfnameVar, "GLOO_SOCKET_IFNAME"});
}

// Connects to every lower rank, twice, and says hello on each socket. `ip`
// is this rank's own published address, for the error messages; `source`,
// when not empty, the address every connection leaves from.
void connect_down(Store& store, const std::string& group, int rank, const std::string& ip,
                  const std::string& source, std::chrono::milliseconds timeout, MeshSockets& out) {
  const auto deadline = Clock::now() + timeout;
  for (int peer = 0; peer < rank; ++peer) {
    std::string where;
    try {
      const Bytes value = store.get(addr_key(group, peer), time_left(deadline));
      where.assign(value.begin(), value.end());
    } catch (const TimeoutError& e) {
      SPMD_THROW(TimeoutError, "group ", group, ": rank ", peer, " never published its address, ",
                 "so rank ", rank, " cannot connect to it; did it create the group? (", e.what(),
                 ")");
    }
    const net::HostPort hp = net::parse_host_port(where, 0, "mesh address");
    for (int channel = 0; channel < 2; ++channel) {
      net::Socket s;
      try {
        s = net::connect_tcp(hp.host, hp.port, time_left(deadline), source);
      } catch (const TimeoutError& e) {
        SPMD_THROW(TimeoutError, mesh_connect_error(group, rank, ip, peer, where, e.what()));
      } catch (const Error& e) {
        SPMD_THROW(CommError, mesh_connect_error(group, rank, ip, peer, where, e.what()));
      }
      Hello hello{kMagic, group_hash(group), rank, channel};
      net::send_all(s.fd(), &hello, sizeof hello, deadline);
      (channel == 0 ? out.collective : out.p2p)[peer] = s.release();
    }
  }
}

// Accepts the 2 (size - 1 - rank) connections of the higher ranks.
void accept_up(int listen_fd, const std::string& group, int rank, const std::string& ip, int size,
               std::chrono::milliseconds timeout, MeshSockets& out) {
  const auto deadline = Clock::now() + timeout;
  for (int expected = 2 * (size - 1 - rank); expected > 0; --expected) {
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, net::poll_timeout_ms(deadline)) <= 0) {
      std::string missing;
      for (int r = rank + 1; r < size; ++r) {
        if (out.collective[r] < 0 || out.p2p[r] < 0)
          missing += str_cat(missing.empty() ? "" : ", ", r);
      }
      SPMD_THROW(TimeoutError, "group ", group, ": rank ", rank, " listening at ", ip, ":",
                 net::local_port(listen_fd), " waited ", timeout.count(), " ms for ranks [",
                 missing, "] to connect; did they all create the group, and can they reach ", ip,
                 "?");
    }
    net::Socket s(::accept(listen_fd, nullptr, nullptr));
    if (!s.valid()) continue;
    Hello hello;
    net::recv_all(s.fd(), &hello, sizeof hello, deadline);
    SPMD_CHECK(hello.magic == kMagic && hello.group == group_hash(group) && hello.rank > rank &&
                   hello.rank < size && (hello.channel == 0 || hello.channel == 1),
               "group ", group, ": rank ", rank,
               " got a connection that is not from a peer of "
               "this group (a stray client, or two groups sharing a name in one store)");
    (hello.channel == 0 ? out.collective : out.p2p)[hello.rank] = s.release();
  }
}

}  // namespace

std::string mesh_connect_error(const std::string& group, int rank, const std::string& ip, int peer,
                               const std::string& peer_address, const std::string& reason) {
  return str_cat("group ", group, ": rank ", rank, " (at ", ip, ") cannot connect to rank ", peer,
                 " at ", peer_address,
                 ", the address that rank published (SPMD_SOCKET_IFNAME, GLOO_SOCKET_IFNAME "
                 "or the route to the store chose it): ",
                 reason);
}

std::string advertised_address(const std::string& route_hint) {
  if (std::optional<net::NamedInterface> named = named_interface()) return named->address;
  if (!route_hint.empty()) {
    std::string ip = route_address(route_hint);
    if (!ip.empty()) return ip;
  }
  return "127.0.0.1";
}

MeshSockets connect_mesh(Store& store, const std::string& group, int rank, int size,
                         std::chrono::milliseconds timeout, const std::string& route_hint,
                         size_t send_buffer) {
  MeshSockets mesh{std::vector<int>(size, -1), std::vector<int>(size, -1)};
  if (size == 1) return mesh;
  // An interface the user named is also where this rank's connections leave
  // from, so a peer that cannot answer that address fails here, not later.
  const std::optional<net::NamedInterface> named = named_interface();
  const std::string ip = named ? named->address : advertised_address(route_hint);
  const std::string source = named ? ip : "";
  net::Socket listener = net::listen_tcp(ip, 0, 2 * size + 16);
  store.set(addr_key(group, rank), str_cat(ip, ":", net::local_port(listener.fd())));
  try {
    connect_down(store, group, rank, ip, source, timeout, mesh);
    accept_up(listener.fd(), group, rank, ip, size, timeout, mesh);
  } catch (...) {
    for (int fd : mesh.collective)
      if (fd >= 0) ::close(fd);
    for (int fd : mesh.p2p)
      if (fd >= 0) ::close(fd);
    throw;
  }
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    tune_socket(mesh.collective[peer], send_buffer);
    tune_socket(mesh.p2p[peer], send_buffer);
  }
  return mesh;
}

}  // namespace spmd::dist::tcp
