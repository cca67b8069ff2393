// The node rendezvous: host or reach the store, then join rounds on it.
// Every wait is cut into short slices so that a signal to the launcher is
// seen at once, and the whole wait is bounded by --rdzv-timeout.
#include "launcher/node_rendezvous.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/prefix_store.h"
#include "runtime/socket.h"
#include "runtime/tcp_store.h"

namespace spmd::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSlice = std::chrono::milliseconds(250);

std::string host_name() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// How long the launcher that hosts the store keeps serving, once its job is
// done, for clients still connected: its workers have ended by then, so
// only a stray client (a tool, a worker's orphan) would hold the launcher's
// exit, and 1 s bounds that. The other nodes' launchers read the outcome
// every --monitor-interval, so with several nodes it is at least two of those.
std::chrono::milliseconds store_linger(const LaunchOptions& o) {
  const auto one_second = std::chrono::milliseconds(1000);
  return o.nnodes > 1 ? std::max(one_second, seconds(2 * o.monitor_interval_s)) : one_second;
}

}  // namespace

NodeRendezvous::NodeRendezvous(const LaunchOptions& options, std::function<void()> check_interrupt)
    : options_(options),
      check_interrupt_(std::move(check_interrupt)),
      interface_(net::interface_from_env({net::kSocketIfnameVar})) {
  bool bound_all = false;
  net::Socket listener = claim_endpoint(&bound_all);
  connect(std::move(listener), bound_all);
  store_ = std::make_shared<PrefixStore>("spmdrun/" + options.run_id, tcp_);
  SPMD_LOG_INFO("store at ", store_host_, ":", store_port_, hosting() ? " (hosted here)" : "",
                interface_ ? ", reached from " + interface_->describe() : "");
}

net::Socket NodeRendezvous::claim_endpoint(bool* bound_all) {
  if (options_.standalone) {  // bound now: no other process can take the port
    store_host_ = interface_ ? interface_->address : "127.0.0.1";
    net::Socket listener = net::listen_tcp(store_host_, 0);
    store_port_ = net::local_port(listener.fd());
    return listener;
  }
  net::HostPort hp =
      options_.rdzv_endpoint.empty()
          ? net::HostPort{options_.master_addr, static_cast<uint16_t>(options_.master_port)}
          : net::parse_host_port(options_.rdzv_endpoint, 29500, "--rdzv-endpoint");
  store_host_ = hp.host;
  store_port_ = hp.port;
  node_rank_ = options_.node_rank >= 0 ? options_.node_rank : (options_.nnodes == 1 ? 0 : -1);
  if (node_rank_ == 0) {
    if (interface_) check_store_host(hp.host);
    try {
      *bound_all = !interface_;
      if (interface_) store_host_ = interface_->address;
      return net::listen_tcp(interface_ ? interface_->address : "", hp.port);
    } catch (const CommError& e) {
      SPMD_THROW(CommError, "cannot host the store: ", e.what(),
                 " (another job? pick another --master-port, or --standalone for a free one)");
    }
  }
  if (node_rank_ < 0) {
    try {  // the launcher that can bind the endpoint hosts; the others connect
      return net::listen_tcp(hp.host, hp.port);
    } catch (const Error&) {
    }
  }
  return net::Socket();
}

void NodeRendezvous::check_store_host(const std::string& host) const {
  // Only an address can be compared: a host name may resolve differently
  // here and on the other nodes (Debian maps its own name to 127.0.1.1).
  in_addr ignored{};
  if (options_.nnodes == 1 || ::inet_pton(AF_INET, host.c_str(), &ignored) != 1) return;
  SPMD_CHECK(host == interface_->address, "cannot host the store: ", interface_->describe(),
             " puts it on ", interface_->address, ", but the other nodes look for it at ", host,
             " (--master-addr or --rdzv-endpoint); name the interface that has ", host,
             ", or give ", interface_->address, " to every node");
}

void NodeRendezvous::connect(net::Socket listener, bool bound_all) {
  bool hosting = listener.valid();
  TCPStoreOptions o;
  o.host = hosting && bound_all ? "127.0.0.1" : store_host_;
  o.port = static_cast<uint16_t>(store_port_);
  o.is_server = hosting;
  o.listen_fd = listener.release();
  o.source = interface_ ? interface_->address : "";
  o.timeout = kSlice;  // short attempts, so that signals are seen between them
  o.linger = store_linger(options_);
  auto deadline = Clock::now() + seconds(options_.rdzv_timeout_s);
  for (;;) {
    try {
      tcp_ = std::make_shared<TCPStore>(o);
      break;
    } catch (const TimeoutError& e) {
      check_interrupt_();
      if (Clock::now() >= deadline)
        SPMD_THROW(TimeoutError, "cannot reach the store at ", store_host_, ":", store_port_,
                   " within ", options_.rdzv_timeout_s, " s (", e.what(), "); ",
                   interface_ ? str_cat("this launcher connects from ", interface_->describe(),
                                        ": can that address reach ", store_host_, "? Is")
                              : std::string("is"),
                   " node 0's launcher running, and are the address and port right?");
    }
  }
  // --rdzv-conf read_timeout bounds each store operation (60 s unless set,
  // as torchrun's): a launcher cut off from the store gives up within it.
  // The rendezvous's own waits are slices of kSlice under their deadline.
  tcp_->set_timeout(seconds(options_.store_timeout_s));
}

NodeRendezvous::~NodeRendezvous() = default;

bool NodeRendezvous::hosting() const { return tcp_ && tcp_->is_server(); }

Store& NodeRendezvous::worker_store() { return *tcp_; }

NodeAssignment NodeRendezvous::join(int round) {
  std::string rk = str_cat("round", round, "/");
  int node = take_node_rank(rk);
  store_->set(str_cat(rk, "node/", node), str_cat(options_.nproc_per_node, " ", host_name()));
  // Set before node 0 joins the barrier, so every node finds it once it opens.
  if (node == 0) store_->set(rk + "master", choose_worker_master());
  wait_for_nodes(rk, node);
  NodeAssignment a;
  a.group_rank = node;
  a.group_world_size = options_.nnodes;
  a.world_size = 0;
  for (int n = 0; n < options_.nnodes; ++n) {
    std::string info = store_->get_string(str_cat(rk, "node/", n));
    int nproc = std::stoi(info);  // "<nproc> <host>"
    if (n < node) a.rank_offset += nproc;
    if (n == node) a.local_world_size = nproc;
    a.world_size += nproc;
  }
  std::string master = store_->get_string(rk + "master");  // "<port>" or "<port> <addr>"
  size_t space = master.find(' ');
  a.master_port = std::stoi(master);
  // No address: node 0 hosts the store, and each node names it as it reaches the store.
  a.master_addr = space == std::string::npos ? store_host_ : master.substr(space + 1);
  return a;
}

int NodeRendezvous::take_node_rank(const std::string& rk) {
  if (node_rank_ >= 0) {
    std::string token = str_cat(host_name(), ":", ::getpid());
    Bytes mine(token.begin(), token.end());
    Bytes got = store_->compare_set(str_cat(rk, "claim/", node_rank_), {}, mine);
    SPMD_CHECK(got == mine, "node rank ", node_rank_, " of run '", options_.run_id,
               "' is already taken by the launcher ", std::string(got.begin(), got.end()),
               "; give each launcher its own --node-rank");
    return node_rank_;
  }
  int node = static_cast<int>(store_->add(rk + "arrivals", 1) - 1);
  SPMD_CHECK(node < options_.nnodes, "more than --nnodes ", options_.nnodes,
             " launchers joined run '", options_.run_id, "'");
  return node;
}

void NodeRendezvous::wait_for_nodes(const std::string& rk, int node) {
  if (store_->add(rk + "joined", 1) == options_.nnodes) store_->set(rk + "open", "1");
  auto deadline = Clock::now() + seconds(options_.rdzv_timeout_s);
  for (;;) {
    try {
      store_->wait({rk + "open"}, kSlice);
      return;
    } catch (const TimeoutError&) {
      check_interrupt_();
      if (Clock::now() < deadline) continue;
    }
    std::string missing;
    int joined = 0;
    for (int n = 0; n < options_.nnodes; ++n) {
      if (store_->check({str_cat(rk, "node/", n)})) {
        ++joined;
      } else {
        missing += str_cat(missing.empty() ? "" : ", ", n);
      }
    }
    SPMD_THROW(TimeoutError, "rendezvous of run '", options_.run_id, "' at ", store_host_, ":",
               store_port_, ": only ", joined, " of ", options_.nnodes, " nodes joined within ",
               options_.rdzv_timeout_s, " s; missing node rank(s) ", missing, " (node ", node,
               " is here; every launcher needs --nnodes ", options_.nnodes,
               " and the same endpoint)");
  }
}

std::string NodeRendezvous::choose_worker_master() {
  // A port the kernel finds free, released at once: the program binds it, not
  // spmdrun (torchrun's agent chooses MASTER_PORT the same way).
  std::string port = std::to_string(net::local_port(net::listen_tcp("", 0).fd()));
  if (hosting()) return port;
  // Node 0 is not the store's host: its address is this end of a connection
  // to the store, which the other nodes reach too.
  net::Socket probe =
      net::connect_tcp(store_host_, static_cast<uint16_t>(store_port_),
                       seconds(options_.rdzv_timeout_s), interface_ ? interface_->address : "");
  return str_cat(port, " ", net::local_ip(probe.fd()));
}

void NodeRendezvous::report_failure(int round, const std::string& what) {
  Bytes b(what.begin(), what.end());
  store_->compare_set(str_cat("round", round, "/failed"), {}, b);
}

std::optional<std::string> NodeRendezvous::failure(int round) {
  std::string key = str_cat("round", round, "/failed");
  if (!store_->check({key})) return std::nullopt;
  return store_->get_string(key);
}

void NodeRendezvous::mark_done(int round, int group_rank) {
  store_->set(str_cat("round", round, "/done/", group_rank), "1");
}

bool NodeRendezvous::all_done(int round) {
  std::vector<std::string> keys;
  for (int n = 0; n < options_.nnodes; ++n) keys.push_back(str_cat("round", round, "/done/", n));
  return store_->check(keys);
}

}  // namespace spmd::launcher
