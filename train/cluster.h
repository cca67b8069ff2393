// The machines a job runs on, as spmd-plan sees them: how many devices, how
// they are grouped into nodes, each device's memory and arithmetic rate, and
// what a collective costs within a node and between nodes, either from the
// link's figures (bus bandwidth and latency per hop) or from the bus
// bandwidths spmd-bench measured (`spmd-bench --json`, docs/bench.md).
//
// Bus bandwidth (busbw) is nccl-tests' figure: a collective over n ranks of
// S bytes takes S x factor / busbw, where the factor is the share of the
// buffer each rank's link carries in a ring: 2(n - 1)/n for all_reduce,
// (n - 1)/n for all_gather, reduce_scatter and all_to_all, 1 for a send.
// With this definition one busbw describes a link whatever n is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spmd::train {

// One kind of link: its bus bandwidth, and the latency each hop of a ring
// (each message) adds.
struct Link {
  double busbw = 0;    // bytes per second
  double latency = 0;  // seconds per hop
};

// Bus bandwidths measured by spmd-bench: rows of (op, ranks, size, busbw).
class BusbwTable {
 public:
  struct Row {
    std::string op;
    int64_t nranks = 0;
    double size = 0;   // bytes, spmd-bench's size column
    double busbw = 0;  // bytes per second
  };

  BusbwTable() = default;
  explicit BusbwTable(std::vector<Row> rows) : rows_(std::move(rows)) {}

  // The rows of a file of spmd-bench --json lines (one JSON object per
  // line; busbw in GB/s as spmd-bench writes it). Throws InvalidArgument
  // naming `flag`, the file and the line for a file it cannot read, a line
  // without op, nranks, size and busbw, or a busbw that is not above 0.
  static BusbwTable read(const std::string& flag, const std::string& path);

  bool empty() const { return rows_.empty(); }

  // The busbw of `op` at `bytes` over `nranks`: from the rows of that op
  // with the nearest number of ranks, interpolated linearly in log(size)
  // between the two sizes around `bytes` (the nearest size's figure beyond
  // the ends). Throws InvalidArgument naming the op when the table has none.
  double busbw(const std::string& op, int64_t nranks, double bytes) const;

 private:
  std::vector<Row> rows_;
};

struct Cluster {
  int64_t devices = 1;
  int64_t devices_per_node = 8;  // tp stays within one node (its NVLink domain)
  uint64_t device_memory = 0;    // bytes
  // The FLOP/s a device achieves on the model's arithmetic: its peak x the
  // fraction its GEMMs reach, or a GEMM rate measured. 0: no step time.
  double flops = 0;
  double peak_flops = 0;  // the datasheet's (or the CPU's) peak, for MFU; 0: not given
  // Bytes per second of a device's memory: the ops other than the products
  // (step_traffic.h) take their bytes over it. 0: not charged (an
  // achievable fraction of the peak then stands for them).
  double memory_bw = 0;
  Link within, between;      // a group inside one node; a group across nodes
  BusbwTable busbw_within;   // measured: replaces `within`'s busbw when not empty
  BusbwTable busbw_between;  // the same for groups across nodes
  bool overlap = true;       // FSDP, DDP and CP traffic hides behind compute

  bool timed() const { return flops > 0; }
};

}  // namespace spmd::train
