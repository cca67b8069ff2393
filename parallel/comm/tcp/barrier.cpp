// The dissemination barrier (see the header).
#include "parallel/comm/tcp/barrier.h"

namespace spmd::dist::tcp {

void DisseminationBarrier::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  for (int dist = 1; dist < p; dist *= 2) {
    ctx_.mesh.link(mod(r + dist, p)).send(nullptr, 0);  // "I (and all I heard from) arrived"
    Link& from = ctx_.mesh.link(mod(r - dist, p));
    ctx_.mesh.wait_recv(from, from.recv(nullptr, 0));
  }
  ctx_.mesh.finish();
}

}  // namespace spmd::dist::tcp
