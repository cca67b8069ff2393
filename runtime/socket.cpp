// TCP socket helpers: every call either finishes or throws by its deadline.
// Sockets are non-blocking and waits happen in poll(), so a deadline is a
// number of milliseconds handed to the kernel, never a busy loop.
#include "runtime/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace spmd::net {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) freeaddrinfo(head);
  }
};

// Resolves host:port; returns the getaddrinfo error code (0 on success).
int resolve(const std::string& host, uint16_t port, int flags, AddrInfoList& out,
            int family = AF_UNSPEC) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  std::string service = std::to_string(port);
  return getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.head);
}

std::string sockaddr_ip(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    auto& a6 = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &a6.sin6_addr, buf, sizeof buf);
    // An IPv4 peer seen through a dual-stack socket: show the plain IPv4 form.
    if (IN6_IS_ADDR_V4MAPPED(&a6.sin6_addr)) return std::string(buf).substr(7);
  }
  return buf;
}

uint16_t sockaddr_port(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

// Binds and listens a socket of the given family; returns the errno on failure.
int try_listen(int family, const sockaddr* addr, socklen_t len, int backlog, Socket& out) {
  Socket s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return errno;
  int one = 1, zero = 0;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6) setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (::bind(s.fd(), addr, len) != 0) return errno;
  if (::listen(s.fd(), backlog) != 0) return errno;
  out = std::move(s);
  return 0;
}

[[noreturn]] void throw_listen_error(const std::string& host, uint16_t port, int err) {
  std::string where = str_cat(host.empty() ? "*" : host, ":", port);
  if (err == EADDRINUSE)
    SPMD_THROW(CommError, "listen on ", where, ": port ", port, " is already in use");
  if (err == EADDRNOTAVAIL)
    SPMD_THROW(CommError, "listen on ", where, ": '", host, "' is not an address of this machine");
  SPMD_THROW(CommError, "listen on ", where, ": ", errno_text(err));
}

// One connection attempt to one address, from `source` when it is not null;
// returns the errno (0 on success).
int try_connect(const addrinfo* ai, const addrinfo* source, Deadline deadline, Socket& out) {
  Socket s(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return errno;
  if (source && ::bind(s.fd(), source->ai_addr, source->ai_addrlen) != 0) return errno;
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{s.fd(), POLLOUT, 0};
    int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n == 0) return ETIMEDOUT;
    if (n < 0) return errno;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  out = std::move(s);
  return 0;
}

// Waits until fd is ready for `events` or the deadline passes.
void wait_ready(int fd, short events, Deadline deadline, const char* what) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return;
    if (n == 0) SPMD_THROW(TimeoutError, what, " timed out (peer ", peer_name(fd), ")");
    if (errno != EINTR) SPMD_THROW(CommError, what, ": poll: ", errno_text(errno));
  }
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

HostPort parse_host_port(std::string_view text, int default_port, std::string_view what) {
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {  // [v6]:port
    size_t close = text.find(']');
    SPMD_CHECK(close != std::string_view::npos, what, ": missing ']' in '", text, "'");
    hp.host = std::string(text.substr(1, close - 1));
    if (close + 1 < text.size() && text[close + 1] == ':') port_text = text.substr(close + 2);
  } else if (size_t colon = text.rfind(':');
             colon != std::string_view::npos && text.find(':') == colon) {
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  } else {
    hp.host = std::string(text);
  }
  SPMD_CHECK(!port_text.empty() || default_port >= 0, what, ": no port in '", text,
             "' (expected host:port)");
  long port = default_port;
  if (!port_text.empty()) {
    std::string p(port_text);
    char* end = nullptr;
    port = std::strtol(p.c_str(), &end, 10);
    SPMD_CHECK(*end == '\0', what, ": port '", p, "' in '", text, "' is not a number");
  }
  SPMD_CHECK(port >= 0 && port <= 65535, what, ": port ", port, " in '", text,
             "' is not in 0..65535");
  SPMD_CHECK(!hp.host.empty(), what, ": no host in '", text, "'");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

Socket listen_tcp(const std::string& host, uint16_t port, int backlog) {
  Socket s;
  if (host.empty() || host == "0.0.0.0" || host == "*") {
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(port);
    int err = try_listen(AF_INET6, reinterpret_cast<sockaddr*>(&a6), sizeof a6, backlog, s);
    if (err == 0) return s;
    if (err == EADDRINUSE) throw_listen_error(host, port, err);
    sockaddr_in a4{};  // no IPv6 in this kernel or namespace: IPv4 alone
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons(port);
    err = try_listen(AF_INET, reinterpret_cast<sockaddr*>(&a4), sizeof a4, backlog, s);
    if (err != 0) throw_listen_error(host, port, err);
    return s;
  }
  AddrInfoList list;
  int rc = resolve(host, port, AI_PASSIVE, list);
  SPMD_CHECK(rc == 0, "listen on ", host, ":", port, ": cannot resolve '", host,
             "': ", gai_strerror(rc));
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = list.head; ai; ai = ai->ai_next) {
    err = try_listen(ai->ai_family, ai->ai_addr, ai->ai_addrlen, backlog, s);
    if (err == 0) return s;
  }
  throw_listen_error(host, port, err);
}

Socket connect_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                   const std::string& source) {
  Deadline deadline = Clock::now() + timeout;
  // The source, when given, decides the family: an IPv4 source reaches IPv4 addresses only.
  AddrInfoList from;
  if (!source.empty()) {
    int rc = resolve(source, 0, AI_NUMERICHOST | AI_PASSIVE, from);
    SPMD_CHECK(rc == 0, "connect to ", host, ":", port, " from ", source, ": '", source,
               "' is not an IP address (", gai_strerror(rc), ")");
    Socket probe(::socket(from.head->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    SPMD_CHECK(::bind(probe.fd(), from.head->ai_addr, from.head->ai_addrlen) == 0, "connect to ",
               host, ":", port, " from ", source, ": cannot use ", source, " as a source (",
               errno_text(errno), "; is it an address of this machine?)");
  }
  const std::string from_text = source.empty() ? "" : str_cat(" from ", source);
  auto pause = std::chrono::milliseconds(10);
  std::string last_error = "no attempt finished";
  for (;;) {
    AddrInfoList list;
    int rc = resolve(host, port, 0, list, from.head ? from.head->ai_family : AF_UNSPEC);
    if (rc == EAI_NONAME)
      SPMD_THROW(InvalidArgument, "connect to ", host, ":", port, from_text, ": unknown host '",
                 host, "'");
    if (rc != 0) last_error = gai_strerror(rc);
    for (addrinfo* ai = rc == 0 ? list.head : nullptr; ai; ai = ai->ai_next) {
      Socket s;
      int err = try_connect(ai, from.head, deadline, s);
      if (err == 0) return s;
      last_error = errno_text(err);
    }
    if (Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  SPMD_THROW(TimeoutError, "connect to ", host, ":", port, from_text,
             ": no server answered within ", timeout.count(), " ms (last error: ", last_error, ")");
}

std::string NamedInterface::describe() const {
  return str_cat(variable, "=", name, " (", address, ")");
}

std::string interface_address(const std::string& ifname, const std::string& variable) {
  ifaddrs* list = nullptr;
  SPMD_CHECK(getifaddrs(&list) == 0, variable, ": cannot list interfaces: ", errno_text(errno));
  std::string found, names;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    names += str_cat(names.empty() ? "" : ", ", a->ifa_name, " (", buf, ")");
    if (found.empty() && ifname == a->ifa_name) found = buf;
  }
  freeifaddrs(list);
  SPMD_CHECK(!found.empty(), variable, "=", ifname,
             ": no interface of that name has an IPv4 address; those that have one: ",
             names.empty() ? std::string("none") : names);
  return found;
}

std::optional<NamedInterface> interface_from_env(std::initializer_list<const char*> variables) {
  for (const char* variable : variables) {
    const char* ifname = std::getenv(variable);
    if (ifname && *ifname)
      return NamedInterface{variable, ifname, interface_address(ifname, variable)};
  }
  return std::nullopt;
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  return sockaddr_port(ss);
}

std::string local_ip(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddr_ip(ss);
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return str_cat(sockaddr_ip(ss), ":", sockaddr_port(ss));
}

void send_all(int fd, const void* buf, size_t n, Deadline deadline) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline, "send");
    } else if (k < 0 && errno != EINTR) {
      SPMD_THROW(CommError, "send to ", peer_name(fd), ": ", errno_text(errno));
    }
  }
}

void recv_all(int fd, void* buf, size_t n, Deadline deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k == 0) {
      SPMD_THROW(CommError, "connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline, "recv");
    } else if (errno != EINTR) {
      SPMD_THROW(CommError, "recv: ", errno_text(errno));
    }
  }
}

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void set_cloexec(int fd) { fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC); }

int poll_timeout_ms(Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 24LL * 3600 * 1000));
}

}  // namespace spmd::net
