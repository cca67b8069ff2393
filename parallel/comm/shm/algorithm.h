// What a shared-memory collective is given: the same Context as a TCP
// algorithm (tcp/algorithm.h: the group's Mesh, which keeps the collective's
// header, deadline and links, its Workspace and Tuning), the same typed
// element ranges (Span) and the same arithmetic, named here. The
// shared-memory collectives run on the Mesh's clock and fail through its
// links as the TCP ones do; they add the group segment (group_segment.h).
#pragma once

#include "parallel/comm/tcp/algorithm.h"
#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::shm {

using tcp::combine;
using tcp::Context;
using tcp::cpu_relax;
using tcp::divide;
using tcp::Header;
using tcp::kHotPolls;
using tcp::LinkError;
using tcp::Mesh;
using tcp::mod;
using tcp::part_begin;
using tcp::part_size;
using tcp::poll_hot;
using tcp::Span;
using tcp::Tuning;

}  // namespace spmd::dist::shm
