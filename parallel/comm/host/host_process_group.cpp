// The host backend's process group: set-up, issuing to the collective queue
// (and sends and receives to the point-to-point engine), and running a
// collective: CUDA staging, the header and deadline. The choice of algorithm
// is in run_algorithm.cpp; what happens when a collective fails in
// failure.cpp.
#include "parallel/comm/host/host_process_group.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "parallel/comm/host/transport.h"
#include "parallel/comm/shm/group_segment.h"
#include "parallel/comm/shm/segment_small_all_reduce.h"
#include "runtime/error.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#if SPMD_WITH_CUDA
#include "parallel/comm/host/cuda_staging.h"
#endif

namespace spmd::dist {

using namespace tcp;   // NOLINT: this file is the backend's own
using namespace host;  // NOLINT

namespace {
// A tensor of the op that this rank holds: the output, or (gather's
// non-roots) the input; undefined for a barrier.
const Tensor& held_tensor(const CommOp& op) { return op.tensor.defined() ? op.tensor : op.input; }
}  // namespace

// --- Set-up and tear-down ------------------------------------------------------------

std::shared_ptr<HostProcessGroup> HostProcessGroup::create(std::shared_ptr<Store> store, int rank,
                                                           int size, GroupOptions options,
                                                           std::string route_hint) {
  std::shared_ptr<HostProcessGroup> group(new HostProcessGroup(
      std::move(store), rank, size, std::move(options), std::move(route_hint)));
  group->connect();
  return group;
}

HostProcessGroup::HostProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   GroupOptions options, std::string route_hint)
    : ProcessGroup(std::move(store), rank, size, std::move(options)),
      route_hint_(std::move(route_hint)),
      tuning_(Tuning::from_env()),
      shm_tuning_(shm::ShmTuning::from_env()) {}

// The channels to every peer (transport.h: sockets, shared memory for the
// peers on this host), then, when every rank is on this host, the segment
// the whole group shares (group_segment.h).
void HostProcessGroup::connect() {
  GroupChannels channels = connect_channels(store(), name(), rank(), size(), timeout(), route_hint_,
                                            tuning_, shm_tuning_);
  std::vector<std::unique_ptr<Link>> links(size());
  peer_links_.assign(size(), "");
  remote_hosts_ = std::move(channels.remote_hosts);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) {
      links[peer] = std::make_unique<Link>(peer, std::move(channels.collective[peer]));
      peer_links_[peer] = links[peer]->channel().kind();  // after any fallback to TCP
    }
  }
  if (size() > 1 && channels.whole_group_shm && shm_tuning_.slot_bytes > 0) {
    bool links_shm = true;  // a pair may have fallen back to TCP (shm_channel.h)
    for (int peer = 0; peer < size(); ++peer) {
      if (peer != rank()) links_shm &= std::string_view(links[peer]->channel().kind()) == "shm";
    }
    segment_ = shm::GroupSegment::connect(store(), name(), rank(), size(), shm_tuning_, links_shm,
                                          timeout());
  }
  hierarchy_ = Hierarchy::of_hosts(channels.host_of, rank());
  host_count_ = 1 + *std::max_element(channels.host_of.begin(), channels.host_of.end());
  hierarchy_mode_ = channels.hierarchy;
  group_hash_ = group_hash(name());
  mesh_ = std::make_unique<Mesh>(rank(), size(), std::move(links));
  if (segment_ && segment_->post_bytes() > 0) {
    mesh_->set_glance([this] { shm::glance_at_posts(*segment_, *mesh_); });
  }
  mesh_->set_spin(tuning_.spin());
  mesh_->set_slow_hook(slow_after(timeout()), [this] { announce_arrival(); });
  mesh_->set_wait_report(std::chrono::milliseconds(100), [this](std::vector<PeerWait> w) {
    note_waiting(current_seq_, std::move(w));
  });
  p2p_ = std::make_shared<P2PEngine>(name(), rank(), std::move(channels.p2p), timeout(),
                                     tuning_.spin(),
                                     std::chrono::microseconds(tuning_.start_after_us));
  queue_ = std::make_unique<CollectiveQueue>(std::chrono::microseconds(tuning_.start_after_us));
}

HostProcessGroup::~HostProcessGroup() { shutdown(); }

void HostProcessGroup::shutdown() {
  if (queue_) queue_->stop();  // the queued collectives finish (or time out) first
  if (p2p_) p2p_->stop();
  p2p_.reset();
  mesh_.reset();
  segment_.reset();
}

std::shared_ptr<ProcessGroup> HostProcessGroup::make_group(std::shared_ptr<Store> store, int rank,
                                                           int size, GroupOptions options) {
  return create(std::move(store), rank, size, std::move(options), route_hint_);
}

// --- Issuing -------------------------------------------------------------------------

HostProcessGroup::Queued::Queued(HostProcessGroup& g, CommOp o, Work w)
    : group(g), op(std::move(o)), work(std::move(w)) {}
HostProcessGroup::Queued::~Queued() = default;

Work HostProcessGroup::launch(CommOp op) {
  const bool on_gpu = held_tensor(op).defined() && held_tensor(op).is_cuda();
  if (op.input.defined() && op.tensor.defined()) {
    SPMD_CHECK(op.input.device() == op.tensor.device(), op.description, ": output on ",
               op.tensor.device(), " but input on ", op.input.device());
  }
#if SPMD_WITH_CUDA
  if (on_gpu && !staging_) staging_ = std::make_unique<HostStaging>();  // on the issuing thread
#endif
  if (!on_gpu) {
    if (std::optional<Work> started = start_inline(op)) return *std::move(started);
  }
  Work work(op.description, Work::Duration::max());
  if (op.type == OpType::kSend || op.type == OpType::kRecv) {
    launch_p2p(std::move(op), work);
    return work;
  }
  auto item = std::make_shared<Queued>(*this, std::move(op), work);
#if SPMD_WITH_CUDA
  if (on_gpu) item->mark = std::make_shared<StreamMark>(held_tensor(item->op));
#else
  SPMD_CHECK(!on_gpu, item->op.description, ": this spmd was built without CUDA");
#endif
  SPMD_CHECK(queue_ != nullptr, item->op.description, ": the group has been shut down");
  queue_->push(item, item->op.description);
  // A caller that waits on it runs it (and any issued before it) itself.
  work.set_runner([group = weak_from_this(), weak = std::weak_ptr<CollectiveQueue::Entry>(item)] {
    auto g = group.lock();
    auto e = weak.lock();
    return g && e && g->queue_->run_through(e);
  });
  return work;
}

// Sends and receives go to the point-to-point engine. A CUDA tensor is
// staged as a collective's is (cuda_staging.h): a send's bytes go to pinned
// host memory now, once the caller's stream has produced them; a recv's come
// back to the device before its Work completes.
void HostProcessGroup::launch_p2p(CommOp op, const Work& work) {
  SPMD_CHECK(p2p_ != nullptr, op.description, ": the group has been shut down");
  const Tensor t = op.tensor;
  char* bytes = static_cast<char*>(t.raw_data());
  Work inner = work;
#if SPMD_WITH_CUDA
  if (t.is_cuda()) {
    auto mark = std::make_shared<StreamMark>(t);
    std::shared_ptr<char> host = staging_->acquire(t.nbytes());
    const bool is_recv = op.type == OpType::kRecv;
    if (!is_recv) {
      mark->wait();
      staging_->to_host(t, host.get());
    }
    bytes = host.get();
    inner = Work(op.description, Work::Duration::max());
    inner.on_complete([inner, work, t, host, mark, is_recv, staging = *staging_]() mutable {
      std::exception_ptr error = inner.exception();
      if (!error && is_recv) {
        try {
          mark->wait();  // the caller's earlier work on t is done before it is overwritten
          staging.to_device(host.get(), t);
        } catch (...) {
          error = std::current_exception();
        }
      }
      host.reset();  // back to the pool before the caller can issue the next one
      work.complete(error);
    });
  }
#else
  SPMD_CHECK(t.is_cpu(), op.description, ": this spmd was built without CUDA");
#endif
  if (t.is_cpu()) inner.on_complete([t] {});  // the engine uses t's memory until it completes
  // A caller that waits on it moves its bytes itself (p2p.h).
  work.set_runner([engine = std::weak_ptr(p2p_), inner] {
    auto e = engine.lock();
    return e && e->drive(inner);
  });
  if (op.type == OpType::kSend) {
    p2p_->send(bytes, size_t(t.numel()), t.dtype(), op.peer, op.tag, inner);
  } else {
    p2p_->recv(bytes, size_t(t.numel()), t.dtype(), op.peer, op.tag, inner);
  }
}

// --- Running a collective ------------------------------------------------------------

// Runs one collective (on whichever thread the queue chose) and records how
// it ended; the queue completes its Work after letting the next one go.
void HostProcessGroup::run(Queued& item) {
  if (!aborted_.empty()) {
    item.error = std::make_exception_ptr(CommError(
        str_cat(item.op.description, ": the group was aborted by an earlier failure: ", aborted_)));
    return;
  }
  try {
    execute(item);
  } catch (...) {
    item.error = fail(item.op, std::current_exception());
  }
}

void HostProcessGroup::execute(Queued& item) {
  if (item.rest) {  // posted by its issuing thread (start_inline)
    item.rest->finish();
    return end_on_host(item.op);
  }
  if (item.mark) return execute_staged(item);
  CommOp& op = item.op;
  char* data = op.tensor.defined() ? static_cast<char*>(op.tensor.raw_data()) : nullptr;
  char* input = op.input.defined() ? static_cast<char*>(op.input.raw_data()) : nullptr;
  execute_on_host(op, data, input);
}

// CUDA tensors: wait for the caller's stream to produce them, copy them to
// pinned host buffers, run the collective there, copy the result back.
void HostProcessGroup::execute_staged(Queued& item) {
#if SPMD_WITH_CUDA
  CommOp& op = item.op;
  item.mark->wait();
  const std::shared_ptr<char> output_host =
      op.tensor.defined() ? staging_->acquire(op.tensor.nbytes()) : nullptr;
  const std::shared_ptr<char> input_host =
      op.input.defined() ? staging_->acquire(op.input.nbytes()) : nullptr;
  char* data = output_host.get();
  char* input = input_host.get();
  if (op.input.defined()) staging_->to_host(op.input, input);
  // The output's bytes go to the host too where the op leaves some of them
  // as they are: in place (the tensor is also the input), and the gaps
  // between all_to_allv's blocks. A scatter's receiver overwrites all of it.
  const bool output_kept = !op.input.defined() || op.type == OpType::kAllToAllv;
  if (op.tensor.defined() && output_kept && op.type != OpType::kScatter) {
    staging_->to_host(op.tensor, data);
  }
  execute_on_host(op, data, input);
  if (op.tensor.defined()) staging_->to_device(data, op.tensor);
#else
  SPMD_THROW(Error, item.op.description, ": CUDA tensors need a CUDA build");
#endif
}

void HostProcessGroup::execute_on_host(CommOp& op, char* data, char* input) {
  if (size() == 1) return run_alone(op, data, input);
  begin_on_host(op);
  run_algorithm(op, data, input);
  end_on_host(op);
}

// The header every rank checks, and the deadline.
Mesh::Clock::time_point HostProcessGroup::begin_on_host(const CommOp& op,
                                                        Mesh::Clock::time_point now) {
  Header h;
  h.op = op.type;
  h.dtype = held_tensor(op).defined() ? held_tensor(op).dtype() : DType::kF32;
  h.redop = op.reduce_op;
  h.group = group_hash_;
  h.arg = op.root;
  h.seq = op.seq;
  h.count = op.type == OpType::kReduceScatter ? size_t(op.input.numel())
            : op.type == OpType::kGather      ? size_t(op.input.numel())  // each rank's block
            : op.tensor.defined()             ? size_t(op.tensor.numel())
                                              : 0;
  announced_ = false;
  current_seq_ = op.seq;
  if (now == Mesh::Clock::time_point{}) now = Mesh::Clock::now();
  mesh_->begin(h, now + timeout(), now);
  return now;
}

void HostProcessGroup::end_on_host(const CommOp& op) {
  if (announced_) {  // the collective was slow and recorded its arrival: tidy up
    try {
      store().delete_key(key(str_cat("arrived/", op.seq, "/", rank())));
    } catch (...) {
      // Tidying only: the collective succeeded, and a record left behind is
      // read by no one (never_arrived asks only about a failing seq).
    }
  }
}

}  // namespace spmd::dist
