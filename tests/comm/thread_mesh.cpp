// Loopback TCP pairs between threads: for each pair of ranks, listen on an
// ephemeral port, connect, accept.
#include "thread_mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "runtime/error.h"

namespace spmd::dist::tcp::testing {
namespace {

std::pair<int, int> loopback_pair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  SPMD_CHECK(::bind(listener, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                 ::listen(listener, 1) == 0 &&
                 ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0,
             "loopback_pair: cannot listen");
  const int a = ::socket(AF_INET, SOCK_STREAM, 0);
  SPMD_CHECK(::connect(a, reinterpret_cast<sockaddr*>(&addr), len) == 0, "loopback_pair: connect");
  const int b = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  for (int fd : {a, b}) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return {a, b};
}

}  // namespace

void run_on_threads(int p, const Tuning& tuning, const Header& header,
                    const std::function<void(Context&)>& fn, std::chrono::milliseconds timeout) {
  std::vector<std::vector<std::unique_ptr<Link>>> links(p);
  for (auto& l : links) l.resize(p);
  for (int i = 0; i < p; ++i) {
    for (int j = i + 1; j < p; ++j) {
      auto [a, b] = loopback_pair();
      links[i][j] = std::make_unique<Link>(j, a);
      links[j][i] = std::make_unique<Link>(i, b);
    }
  }
  std::vector<std::exception_ptr> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        Mesh mesh(r, p, std::move(links[r]));
        Workspace workspace;
        Context ctx{mesh, workspace, tuning};
        mesh.begin(header, Mesh::Clock::now() + timeout);
        fn(ctx);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace spmd::dist::tcp::testing
