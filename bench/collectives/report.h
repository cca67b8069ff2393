// How spmd-bench shows its rows: nccl-tests' table on rank 0's stdout, its
// column sets for out of place and in place side by side,
//
//   #                                                              out-of-place in-place # size
//   count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw
//   #wrong #        (B)    (elements)                               (us)  (GB/s)  (GB/s) (us)
//   (GB/s)  (GB/s)
//         1048576         65536     float    none      -1   251.03    4.18    3.13       0 238.65
//         4.39    3.29       0
//
// (with -I, i_min, i_max, i_p99 and i_cv% after each set's #wrong), the
// in-place set left off where spmd's API has no such form (all_to_all(v) and
// sendrecv), `N/A` in #wrong where values were not checked, and nccl-tests'
// footer: the count of failed checks ("Out of bounds values"), the average
// busbw over every cell. Numbers are printed as nccl-tests fits them into
// their columns (nccl_number).
//
// --json adds one JSON object per row to a file: op, size, count, type,
// redop, root, and time_us, algbw, busbw, wrong of the row's first set (out
// of place, the first busbw column, which every op measures), then nranks
// and impl, and both placements under out_of_place and in_place (null where
// not measured; wrong null where not checked). The peers under bench/peers/
// write the same keys for the one form they run (bench/bench_lines.py reads
// spmd's matching set).
#pragma once

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/collectives/sweep.h"

namespace spmd::bench {

class Report {
 public:
  // `impl` names the implementation in the JSON ("spmd-tcp"); json_path may be empty.
  Report(std::FILE* out, const std::string& json_path, std::string impl, int world_size,
         bool per_iter, bool several_ops);

  // Prints the preamble (each line gets its "# "), then the column header.
  void header(const std::vector<std::string>& preamble);
  void row(const Row& r);
  // Prints the footer, naming the run `name`.
  void footer(const std::string& name);

  // nccl-tests' footer figures so far.
  int failed_checks() const { return failed_checks_; }
  double average_busbw() const { return cells_ ? busbw_sum_ / cells_ : 0.0; }

 private:
  std::string cell_text(const std::optional<Cell>& c) const;
  void json_line(const Row& r);

  std::FILE* out_;
  std::ofstream json_;
  std::string impl_;
  int world_size_;
  bool per_iter_, several_ops_;
  int rows_ = 0;
  OpKind last_op_ = OpKind::kAllReduce;
  int cells_ = 0;
  double busbw_sum_ = 0;
  int failed_checks_ = 0;
};

// The redop column: the reduction's name, or "none" for ops without one.
std::string redop_column(const Row& r);

// `v` in `width` characters, right-aligned, with as many decimals as fit, as
// nccl-tests prints time and bandwidth: two decimals while the integer part
// leaves room for them, then one, then none, then an exponent.
std::string nccl_number(double v, int width);

// The "links" field of a rank's "# Using devices" line: the peers it reaches
// over each transport, kinds in order of first appearance and runs of peers
// as ranges: "shm:1,5 tcp:2-4" for ProcessGroup::peer_links()
// {"", "shm", "tcp", "tcp", "tcp", "shm"}. Empty when `links` names no peer.
std::string links_summary(const std::vector<std::string>& links);

}  // namespace spmd::bench
