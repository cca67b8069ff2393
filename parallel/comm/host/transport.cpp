// Deciding each pair's transport (see the header).
#include "parallel/comm/host/transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "parallel/comm/shm/shm_channel.h"
#include "parallel/comm/tcp/bootstrap.h"
#include "runtime/error.h"
#include "runtime/socket.h"

namespace spmd::dist::host {

using namespace tcp;  // NOLINT: the backend composes tcp/ and shm/
using namespace shm;  // NOLINT
namespace {

const char* transport_name(Transport t) {
  return t == Transport::kShm ? "shm" : t == Transport::kTcp ? "tcp" : "auto";
}

// The settings every rank must share, as a person reads them.
std::string settings(const TransportChoice& c) {
  return str_cat(
      "SPMD_TRANSPORT=", transport_name(c.transport), " SPMD_TRANSPORT_HOST_SPLIT=", c.host_split,
      " SPMD_SHM_SLOT_BYTES=", c.slot_bytes, " SPMD_SHM_SEGMENT_MIN_BYTES=", c.segment_min_bytes,
      " SPMD_SHM_POST_BYTES=", c.post_bytes, " SPMD_SHM_ZERO_COPY_BYTES=", c.zero_copy_bytes,
      " SPMD_HIERARCHICAL=", hierarchy_mode_name(c.hierarchy),
      " SPMD_TCP_HIERARCHICAL_PIECE_BYTES=", c.piece_bytes);
}

// [peer]: "<host name> at <ip>" for the peers on other hosts, the address
// being the remote end of this rank's socket to that peer.
std::vector<std::string> remote_hosts(const std::vector<std::string>& other_hosts,
                                      const std::vector<int>& sockets) {
  std::vector<std::string> out(other_hosts.size());
  for (size_t peer = 0; peer < other_hosts.size(); ++peer) {
    if (other_hosts[peer].empty()) continue;
    std::string ip = net::peer_name(sockets[peer]);  // "ip:port", "[ip6]:port" or "?"
    ip = ip.substr(0, ip.rfind(':'));
    if (ip.size() > 1 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
    out[peer] = str_cat(other_hosts[peer], " at ", ip);
  }
  return out;
}

}  // namespace

TransportChoice transport_from_env() {
  TransportChoice c;
  if (const char* t = std::getenv("SPMD_TRANSPORT"); t && *t) {
    const std::string v = t;
    if (v == "auto") {
      c.transport = Transport::kAuto;
    } else if (v == "shm") {
      c.transport = Transport::kShm;
    } else if (v == "tcp") {
      c.transport = Transport::kTcp;
    } else {
      SPMD_THROW(InvalidArgument, "SPMD_TRANSPORT='", v, "': expected tcp, shm or auto");
    }
  }
  if (const char* s = std::getenv("SPMD_TRANSPORT_HOST_SPLIT"); s && *s) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    SPMD_CHECK(*end == '\0' && v >= 0, "SPMD_TRANSPORT_HOST_SPLIT='", s,
               "': expected a rank (an integer >= 0)");
    c.host_split = int(v);
  }
  c.hierarchy = hierarchy_mode_from_env();
  return c;
}

std::string host_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  const bool has_shm = ::stat("/dev/shm", &st) == 0;
  return str_cat(host, "/", boot.empty() ? "?" : boot, "/",
                 has_shm ? str_cat(st.st_dev, ":", st.st_ino) : std::string("no-dev-shm"));
}

ShmPlan shm_peers(Store& store, const std::string& group, int rank, int size,
                  std::chrono::milliseconds timeout, const TransportChoice& choice) {
  ShmPlan plan;
  std::vector<bool>& shm = plan.peers;
  shm.assign(size, false);
  plan.other_hosts.assign(size, "");
  plan.host_of.assign(size, 0);
  if (size == 1) return plan;
  bool all_same = true;
  const std::string my_settings = settings(choice), my_host = host_identity();
  auto key = [&](int r) { return str_cat(group, "/host/", r); };
  store.set(key(rank), my_settings + "|" + my_host);  // a host name has no '|'
  // Each rank's host as every rank sees it: its identity, and which side of
  // a host split it is on.
  std::vector<std::string> hosts(size);
  auto place = [&](int r, const std::string& identity) {
    const bool low = choice.host_split > 0 && r < choice.host_split;
    hosts[r] = str_cat(identity, low ? "|low" : "");
  };
  place(rank, my_host);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    Bytes value;
    try {
      value = store.get(key(peer), timeout);
    } catch (const TimeoutError& e) {
      SPMD_THROW(TimeoutError, "group ", group, ": rank ", peer,
                 " never published its host identity (", e.what(), ")");
    }
    const std::string theirs(value.begin(), value.end());
    const size_t cut = theirs.find('|');
    const std::string their_settings = theirs.substr(0, cut);
    const std::string their_host = cut == std::string::npos ? "" : theirs.substr(cut + 1);
    place(peer, their_host);
    SPMD_CHECK(their_settings == my_settings, "group ", group, ": rank ", rank, " has ",
               my_settings, " but rank ", peer, " has ", their_settings,
               ": every rank must set them alike");
    const bool split_apart =
        choice.host_split > 0 && (rank < choice.host_split) != (peer < choice.host_split);
    const bool same_host = !split_apart && their_host == my_host;
    if (choice.transport == Transport::kShm) {
      SPMD_CHECK(same_host, "SPMD_TRANSPORT=shm: ranks ", rank, " and ", peer, " of group ", group,
                 " are not on one host (",
                 split_apart ? str_cat("SPMD_TRANSPORT_HOST_SPLIT=", choice.host_split)
                             : str_cat(my_host, " vs ", their_host),
                 "); use SPMD_TRANSPORT=auto or tcp");
    }
    shm[peer] = same_host && choice.transport != Transport::kTcp;
    if (their_host != my_host) plan.other_hosts[peer] = their_host.substr(0, their_host.find('/'));
    all_same &= same_host;
  }
  // Identities all equal to this rank's are all equal: every rank concludes alike.
  plan.whole_group = all_same && choice.transport != Transport::kTcp;
  std::vector<std::string> seen;  // the hosts in order of their first rank
  for (int r = 0; r < size; ++r) {
    auto it = std::find(seen.begin(), seen.end(), hosts[r]);
    if (it == seen.end()) it = seen.insert(seen.end(), hosts[r]);
    plan.host_of[r] = int(it - seen.begin());
  }
  return plan;
}

GroupChannels connect_channels(Store& store, const std::string& group, int rank, int size,
                               std::chrono::milliseconds timeout, const std::string& route_hint,
                               const Tuning& tuning, const ShmTuning& shm_tuning) {
  TransportChoice choice = transport_from_env();  // a bad value fails before any I/O
  choice.slot_bytes = shm_tuning.slot_bytes;
  choice.segment_min_bytes = shm_tuning.segment_min_bytes;
  choice.post_bytes = shm_tuning.post_bytes;
  choice.zero_copy_bytes = shm_tuning.zero_copy_bytes;
  choice.piece_bytes = tuning.hierarchical_piece_bytes;
  MeshSockets sockets =
      connect_mesh(store, group, rank, size, timeout, route_hint, tuning.send_buffer_bytes);
  ShmPlan plan;
  try {
    plan = shm_peers(store, group, rank, size, timeout, choice);
  } catch (...) {
    for (int fd : sockets.collective)
      if (fd >= 0) ::close(fd);
    for (int fd : sockets.p2p)
      if (fd >= 0) ::close(fd);
    throw;
  }
  const auto deadline = net::Clock::now() + timeout;
  GroupChannels out;
  out.remote_hosts = remote_hosts(plan.other_hosts, sockets.collective);
  std::vector<int> p2p = std::move(sockets.p2p);
  const bool fallback = choice.transport == Transport::kAuto;
  try {
    out.collective = make_channels(std::move(sockets.collective), plan.peers, rank,
                                   shm_tuning.ring_bytes, fallback, deadline);
  } catch (...) {
    for (int fd : p2p)
      if (fd >= 0) ::close(fd);
    throw;
  }
  out.p2p =
      make_channels(std::move(p2p), plan.peers, rank, shm_tuning.ring_bytes, fallback, deadline);
  out.whole_group_shm = plan.whole_group;
  out.host_of = std::move(plan.host_of);
  out.hierarchy = choice.hierarchy;
  return out;
}

std::string where_ranks_run(const std::vector<int>& ranks,
                            const std::vector<std::string>& remote_hosts) {
  std::vector<std::pair<std::string, std::vector<int>>> hosts;  // in order of first rank
  bool all_remote = true;
  for (int r : ranks) {
    const std::string host = r >= 0 && size_t(r) < remote_hosts.size() ? remote_hosts[r] : "";
    if (host.empty()) {
      all_remote = false;
      continue;
    }
    auto it =
        std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == host; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {host, {}});
    it->second.push_back(r);
  }
  if (hosts.empty()) return "";
  if (all_remote && hosts.size() == 1) return str_cat(" (on ", hosts[0].first, ")");
  std::string text;
  for (const auto& [host, on_it] : hosts) {
    text += text.empty() ? " (" : "; ";
    text += on_it.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < on_it.size(); ++i) text += str_cat(i ? ", " : "", on_it[i]);
    text += str_cat(" on ", host);
  }
  return text + ")";
}

}  // namespace spmd::dist::host
