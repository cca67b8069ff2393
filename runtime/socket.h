// TCP sockets as the store and the launcher use them: listen (port 0 picks a
// free port), connect with retry until a deadline (from a chosen source
// address when asked), and exact-length send and receive that end in a
// TimeoutError or CommError instead of blocking forever. An owned file
// descriptor is a Socket (closed by its destructor). Also the address of an
// interface a user names by an environment variable (SPMD_SOCKET_IFNAME).
//
// Not here: the framing of store messages (runtime/store_wire.h) and the
// collective transports of parallel/comm/, which have their own needs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace spmd::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// An owned file descriptor. Move-only; closes on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller now closes the descriptor.
  int release();
  void close();

 private:
  int fd_ = -1;
};

// host:port as given by a user ("node0:29500", "[::1]:29500").
struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Parses "host:port" or "host" (then default_port). Throws InvalidArgument
// naming `what` (e.g. "--rdzv-endpoint") when the port is not 0..65535.
HostPort parse_host_port(std::string_view text, int default_port, std::string_view what);

// A listening TCP socket on host:port. An empty host or "0.0.0.0" means every
// interface (IPv6 and IPv4 where the kernel allows both). Port 0 picks a free
// port; read it back with local_port(). Throws CommError ("port 29500 is
// already in use") when the address cannot be bound.
Socket listen_tcp(const std::string& host, uint16_t port, int backlog = 512);

// Connects to host:port, retrying refused or unreachable attempts with a
// growing pause until `timeout` passes. With a `source` address, each
// attempt binds it first (any port), so the connection leaves from it and
// the peer answers to it. Throws TimeoutError naming the address, the source
// and the last error, or InvalidArgument when the host never resolves or the
// source is not an address of this machine.
Socket connect_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                   const std::string& source = "");

// An interface a user chose by name through an environment variable.
struct NamedInterface {
  std::string variable;  // "SPMD_SOCKET_IFNAME"
  std::string name;      // "eth1"
  std::string address;   // its IPv4 address, "10.0.0.5"
  // "SPMD_SOCKET_IFNAME=eth1 (10.0.0.5)", for messages.
  std::string describe() const;
};

// The variable that picks the interface of the store's sockets (and, first
// of two, of parallel/comm's links): spmdrun's store listens on its address,
// and store clients connect from it.
inline constexpr const char* kSocketIfnameVar = "SPMD_SOCKET_IFNAME";

// The IPv4 address of interface `ifname`. Throws InvalidArgument naming
// `variable` (where the name came from) and listing the interfaces that have
// an IPv4 address when `ifname` has none or does not exist.
std::string interface_address(const std::string& ifname, const std::string& variable);

// The interface named by the first of `variables` that is set and not
// empty; nullopt when none is. Throws as interface_address does.
std::optional<NamedInterface> interface_from_env(std::initializer_list<const char*> variables);

// The port of a bound socket, and the IP of this end of a connected one (the
// interface through which this process reaches its peer).
uint16_t local_port(int fd);
std::string local_ip(int fd);
// "ip:port" of the remote end, for messages; "?" when unknown.
std::string peer_name(int fd);

// Writes all of buf, or throws: CommError when the peer is gone, TimeoutError
// when the deadline passes first. Never raises SIGPIPE.
void send_all(int fd, const void* buf, size_t n, Deadline deadline);
// Reads exactly n bytes, or throws (CommError on EOF, TimeoutError on deadline).
void recv_all(int fd, void* buf, size_t n, Deadline deadline);

void set_nonblocking(int fd, bool on);
void set_cloexec(int fd);

// Milliseconds left until `deadline` for poll(), at least 0, capped at a day.
int poll_timeout_ms(Deadline deadline);

}  // namespace spmd::net
