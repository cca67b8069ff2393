// The table and the JSON lines (see the header for their shape). The widths
// are nccl-tests': size and count 12, type 8, redop and root 6; per column
// set time 7, algbw, busbw and #wrong 6 (with -I, i_min, i_max, i_p99 and
// i_cv% 7), every field after the first two spaces from the one before.
#include "bench/collectives/report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace spmd::bench {
namespace {

// A column set's width when blank or when its #wrong is N/A: nccl-tests
// prints "N/A" one column short of a count, and a set it did not run as
// that many spaces.
constexpr int kBlankCell = 32;
constexpr int kBlankIterCells = 36;

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

void rtrim(std::string& s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
}

nlohmann::json cell_json(const std::optional<Cell>& c) {
  if (!c) return nullptr;
  nlohmann::json j = {{"time_us", c->time_us}, {"algbw", c->algbw}, {"busbw", c->busbw}};
  j["wrong"] = c->wrong ? nlohmann::json(*c->wrong) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

std::string nccl_number(double v, int width) {
  int digits = 0;  // of the integer part (0 below 1)
  for (double scale = 1; v >= scale && digits < 30; scale *= 10) ++digits;
  if (digits < width - 2) return printf_string("%*.2f", width, v);
  if (digits < width - 1) return printf_string("%*.1f", width, v);
  if (digits < width + 1) return printf_string("%*.0f", width, v);
  return printf_string(width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

std::string redop_column(const Row& r) {
  return r.redop ? std::string(dist::reduce_op_name(*r.redop)) : "none";
}

Report::Report(std::FILE* out, const std::string& json_path, std::string impl, int world_size,
               bool per_iter, bool several_ops)
    : out_(out),
      impl_(std::move(impl)),
      world_size_(world_size),
      per_iter_(per_iter),
      several_ops_(several_ops) {
  if (!json_path.empty()) {
    json_.open(json_path, std::ios::trunc);
    SPMD_CHECK(json_.good(), "spmd-bench: cannot write --json ", json_path);
  }
}

void Report::header(const std::vector<std::string>& preamble) {
  for (const std::string& line : preamble)
    std::fprintf(out_, "#%s%s\n", line.empty() ? "" : " ", line.c_str());
  std::fprintf(out_, "#\n");
  const char* lead = "# %10s  %12s  %8s  %6s  %6s";
  if (per_iter_) {
    std::fprintf(out_, lead, "", "", "", "", "");
    std::fprintf(out_, "%s\n",
                 "              out-of-place (+ per-iteration)                                "
                 "in-place (+ per-iteration)");
    const char* set = "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s";
    std::fprintf(out_, lead, "size", "count", "type", "redop", "root");
    for (int k = 0; k < 2; ++k)
      std::fprintf(out_, set, "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
                   "i_cv%");
    std::fprintf(out_, " \n");
    std::fprintf(out_, lead, "(B)", "(elements)", "", "", "");
    for (int k = 0; k < 2; ++k)
      std::fprintf(out_, set, "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)");
    std::fprintf(out_, " \n");
  } else {
    std::fprintf(out_, lead, "", "", "", "", "");
    std::fprintf(out_, "%s\n", "           out-of-place                       in-place          ");
    const char* set = "  %7s  %6s  %6s  %6s";
    std::fprintf(out_, lead, "size", "count", "type", "redop", "root");
    for (int k = 0; k < 2; ++k) std::fprintf(out_, set, "time", "algbw", "busbw", "#wrong");
    std::fprintf(out_, " \n");
    std::fprintf(out_, lead, "(B)", "(elements)", "", "", "");
    for (int k = 0; k < 2; ++k) std::fprintf(out_, set, "(us)", "(GB/s)", "(GB/s)", "");
    std::fprintf(out_, " \n");
  }
  std::fflush(out_);
}

std::string Report::cell_text(const std::optional<Cell>& c) const {
  if (!c) return std::string(kBlankCell + (per_iter_ ? kBlankIterCells : 0), ' ');
  std::string s = "  " + nccl_number(c->time_us, 7) + "  " + nccl_number(c->algbw, 6) + "  " +
                  nccl_number(c->busbw, 6);
  s += c->wrong ? printf_string("  %6g", double(*c->wrong)) : std::string("    N/A");
  if (per_iter_ && c->iter) {
    for (double v : {c->iter->min, c->iter->max, c->iter->p99, c->iter->cv_pct()}) {
      s += "  " + nccl_number(v, 7);
    }
  }
  return s;
}

void Report::row(const Row& r) {
  if (several_ops_ && (rows_ == 0 || r.op != last_op_)) {  // one section per op
    std::fprintf(out_, "# %s\n", std::string(op_kind_name(r.op)).c_str());
    last_op_ = r.op;
  }
  std::string line = printf_string("%12zu  %12zu  %8s  %6s  %6s", r.size_bytes, r.count,
                                   std::string(type_name(r.dtype)).c_str(), redop_column(r).c_str(),
                                   printf_string("%6d", r.root).c_str());
  line += cell_text(r.out_of_place) + cell_text(r.in_place);
  rtrim(line);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  ++rows_;
  for (const auto* c : {&r.out_of_place, &r.in_place}) {
    if (!*c) continue;
    ++cells_;
    busbw_sum_ += (*c)->busbw;
    failed_checks_ += (*c)->failed_checks;
  }
  if (json_.is_open()) json_line(r);
}

void Report::json_line(const Row& r) {
  const Cell& first = r.out_of_place ? *r.out_of_place : *r.in_place;
  nlohmann::json j = {{"op", op_kind_name(r.op)},
                      {"size", r.size_bytes},
                      {"count", r.count},
                      {"type", type_name(r.dtype)},
                      {"redop", redop_column(r)},
                      {"root", r.root},
                      {"time_us", first.time_us},
                      {"algbw", first.algbw},
                      {"busbw", first.busbw},
                      {"nranks", world_size_},
                      {"impl", impl_}};
  j["wrong"] = first.wrong ? nlohmann::json(*first.wrong) : nlohmann::json(nullptr);
  j["out_of_place"] = cell_json(r.out_of_place);
  j["in_place"] = cell_json(r.in_place);
  j["algorithm"] = r.algorithm;
  json_ << j.dump() << "\n";
  json_.flush();
}

void Report::footer(const std::string& name) {
  std::fprintf(out_, "# %-20s : %d %s\n", "Out of bounds values", failed_checks_,
               failed_checks_ ? "FAILED" : "OK");
  std::fprintf(out_, "# %-20s : %g \n", "Avg bus bandwidth", average_busbw());
  std::fprintf(out_, "#\n# Collective test concluded: %s\n#\n", name.c_str());
  std::fflush(out_);
}

std::string links_summary(const std::vector<std::string>& links) {
  std::vector<std::string> kinds;
  for (const std::string& k : links) {
    if (!k.empty() && std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
  std::string out;
  for (const std::string& kind : kinds) {
    std::string ranges;
    const int n = int(links.size());
    for (int first = 0; first < n; ++first) {
      if (links[first] != kind) continue;
      int last = first;  // the run first..last of peers over `kind`
      while (last + 1 < n && links[last + 1] == kind) ++last;
      ranges += str_cat(ranges.empty() ? "" : ",", first);
      if (last > first) ranges += str_cat(last == first + 1 ? "," : "-", last);
      first = last;
    }
    out += str_cat(out.empty() ? "" : " ", kind, ":", ranges);
  }
  return out;
}

}  // namespace spmd::bench
