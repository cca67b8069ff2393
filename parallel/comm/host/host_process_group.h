// HostProcessGroup: the process group of the host backend, the one a user
// names "tcp" (or "gloo"): the role Gloo plays for PyTorch on CPUs. It runs
// on any IP network, carries CPU tensors directly and CUDA tensors,
// collectives and send/recv alike, through pinned host memory
// (cuda_staging.h). It composes the two transports of the folders beside
// this one:
//   - tcp/: a full mesh of sockets, connected through the store
//     (tcp/bootstrap.h), the Mesh of Links that moves their bytes, and the
//     narrated algorithms (ring, recursive doubling, trees, chains,
//     all-to-all, dissemination barrier) chosen by size in run_algorithm;
//   - shm/: for the peers on this host, shared-memory rings under the same
//     Links (transport.h chooses them, shm/shm_channel.h), and when every
//     rank is on this host a segment they all map, where run_in_segment
//     (shm/run_in_segment.h, the one door for collectives) may run a
//     collective instead of the TCP algorithms.
// A CollectiveQueue (collective_queue.h) runs the collectives one by one in
// issue order: on the thread that waits on it when there is one (no thread
// hand-off: most of a small collective's cost), else on the queue's worker
// thread shortly after its launch. A point-to-point engine has its own
// sockets and thread (tcp/p2p.h).
//
// Failure: when a collective fails (a peer is lost, the ranks disagree, the
// timeout passes) the thread running it writes the reason under <group>/abort
// in the store, shuts every socket down so the peers fail at once too, and
// fails this and every later collective of the group. A timeout names the
// ranks never seen at the collective (with their host when it is another
// one: transport.h): those that sent this rank nothing for it
// and left no arrival record (a rank that waits long in a collective records
// its arrival in the store, cheaply, once).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include "parallel/comm/host/algorithm_choice.h"
#include "parallel/comm/host/collective_queue.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/shm/tuning.h"
#include "parallel/comm/tcp/hierarchical.h"
#include "parallel/comm/tcp/mesh.h"
#include "parallel/comm/tcp/p2p.h"
#include "parallel/comm/tcp/tuning.h"
#include "parallel/comm/tcp/workspace.h"

namespace spmd::dist {
namespace shm {
class GroupSegment;           // shm/group_segment.h
class SegmentSmallAllReduce;  // shm/segment_small_all_reduce.h
}  // namespace shm
namespace host {
class HostStaging;  // cuda_staging.h (CUDA builds)
class StreamMark;
}  // namespace host

class HostProcessGroup final : public ProcessGroup,
                               public std::enable_shared_from_this<HostProcessGroup> {
 public:
  // Connects the group's mesh (every rank of the group calls this).
  // route_hint: a host the ranks can all reach (the store's), used to pick
  // the address this rank publishes (bootstrap.h).
  static std::shared_ptr<HostProcessGroup> create(std::shared_ptr<Store> store, int rank, int size,
                                                  GroupOptions options,
                                                  std::string route_hint = "");
  ~HostProcessGroup() override;

  CommBackend backend() const override { return CommBackend::kTcp; }
  std::vector<std::string> peer_links() const override { return peer_links_; }
  std::string last_algorithm(OpType op) const override;
  std::string algorithm_summary() const override;
  void shutdown() override;

 protected:
  Work launch(CommOp op) override;
  std::shared_ptr<ProcessGroup> make_group(std::shared_ptr<Store> store, int rank, int size,
                                           GroupOptions options) override;

 private:
  // A collective in the queue: the op, its Work and how it ended, in one block.
  struct Queued final : host::CollectiveQueue::Entry {
    Queued(HostProcessGroup& g, CommOp o, Work w);
    ~Queued() override;
    void run() override { group.run(*this); }
    void complete() override { work.complete(error); }

    HostProcessGroup& group;  // outlives the queue (shutdown() stops it first)
    CommOp op;
    Work work;
    std::shared_ptr<host::StreamMark> mark;  // CUDA tensors: the caller's stream at issue
    std::exception_ptr error;                // how it ended (set by run())
    // A small all_reduce its issuing thread posted and left unfinished
    // (start_inline): run() finishes it.
    std::unique_ptr<shm::SegmentSmallAllReduce> rest;
  };
  HostProcessGroup(std::shared_ptr<Store> store, int rank, int size, GroupOptions options,
                   std::string route_hint);
  void connect();
  void run(Queued& item);
  void execute(Queued& item);
  void execute_on_host(CommOp& op, char* data, char* input);
  // The collective's deadline counts from `now` (the epoch: reads the
  // clock); returns that time.
  tcp::Mesh::Clock::time_point begin_on_host(const CommOp& op,
                                             tcp::Mesh::Clock::time_point now = {});
  void end_on_host(const CommOp& op);
  std::optional<Work> start_inline(CommOp& op);
  void execute_staged(Queued& item);
  // Picks the collective's algorithm and runs it (run_algorithm.cpp).
  void run_algorithm(CommOp& op, char* data, char* input);
  void run_alone(CommOp& op, char* data, char* input);
  void run_chosen(host::Algorithm algorithm, CommOp& op, tcp::Span whole, tcp::Span in);
  void note_algorithm(OpType op, const char* name) { last_algorithm_[size_t(op)] = name; }
  void launch_p2p(CommOp op, const Work& work);
  // Failure (failure.cpp).
  static std::chrono::milliseconds slow_after(std::chrono::milliseconds timeout);
  std::exception_ptr fail(const CommOp& op, std::exception_ptr error);
  std::string never_arrived(const CommOp& op, bool* store_lost);
  std::string peer_report(int peer);
  void announce_arrival();

  std::string route_hint_;
  std::vector<std::string> peer_links_;  // [peer]: its channel's kind() (set by connect())
  // [peer]: "hostB at 10.0.0.2" for a peer on another host (transport.h), else "".
  std::vector<std::string> remote_hosts_;
  uint32_t group_hash_ = 0;  // the headers' `group` field (wire.h)
  tcp::Tuning tuning_;
  shm::ShmTuning shm_tuning_;
  std::unique_ptr<tcp::Mesh> mesh_;
  std::unique_ptr<shm::GroupSegment> segment_;  // all ranks on one host: shared all_reduce
  std::shared_ptr<tcp::P2PEngine> p2p_;         // shared with the Works' runners
  tcp::Workspace workspace_;
  // The group's hosts when hierarchical collectives can run on it (tcp/hierarchical.h).
  std::optional<tcp::Hierarchy> hierarchy_;
  int host_count_ = 1;  // the hosts the group's ranks are on
  host::HierarchyMode hierarchy_mode_ = host::HierarchyMode::kAuto;
  tcp::Workspace rail_workspace_;  // the hierarchical rails' (their rings run beside the hosts')
  // [op type]: the name of the algorithm that ran the last one (a literal).
  std::array<std::atomic<const char*>, 16> last_algorithm_{};
#if SPMD_WITH_CUDA
  std::unique_ptr<host::HostStaging> staging_;  // pinned buffers for CUDA tensors
#endif

  std::unique_ptr<host::CollectiveQueue> queue_;

  // State of the thread running a collective (one at a time: queue_).
  std::string aborted_;       // the first failure; later collectives fail with it
  uint64_t current_seq_ = 0;  // the collective being run
  bool announced_ = false;    // it recorded its arrival in the store
};

}  // namespace spmd::dist
