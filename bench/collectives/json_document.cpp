// The -J document (see the header), built with nlohmann-json and written
// once, at the end of the run.
#include "bench/collectives/json_document.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "bench/collectives/report.h"
#include "runtime/error.h"

extern char** environ;

namespace spmd::bench {
namespace {

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

// The variables that say where a rank runs and how it found the others.
bool places_a_rank(const std::string& entry) {
  const std::string name = entry.substr(0, entry.find('='));
  for (const char* exact : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                            "MASTER_PORT", "CUDA_VISIBLE_DEVICES"}) {
    if (name == exact) return true;
  }
  for (const char* prefix : {"SPMD_", "NCCL_", "OMPI_COMM_WORLD_", "SLURM_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Creates `path`, or the first of path.0, path.1, ... that does not exist.
std::string create_free_file(const std::string& path) {
  for (int n = -1; n < 1000; ++n) {
    const std::string candidate = n < 0 ? path : path + "." + std::to_string(n);
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      ::close(fd);
      return candidate;
    }
    SPMD_CHECK(errno == EEXIST, "spmd-bench -J: cannot create ", candidate, ": ",
               std::strerror(errno));
  }
  SPMD_THROW(Error, "spmd-bench -J: ", path, " and its numbered variants .0 to .999 all exist");
}

nlohmann::ordered_json cell_json(const std::optional<Cell>& c) {
  if (!c) return nullptr;
  return {
      {"time", c->time_us},
      {"alg_bw", c->algbw},
      {"bus_bw", c->busbw},
      {"nwrong", c->wrong ? nlohmann::ordered_json(*c->wrong) : nlohmann::ordered_json(nullptr)}};
}

nlohmann::ordered_json per_iter_json(const Cell& c) {
  const IterStats& s = *c.iter;
  nlohmann::ordered_json j = {
      {"min_us", s.min},     {"max_us", s.max},      {"avg_us", s.avg},
      {"p50_us", s.p50},     {"p95_us", s.p95},      {"p99_us", s.p99},
      {"stdev_us", s.stdev}, {"cv_pct", s.cv_pct()}, {"times_us", c.iter_us}};
  if (c.rank_iter_us.size() > 1) j["per_process_max_times_us"] = c.rank_iter_us;
  return j;
}

}  // namespace

JsonDocument::JsonDocument(const std::string& path, const BenchOptions& o, const std::string& impl,
                           const std::vector<RankInfo>& ranks, const std::string& algorithm)
    : path_(create_free_file(path)) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (places_a_rank(*e)) env.emplace_back(*e);
  }
  nlohmann::ordered_json config = {{"minimum_bytes", o.min_bytes}, {"maximum_bytes", o.max_bytes}};
  if (o.step_factor > 1) {
    config["step_factor"] = o.step_factor;
  } else {
    config["step_bytes"] = o.step_bytes;
  }
  config["warmup_iters"] = o.warmup;
  config["iterations"] = o.iters;
  config["validation"] = o.checks;
  config["blocking_collectives"] = o.blocking;
  config["per_iter_timing"] = o.per_iter;
  config["average"] = o.average;
  config["timeout"] = o.timeout_s;
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const RankInfo& r : ranks) {
    devices.push_back({{"rank", r.rank},
                       {"group", 0},
                       {"pid", r.pid},
                       {"hostname", r.hostname},
                       {"device", r.device},
                       {"links", r.links}});
  }
  config["devices"] = devices;
  config["algorithm"] = algorithm;
  doc_ = {{"version", 2},     {"start_time", now_text()},
          {"args", o.args},   {"env", env},
          {"impl", impl},     {"nranks", int(ranks.size())},
          {"config", config}, {"results", nlohmann::ordered_json::array()}};
}

void JsonDocument::add(const Row& r, int iters) {
  nlohmann::ordered_json j = {{"op", op_kind_name(r.op)}, {"size", r.size_bytes},
                              {"count", r.count},         {"type", type_name(r.dtype)},
                              {"redop", redop_column(r)}, {"root", r.root}};
  j["out_of_place"] = cell_json(r.out_of_place);
  j["in_place"] = cell_json(r.in_place);
  if (r.out_of_place && r.out_of_place->iter)
    j["out_of_place_per_iter"] = per_iter_json(*r.out_of_place);
  if (r.in_place && r.in_place->iter) j["in_place_per_iter"] = per_iter_json(*r.in_place);
  j["algorithm"] = r.algorithm;
  j["actual_iterations"] = iters;
  j["experiment_name"] = "";
  doc_["results"].push_back(std::move(j));
}

void JsonDocument::finish(int failed_checks, double average_busbw, const std::string& error) {
  doc_["out_of_bounds"] = {{"count", failed_checks}, {"okay", failed_checks == 0}};
  doc_["average_bus_bandwidth"] = {{"bandwidth", average_busbw}, {"okay", "unchecked"}};
  doc_["errors"] =
      error.empty() ? nlohmann::ordered_json::array() : nlohmann::ordered_json::array({error});
  doc_["end_time"] = now_text();
  std::ofstream out(path_, std::ios::trunc);
  out << doc_.dump(2) << "\n";
  SPMD_CHECK(out.good(), "spmd-bench -J: cannot write ", path_);
}

}  // namespace spmd::bench
