// ProcessGroup: a set of ranks that run collectives together, as
// torch.distributed's ProcessGroup. Every rank of the group calls the same
// collectives in the same order (SPMD); each call returns at once with a
// Work, and the collective runs in issue order (TCP: on the thread that
// waits on it, else the group's worker; NCCL: on a communication stream),
// overlapping the caller's compute.
//
// This class checks every call's arguments once, for every backend, numbers
// each collective (the sequence number every message header and error
// carries), and makes subgroups; a backend (host/host_process_group.h,
// nccl/nccl_process_group.h) implements launch().
//
// Tensors must be contiguous and of a communication dtype (f32, f64, bf16,
// f16, i32, i64); they are handles, so a collective writes through a const
// Tensor& into the caller's memory, and moves that storage's version counter
// at the call as any in-place op does. The caller must keep a tensor's
// contents untouched until its Work completes.
//
// Failure: a collective that cannot finish (a peer died, a rank never came,
// the ranks disagree on a size) fails its Work with an error naming the op,
// its sequence number, the group and the ranks involved, within the group's
// timeout; the group is then aborted and every later collective fails at once.
//
// Thread-safety: calls may come from several threads, but collectives must be
// issued in the same order on every rank, so issue them from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/types.h"
#include "parallel/comm/work.h"
#include "runtime/progress.h"
#include "runtime/store.h"
#include "tensor/tensor.h"

namespace spmd::dist {

class DesyncCheck;     // desync_check.h
class FlightRecorder;  // flight_recorder.h

struct GroupOptions {
  // Unique among the groups that share a store: it prefixes the group's keys.
  std::string name = "world";
  // Bounds every collective and point-to-point operation.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // The world rank of each group rank, for messages (empty: the same).
  std::vector<int> global_ranks;
};

// What a group has carried since it was made (or since reset_stats()), per
// operation type: the calls and their payload bytes, the size of the tensor
// a user would name: all_reduce, broadcast, reduce, send, recv: the buffer;
// all_gather, gather: the gathered output; reduce_scatter, scatter: the
// scattered input; all_to_all: the input; all_to_allv: the elements sent.
// What travels on the wire follows from it by the algorithm's factor (a ring
// all_reduce sends 2(n-1)/n of it per rank; docs/bench.md's busbw). wait_ns:
// the time callers spent blocked in wait(work, op) on that op type.
struct CommStats {
  struct Count {
    uint64_t calls = 0;
    uint64_t bytes = 0;
    uint64_t wait_ns = 0;
  };
  Count by_op[16];  // indexed by OpType's value
  const Count& operator[](OpType op) const { return by_op[size_t(op)]; }
  uint64_t total_bytes() const;
};

// One send or receive of a batch (batch_isend_irecv).
struct P2POp {
  OpType type = OpType::kSend;  // kSend or kRecv
  Tensor tensor;
  int peer = 0;
  int tag = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  virtual CommBackend backend() const = 0;
  // The world rank of group rank r.
  int global_rank(int r) const;

  // Copies root's `t` into every other rank's `t`.
  // REQUIRES: same shape and dtype on every rank; 0 <= root < size().
  Work broadcast(const Tensor& t, int root);
  // Combines `t` over every rank, in place (kAvg: floating dtypes only).
  Work all_reduce(const Tensor& t, ReduceOp op = ReduceOp::kSum);
  // Combines `t` over every rank into root's `t`; the others' are unchanged.
  Work reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::kSum);
  // output = every rank's input, concatenated in rank order. In place when
  // input is output's block rank() (as FSDP gathers into one buffer).
  // REQUIRES: output.numel() == size() * input.numel(), same dtype; no other
  // overlap of the two.
  Work all_gather(const Tensor& output, const Tensor& input);
  // output = segment rank() of the combination of every rank's input; input
  // is left as it was. In place when output is input's segment rank().
  // REQUIRES: input.numel() == size() * output.numel(), same dtype; no other
  // overlap of the two.
  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::kSum);
  // Rank r sends rows [off_j, off_j + input_split_sizes[j]) of input (dim 0)
  // to rank j, which stores them as its output rows from rank r. Empty split
  // lists mean equal splits (dim 0 divisible by size()).
  // REQUIRES: the sizes agree pairwise across ranks (checked on the wire);
  // output and input do not overlap.
  Work all_to_all(const Tensor& output, const Tensor& input,
                  const std::vector<int64_t>& output_split_sizes = {},
                  const std::vector<int64_t>& input_split_sizes = {});
  // MPI_Alltoallv over flat elements: rank r sends input elements
  // [input_offsets[j], + input_counts[j]) to rank j, which stores them as
  // output elements [output_offsets[r], + output_counts[r]). Empty offsets
  // mean the blocks lie back to back in rank order. Unlike all_to_all the
  // blocks may lie anywhere, in any order, with gaps (output elements outside
  // every block are left as they were); the tensors may have any shape.
  // REQUIRES: counts agree pairwise across ranks (checked on the wire); each
  // block inside its tensor; no two output blocks overlap; output and input
  // do not overlap.
  Work all_to_allv(const Tensor& output, const Tensor& input,
                   const std::vector<int64_t>& output_counts,
                   const std::vector<int64_t>& input_counts,
                   const std::vector<int64_t>& output_offsets = {},
                   const std::vector<int64_t>& input_offsets = {});
  // Root's output = every rank's input, concatenated in rank order (an
  // all_gather that only root receives). Only root's output is used: the
  // other ranks may pass an undefined one. In place when root's input is
  // its output's block root.
  // REQUIRES: the same input size and dtype on every rank; at root,
  // output.numel() == size() * input.numel(); 0 <= root < size().
  Work gather(const Tensor& output, const Tensor& input, int root);
  // output = block rank() of root's input cut into size() equal blocks. Only
  // root's input is used: the other ranks may pass an undefined one. In
  // place when root's output is its input's block root.
  // REQUIRES: the same output size and dtype on every rank; at root,
  // input.numel() == size() * output.numel(); 0 <= root < size().
  Work scatter(const Tensor& output, const Tensor& input, int root);
  // Point-to-point: messages match by (source, tag) in order; any order of
  // posting works (a send completes when its bytes are handed to the kernel
  // or the peer). REQUIRES: peer != rank(); sizes and dtypes match.
  Work send(const Tensor& t, int dst, int tag = 0);
  Work recv(const Tensor& t, int src, int tag = 0);
  // Posts several sends and receives together; one Work completes when all
  // have. Two ranks that exchange in both directions must use this with NCCL
  // (its sends block until matched, so two lone sends would deadlock); the
  // TCP backend accepts either. NCCL matches a pair's messages in order and
  // ignores tags.
  Work batch_isend_irecv(const std::vector<P2POp>& ops);
  // Completes once every rank has called it.
  Work barrier();

  // Subgroups. Every rank of this group calls these, in the same order
  // relative to each other (they are collective over the group's store).
  // new_group: the ranks listed (ranks of this group, in any order) form a
  // new group, numbered in increasing order; the others get nullptr.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks);
  // split: ranks that pass the same color form a group, ordered by (key,
  // rank); a negative color joins no group (nullptr).
  std::shared_ptr<ProcessGroup> split(int color, int key = 0);
  // split() for a caller that knows every rank's color and key by
  // arithmetic (a DeviceMesh): `members`, the ranks of this rank's color in
  // split()'s order (by key, then rank), form the group that
  // split(color, key) would make, with nothing posted to or read from the
  // store, so it needs no peer to answer (the fake backend's subgroups).
  // REQUIRES: every rank of this group calls it, in the same order relative
  // to split() and new_group(), each with its own color's members.
  std::shared_ptr<ProcessGroup> split_known(int color, const std::vector<int>& members);

  // Calls and payload bytes per op type so far (a consistent snapshot only
  // when no other thread issues operations meanwhile).
  CommStats stats() const;
  void reset_stats();
  // Waits for `work` (an `op` of this group) and adds the time blocked to
  // stats(): how code that communicates synchronously inside a step (the
  // differentiable collectives, tensor parallelism) shows where its time goes.
  void wait(const Work& work, OpType op);

  // A call-site tag ("ddp.bucket3") recorded with each collective issued
  // after it, until the next call (empty: none); the fingerprint ledger
  // compares it across ranks and names it in desync reports (desync_check.h).
  void set_call_site(std::string_view tag) { call_site_ = tag; }

  // Finishes the queued operations and closes the connections. Idempotent;
  // the destructor calls it. Later calls fail.
  virtual void shutdown() = 0;
  // True once a failure has aborted the group (every later collective fails).
  bool is_aborted() const { return aborted_.load(); }
  // How this rank reaches each peer of the group: [peer] is "shm" or "tcp"
  // with the host backend (host/transport.h decides per pair: shared memory
  // within a host, TCP across hosts), "" for this rank. Empty when the
  // backend does not say (NCCL chooses its transports itself).
  virtual std::vector<std::string> peer_links() const { return {}; }
  // The algorithm that ran this rank's last collective of type `op` (the
  // host backend's names: "ring", "hierarchical", "shm_segment", ...:
  // host/algorithm_choice.h); "" before the first, or when the backend does
  // not say (NCCL chooses its own).
  virtual std::string last_algorithm(OpType op) const { return ""; }
  // How the backend lays the group's collectives over its hosts, for a
  // report: "hierarchical: 2 hosts x 2 ranks ..." or "flat ..."; "" when the
  // backend does not say.
  virtual std::string algorithm_summary() const { return ""; }
  // The store the group was built on (shared with its subgroups).
  const std::shared_ptr<Store>& store_ptr() const { return store_; }

 protected:
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, GroupOptions options);

  // Starts a checked operation; returns its Work.
  virtual Work launch(CommOp op) = 0;
  // Starts checked sends and receives together. By default, one by one,
  // with a Work that completes when all of theirs have.
  virtual Work launch_batch(std::vector<CommOp> ops);
  // Makes a group of the same backend over `store` (subgroups).
  virtual std::shared_ptr<ProcessGroup> make_group(std::shared_ptr<Store> store, int rank, int size,
                                                   GroupOptions options) = 0;

  Store& store() const { return *store_; }
  void set_aborted() { aborted_ = true; }
  // This group's name for a store key: "<group name>/<key>".
  std::string key(const std::string& k) const { return name() + "/" + k; }
  // "rank 2" or "rank 2 (global rank 5)", for messages.
  std::string rank_name(int r) const;
  // For a backend's failure path. A timeout or a disagreement of the ranks
  // at collective #seq: "; desync: <how the ranks' ledgers differ>", or ""
  // when they agree (or the check is off). Waits a little for the peers'
  // records.
  std::string desync_report(uint64_t seq);
  // Any other failure: publishes this rank's ledger as final.
  void note_failure();
  // What collective #seq is waiting for (peers and bytes), for the progress
  // record the launcher's hang triage reads (runtime/progress.h).
  void note_waiting(uint64_t seq, std::vector<PeerWait> waiting);
  // Writes the flight recorder's dump (flight_recorder.h), collective
  // #failed_seq marked failed with `reason`; returns the file ("" if none).
  std::string dump_flight_record(int64_t failed_seq, const std::string& reason);

 private:
  CommOp point_to_point(OpType type, const Tensor& t, int peer, int tag);
  void count(OpType type, const Tensor& payload);
  void count(OpType type, uint64_t payload_bytes);
  CommOp collective(OpType type, std::string_view op_name);
  // Records an operation in the ledger (collectives), the flight recorder
  // and the trace (comm_trace.h), then launches it.
  Work issue(CommOp op);
  std::shared_ptr<ProcessGroup> make_subgroup(const std::vector<int>& members,
                                              const std::string& suffix);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  GroupOptions options_;
  std::atomic<uint64_t> next_seq_{0};       // collectives, the same on every rank
  std::atomic<uint64_t> next_p2p_{0};       // this rank's point-to-point calls
  std::atomic<uint64_t> next_subgroup_{0};  // new_group / split calls
  std::atomic<bool> aborted_{false};
  struct AtomicCount {
    std::atomic<uint64_t> calls{0}, bytes{0}, wait_ns{0};
  };
  AtomicCount counts_[16];
  std::shared_ptr<DesyncCheck> desync_;       // null when SPMD_DESYNC_CHECK=0
  std::shared_ptr<FlightRecorder> recorder_;  // null when SPMD_FLIGHT_RECORDER=0
  // Told of each issued operation's end: ends its recorder_ entry, counts a
  // collective's completion in desync_ (null when both are off).
  std::shared_ptr<const Work::Observer> recording_;
  std::string call_site_;
};

}  // namespace spmd::dist
