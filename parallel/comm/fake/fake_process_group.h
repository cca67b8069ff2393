// FakeProcessGroup: one rank of a job of any size, run without its peers.
// Every operation is checked as the real backends check it (ProcessGroup's
// front end), counted in stats(), written to a log shared by the world and
// its subgroups (the op, the group, the bytes), and completed at once: no
// byte moves and nothing waits on a peer. Subgroups need no peer either:
// a DeviceMesh works out each line's members itself (split_known); split()
// still asks the store, where no peer will ever answer, and times out.
//
// What a collective leaves in its tensors: a meta tensor (a shape without
// bytes, tensor/meta_backend.h) is not touched at all. A tensor with bytes
// gets what it would hold if every peer held what this rank holds: a sum
// is this rank's value times the group size, an average, minimum or
// maximum is this rank's value, an all_gather repeats this rank's block,
// a reduce_scatter keeps this rank's segment (times the size for a sum);
// a broadcast, a receive and an uneven all_to_all leave it as it was. So
// the checks a strategy makes across ranks (the data loader's agreement,
// a norm summed over the pipeline) see consistent values.
//
// This is what spmd-train --dry-run runs on (train/dry_run.h), as
// TorchTitan's COMM_MODE=fake_backend; docs/dry_run.md.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"

namespace spmd::dist {

// One operation a fake group was asked for.
struct FakeCall {
  std::string group;   // the group's name: "world/split3.5"
  int group_size = 1;  // its ranks
  OpType op = OpType::kBarrier;
  uint64_t bytes = 0;  // the payload, as CommStats counts it (process_group.h)
  int peer = -1;       // send / recv: the other rank (of the group); else -1
};

// A group a fake world made, with the world ranks of its members.
struct FakeGroup {
  std::string name;
  std::vector<int> global_ranks;  // in group-rank order
};

// What a fake world and its subgroups were asked for, in issue order.
// Thread-safety: any thread may add or read.
class FakeLog {
 public:
  void add_call(FakeCall call);
  void add_group(FakeGroup group);
  std::vector<FakeCall> calls() const;
  std::vector<FakeGroup> groups() const;
  // Forgets the calls (the groups stay): what a measured step starts from.
  void clear_calls();

 private:
  mutable std::mutex mu_;
  std::vector<FakeCall> calls_;
  std::vector<FakeGroup> groups_;
};

class FakeProcessGroup final : public ProcessGroup {
 public:
  // Rank `rank` of a world of `size`. REQUIRES: 0 <= rank < size (checked).
  static std::shared_ptr<FakeProcessGroup> create(int rank, int size, GroupOptions options = {});

  CommBackend backend() const override { return CommBackend::kFake; }
  void shutdown() override {}
  // The log this group shares with its world and every subgroup.
  const std::shared_ptr<FakeLog>& log() const { return log_; }

 protected:
  Work launch(CommOp op) override;
  std::shared_ptr<ProcessGroup> make_group(std::shared_ptr<Store> store, int rank, int size,
                                           GroupOptions options) override;

 private:
  FakeProcessGroup(std::shared_ptr<Store> store, int rank, int size, GroupOptions options,
                   std::shared_ptr<FakeLog> log);

  std::shared_ptr<FakeLog> log_;
};

}  // namespace spmd::dist
