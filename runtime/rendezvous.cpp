// Rendezvous: parse the init method, build the store, join the barrier.
#include "runtime/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/file_store.h"
#include "runtime/hash_store.h"
#include "runtime/logging.h"
#include "runtime/prefix_store.h"
#include "runtime/socket.h"
#include "runtime/tcp_store.h"

namespace spmd {
namespace {

struct InitMethod {
  std::string scheme;  // "env", "tcp", "file"
  std::string target;  // "host:port" or a path
  std::map<std::string, std::string> query;
};

InitMethod parse_init_method(const std::string& text) {
  size_t sep = text.find("://");
  SPMD_CHECK(sep != std::string::npos, "init method '", text,
             "' is not one of env://, tcp://host:port, file:///path");
  InitMethod m;
  m.scheme = text.substr(0, sep);
  std::string rest = text.substr(sep + 3);
  size_t q = rest.find('?');
  m.target = rest.substr(0, q);
  for (size_t pos = q; pos != std::string::npos && pos + 1 < rest.size();) {
    size_t amp = rest.find('&', pos + 1);
    std::string item = rest.substr(pos + 1, amp == std::string::npos ? amp : amp - pos - 1);
    size_t eq = item.find('=');
    SPMD_CHECK(eq != std::string::npos, "init method '", text, "': query item '", item,
               "' is not name=value");
    m.query[item.substr(0, eq)] = item.substr(eq + 1);
    pos = amp;
  }
  return m;
}

// The argument when given (>= 0), else the query's value; they must agree.
int pick(const InitMethod& m, const std::string& name, int arg, const std::string& text) {
  auto it = m.query.find(name);
  if (it == m.query.end()) {
    SPMD_CHECK(arg >= 0, "init method '", text, "': the ", name, " is unknown; pass it or add ?",
               name, "=N");
    return arg;
  }
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  SPMD_CHECK(!it->second.empty() && *end == '\0' && v >= 0, "init method '", text, "': ", name,
             "='", it->second, "' is not a non-negative integer");
  SPMD_CHECK(arg < 0 || arg == v, "init method '", text, "': ", name, " ", arg,
             " disagrees with the URL's ", v);
  return static_cast<int>(v);
}

// A listening socket spawn() bound for rank 0, when it is for this port.
int take_inherited_listener(uint16_t port) {
  const char* text = std::getenv(kStoreListenFdVar);
  if (!text) return -1;
  int fd = std::atoi(text);
  ::unsetenv(kStoreListenFdVar);  // one use: a nested job must not adopt it too
  if (fd < 0 || net::local_port(fd) != port) {
    SPMD_LOG_WARN(kStoreListenFdVar, "=", text, " is not a socket listening on port ", port,
                  "; binding the port instead");
    return -1;
  }
  return fd;
}

// The job's TCPStore at host:port, hosted here when `serve`. With
// SPMD_SOCKET_IFNAME set, the server listens on that interface's address
// alone and this client connects from it.
std::shared_ptr<Store> tcp_store(const std::string& host, int port, bool serve,
                                 Store::Duration timeout) {
  SPMD_CHECK(port >= 1 && port <= 65535, "rendezvous: port ", port, " of ", host,
             " is not in 1..65535");
  const std::optional<net::NamedInterface> named = net::interface_from_env({net::kSocketIfnameVar});
  TCPStoreOptions o;
  o.host = host;
  o.port = static_cast<uint16_t>(port);
  o.is_server = serve;
  o.listen_fd = serve ? take_inherited_listener(o.port) : -1;
  o.listen_host = named ? named->address : "";
  o.source = named ? named->address : "";
  o.timeout = timeout;
  try {
    return std::make_shared<TCPStore>(o);
  } catch (const TimeoutError& e) {
    if (!named) throw;
    SPMD_THROW(TimeoutError, e.what(), "; this process connects from ", named->describe(),
               ": can that address reach ", host, "? (unset ", named->variable,
               " to let the routes choose)");
  }
}

Rendezvous from_env(int rank, int world_size, Store::Duration timeout) {
  LaunchEnv env = launch_env_from_environment();
  Rendezvous rv;
  rv.rank = rank >= 0 ? rank : env.rank;
  rv.world_size = world_size >= 0 ? world_size : env.world_size;
  rv.local_rank = env.local_rank;
  SPMD_CHECK(rv.rank < rv.world_size, "env://: rank ", rv.rank, " is not below the world size ",
             rv.world_size);
  if (!env.agent_store_host.empty()) {
    // spmdrun's store outlives restarts: each attempt gets its own keys.
    auto base = tcp_store(env.agent_store_host, env.agent_store_port, false, timeout);
    rv.store = std::make_shared<PrefixStore>(str_cat("attempt_", env.restart_count), base);
    return rv;
  }
  if (env.master_addr.empty() && env.master_port == 0 && rv.world_size == 1) {
    rv.store = std::make_shared<HashStore>(timeout);  // a world of one needs no server
    return rv;
  }
  SPMD_CHECK(!env.master_addr.empty(), "env:// (", env.launcher,
             "): MASTER_ADDR is not set; set it to the host of rank 0");
  SPMD_CHECK(env.master_port != 0, "env:// (", env.launcher,
             "): MASTER_PORT is not set; set it to a free port on ", env.master_addr);
  rv.store = tcp_store(env.master_addr, env.master_port, rv.rank == 0, timeout);
  return rv;
}

}  // namespace

Rendezvous rendezvous(const std::string& init_method, int rank, int world_size,
                      Store::Duration timeout) {
  InitMethod m = parse_init_method(init_method);
  Rendezvous rv;
  if (m.scheme == "env") {
    rv = from_env(rank, world_size, timeout);
  } else if (m.scheme == "tcp" || m.scheme == "file") {
    rv.rank = pick(m, "rank", rank, init_method);
    rv.world_size = pick(m, "world_size", world_size, init_method);
    rv.local_rank = rv.rank;
    SPMD_CHECK(rv.world_size >= 1 && rv.rank < rv.world_size, "init method '", init_method,
               "': rank ", rv.rank, " is not below the world size ", rv.world_size);
    if (m.scheme == "tcp") {
      net::HostPort hp = net::parse_host_port(m.target, -1, init_method);
      rv.store = tcp_store(hp.host, hp.port, rv.rank == 0, timeout);
    } else {
      SPMD_CHECK(!m.target.empty(), "init method '", init_method, "': no file path");
      rv.store = std::make_shared<FileStore>(m.target, rv.world_size, timeout);
    }
  } else {
    SPMD_THROW(InvalidArgument, "init method '", init_method, "': unknown scheme '", m.scheme,
               "' (expected env://, tcp://host:port or file:///path)");
  }
  store_barrier(*rv.store, "spmd/init", rv.rank, rv.world_size, timeout);
  SPMD_LOG_INFO("rendezvous ", init_method, ": rank ", rv.rank, " of ", rv.world_size, " joined");
  return rv;
}

namespace {

// "pid 4242 on host node3": who claims a rank, for the message that names both claimants.
std::string claimant() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  return str_cat("pid ", ::getpid(), " on host ", host);
}

}  // namespace

void store_barrier(Store& store, const std::string& name, int rank, int world_size,
                   Store::Duration timeout) {
  SPMD_CHECK(rank >= 0 && rank < world_size, "store_barrier '", name, "': rank ", rank,
             " is not in 0..", world_size - 1);
  // Arrivals are counted forever; arrival n belongs to generation (n-1)/world_size,
  // and the last arrival of a generation opens it for everyone.
  int64_t arrival = store.add(name + "/arrivals", 1);
  int64_t generation = (arrival - 1) / world_size;
  std::string gen = str_cat(name, "/", generation);
  // Each rank claims its slot with who it is; a second process that says it
  // is the same rank finds the slot taken, and says so for everyone.
  const std::string me = claimant();
  const Bytes mine(me.begin(), me.end());
  const Bytes holder = store.compare_set(str_cat(gen, "/rank", rank), {}, mine);
  std::string twice;
  if (holder != mine) {
    twice = str_cat("barrier '", name, "': two processes say they are rank ", rank, " of ",
                    world_size, ": ", std::string(holder.begin(), holder.end()), ", and ", me,
                    " (the launcher gave both the same rank; check RANK, or the scheduler's "
                    "task layout)");
    store.set(gen + "/twice", twice);
  }
  if (arrival % world_size == 0) store.set(gen + "/open", std::string_view("1"));
  if (!twice.empty()) SPMD_THROW(InvalidArgument, twice);
  try {
    store.wait({gen + "/open"}, timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    int arrived = 0;
    for (int r = 0; r < world_size; ++r) {
      if (store.check({str_cat(gen, "/rank", r)})) {
        ++arrived;
      } else {
        missing += str_cat(missing.empty() ? "" : ", ", r);
      }
    }
    SPMD_THROW(TimeoutError, "barrier '", name, "': only ", arrived, " of ", world_size,
               " ranks arrived within ", timeout.count(), " ms; missing rank(s) ", missing);
  }
  // Open means world_size arrivals, and each arrival claims its slot just
  // after counting itself: in a moment every slot is claimed, unless one was
  // claimed twice and so another stays empty, and the claimant that found
  // its slot taken writes why.
  std::vector<std::string> slots;
  for (int r = 0; r < world_size; ++r) slots.push_back(str_cat(gen, "/rank", r));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::min<Store::Duration>(timeout, std::chrono::seconds(5));
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    if (store.check(slots)) return;
    if (store.check({gen + "/twice"}))
      SPMD_THROW(InvalidArgument, store.get_string(gen + "/twice"));
    if (std::chrono::steady_clock::now() >= deadline)
      SPMD_THROW(InvalidArgument, "barrier '", name, "': ", world_size,
                 " processes arrived but not every rank of 0..", world_size - 1,
                 " did: two processes say they are the same rank");
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace spmd
