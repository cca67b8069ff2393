// How spmd-bench shows its rows: nccl-tests' table on rank 0's stdout
//
//   #       size         count      type   redop    root     time   algbw   busbw  #wrong
//   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)
//        1048576        262144     float     sum      -1   1234.5    0.85    0.85       0
//
// with a footer (average busbw, total wrong values), and one JSON object per
// row in a file (keys op, size, count, type, redop, root, time_us, algbw,
// busbw, wrong, plus nranks and impl, which name the run in plots). The
// peers under bench/peers/ print and write exactly the same.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

#include "bench/collectives/sweep.h"

namespace spmd::bench {

class Report {
 public:
  // `impl` names the implementation in the JSON ("spmd-tcp"); json_path may be empty.
  Report(std::FILE* out, const std::string& json_path, std::string impl, int world_size);

  void header(const std::string& title);
  void row(const Row& r);
  // Prints the footer; returns the total of wrong values.
  int64_t footer();

 private:
  std::FILE* out_;
  std::ofstream json_;
  std::string impl_;
  int world_size_;
  int rows_ = 0;
  OpKind last_op_ = OpKind::kAllReduce;
  double busbw_sum_ = 0;
  int64_t wrong_ = 0;
};

// The redop column: the reduction's name, or "none" for ops without one.
std::string redop_column(const Row& r);

}  // namespace spmd::bench
