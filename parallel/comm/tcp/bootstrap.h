// Bootstrap: how the ranks of a group connect their full mesh of sockets
// through the store, before any collective can run.
//
//   1. every rank listens on a fresh port and publishes "ip:port" in the
//      store under <group>/addr/<rank>;
//   2. every rank connects to each lower rank (twice: one socket for
//      collectives, one for point-to-point) and introduces itself with a
//      hello (group, rank, channel);
//   3. every rank accepts the connections of the higher ranks and files each
//      socket under the peer and channel its hello names.
// Connecting never waits for the peer to accept (the kernel completes the
// handshake into the listen backlog), so no order of ranks can deadlock.
//
// The address a rank publishes is, in order of preference: the IPv4 address
// of the interface SPMD_SOCKET_IFNAME names, else GLOO_SOCKET_IFNAME (PyTorch's
// spelling for its TCP backend; a name with no IPv4 address is an error
// listing the interfaces that have one), and the rank's connections then
// leave from that address too; else the address of the interface that
// routes to `route_hint` (the store's host, usually MASTER_ADDR); else
// 127.0.0.1. The store's own interface is runtime's business
// (runtime/socket.h, kSocketIfnameVar): SPMD_SOCKET_IFNAME picks both,
// GLOO_SOCKET_IFNAME the links alone, as in PyTorch.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/store.h"

namespace spmd::dist::tcp {

struct MeshSockets {
  std::vector<int> collective;  // [peer] -> connected socket; -1 for this rank
  std::vector<int> p2p;
};

// Connects this rank to every other rank of the group (all of them call it).
// Sockets come back non-blocking with TCP_NODELAY, and with a send buffer of
// send_buffer bytes unless it is 0 (the kernel's autotuning); the caller owns
// them. Throws TimeoutError naming the ranks that did not
// connect in time; a rank that cannot reach a lower one fails with
// mesh_connect_error's message (TimeoutError when it tried until the
// timeout, CommError otherwise).
MeshSockets connect_mesh(Store& store, const std::string& group, int rank, int size,
                         std::chrono::milliseconds timeout, const std::string& route_hint,
                         size_t send_buffer = 0);

// Why rank `rank` (published at `ip`) could not connect to rank `peer` at
// `peer_address` ("ip:port"): both ranks and both addresses, the settings
// that choose them, and `reason` (the socket layer's error).
std::string mesh_connect_error(const std::string& group, int rank, const std::string& ip, int peer,
                               const std::string& peer_address, const std::string& reason);

// The IP this rank publishes (see the file comment).
std::string advertised_address(const std::string& route_hint);

}  // namespace spmd::dist::tcp
