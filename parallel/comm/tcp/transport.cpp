// Deciding each pair's transport (see the header).
#include "parallel/comm/tcp/transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "parallel/comm/tcp/bootstrap.h"
#include "parallel/comm/tcp/shm_channel.h"
#include "runtime/error.h"

namespace spmd::dist::tcp {
namespace {

const char* transport_name(Transport t) {
  return t == Transport::kShm ? "shm" : t == Transport::kTcp ? "tcp" : "auto";
}

// "<transport>;<split>;<identity>": what a rank publishes.
std::string describe(const TransportChoice& c) {
  return str_cat(transport_name(c.transport), ";", c.host_split, ";", host_identity());
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

std::vector<bool> shm_peers(Store& store, const std::string& group, int rank, int size,
                            std::chrono::milliseconds timeout, const TransportChoice& choice) {
  std::vector<bool> shm(size, false);
  if (size == 1) return shm;
  const std::string mine = describe(choice);
  auto key = [&](int r) { return str_cat(group, "/host/", r); };
  store.set(key(rank), mine);
  const std::string my_setting = mine.substr(0, mine.find(';', mine.find(';') + 1));
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
    const size_t cut = theirs.find(';', theirs.find(';') + 1);
    const std::string their_setting = theirs.substr(0, cut);
    SPMD_CHECK(their_setting == my_setting, "group ", group, ": rank ", rank,
               " has SPMD_TRANSPORT;SPMD_TRANSPORT_HOST_SPLIT = ", my_setting, " but rank ", peer,
               " has ", their_setting, ": every rank must set them alike");
    const bool split_apart =
        choice.host_split > 0 && (rank < choice.host_split) != (peer < choice.host_split);
    const bool same_host = !split_apart && theirs.substr(cut + 1) == host_identity();
    if (choice.transport == Transport::kShm) {
      SPMD_CHECK(same_host, "SPMD_TRANSPORT=shm: ranks ", rank, " and ", peer, " of group ", group,
                 " are not on one host (",
                 split_apart ? str_cat("SPMD_TRANSPORT_HOST_SPLIT=", choice.host_split)
                             : str_cat(host_identity(), " vs ", theirs.substr(cut + 1)),
                 "); use SPMD_TRANSPORT=auto or tcp");
    }
    shm[peer] = same_host && choice.transport != Transport::kTcp;
  }
  return shm;
}

GroupChannels connect_channels(Store& store, const std::string& group, int rank, int size,
                               std::chrono::milliseconds timeout, const std::string& route_hint,
                               const Tuning& tuning) {
  const TransportChoice choice = transport_from_env();  // a bad value fails before any I/O
  MeshSockets sockets =
      connect_mesh(store, group, rank, size, timeout, route_hint, tuning.send_buffer_bytes);
  std::vector<bool> shm;
  try {
    shm = shm_peers(store, group, rank, size, timeout, choice);
  } catch (...) {
    for (int fd : sockets.collective)
      if (fd >= 0) ::close(fd);
    for (int fd : sockets.p2p)
      if (fd >= 0) ::close(fd);
    throw;
  }
  const auto deadline = net::Clock::now() + timeout;
  GroupChannels out;
  std::vector<int> p2p = std::move(sockets.p2p);
  try {
    out.collective =
        make_channels(std::move(sockets.collective), shm, rank, tuning.shm_ring_bytes, deadline);
  } catch (...) {
    for (int fd : p2p)
      if (fd >= 0) ::close(fd);
    throw;
  }
  out.p2p = make_channels(std::move(p2p), shm, rank, tuning.shm_ring_bytes, deadline);
  out.one_host = std::count(shm.begin(), shm.end(), true) == size - 1;
  return out;
}

}  // namespace spmd::dist::tcp
