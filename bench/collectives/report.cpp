// The table and the JSON lines (see the header for their shape).
#include "bench/collectives/report.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace spmd::bench {

std::string redop_column(const Row& r) {
  return r.redop ? std::string(dist::reduce_op_name(*r.redop)) : "none";
}

Report::Report(std::FILE* out, const std::string& json_path, std::string impl, int world_size)
    : out_(out), impl_(std::move(impl)), world_size_(world_size) {
  if (!json_path.empty()) {
    json_.open(json_path, std::ios::trunc);
    SPMD_CHECK(json_.good(), "spmd-bench: cannot write --json ", json_path);
  }
}

void Report::header(const std::string& title) {
  std::fprintf(out_, "# %s\n#\n", title.c_str());
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(out_);
}

void Report::row(const Row& r) {
  if (rows_ == 0 || r.op != last_op_) {  // a sweep of several ops: one section each
    std::fprintf(out_, "# %s\n", std::string(op_kind_name(r.op)).c_str());
    last_op_ = r.op;
  }
  std::fprintf(out_, "  %10zu  %12zu  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %6lld\n", r.size_bytes,
               r.count, std::string(type_name(r.dtype)).c_str(), redop_column(r).c_str(), r.root,
               r.time_us, r.algbw, r.busbw, static_cast<long long>(r.wrong));
  std::fflush(out_);
  ++rows_;
  busbw_sum_ += r.busbw;
  wrong_ += r.wrong;
  if (json_.is_open()) {
    const nlohmann::json j = {
        {"op", op_kind_name(r.op)},   {"size", r.size_bytes},     {"count", r.count},
        {"type", type_name(r.dtype)}, {"redop", redop_column(r)}, {"root", r.root},
        {"time_us", r.time_us},       {"algbw", r.algbw},         {"busbw", r.busbw},
        {"wrong", r.wrong},           {"nranks", world_size_},    {"impl", impl_}};
    json_ << j.dump() << "\n";
    json_.flush();
  }
}

int64_t Report::footer() {
  std::fprintf(out_, "# Wrong values       : %lld %s\n", static_cast<long long>(wrong_),
               wrong_ == 0 ? "OK" : "FAILED");
  std::fprintf(out_, "# Avg bus bandwidth  : %.3f GB/s\n", rows_ ? busbw_sum_ / rows_ : 0.0);
  std::fflush(out_);
  return wrong_;
}

}  // namespace spmd::bench
