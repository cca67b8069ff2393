// The flight recorder's ring and its JSON dump.
#include "parallel/comm/flight_recorder.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace spmd::dist {

namespace {

bool is_collective(OpType op) { return op != OpType::kSend && op != OpType::kRecv; }

int64_t us_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

int64_t now_us() { return us_of(std::chrono::steady_clock::now()); }  // the ring's clock

int64_t wall_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What to add to a steady-clock time to put it on the wall clock, now.
int64_t wall_offset_us() { return wall_now_us() - now_us(); }

}  // namespace

std::string_view state_name(FlightEntry::State state) {
  switch (state) {
    case FlightEntry::State::kPending:
      return "pending";
    case FlightEntry::State::kCompleted:
      return "completed";
    case FlightEntry::State::kFailed:
      return "failed";
  }
  return "?";
}

bool FlightRecorder::enabled_by_env() {
  const char* text = std::getenv("SPMD_FLIGHT_RECORDER");
  return !(text && std::string_view(text) == "0");
}

size_t FlightRecorder::capacity_from_env() {
  const char* text = std::getenv("SPMD_FLIGHT_RECORDER_SIZE");
  if (!text || !*text) return 64;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  SPMD_CHECK(*end == '\0' && v >= 1 && v <= 1000000, "SPMD_FLIGHT_RECORDER_SIZE='", text,
             "' is not an integer in [1, 1000000]");
  return size_t(v);
}

FlightRecorder::FlightRecorder(size_t capacity) : ring_(capacity), collective_ids_(capacity) {
  SPMD_CHECK(capacity >= 1, "FlightRecorder: the capacity must be at least 1");
}

void FlightRecorder::arm(int global_rank) {
  const char* dir = std::getenv("SPMD_FLIGHT_RECORDER_DIR");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // spmdrun names it; the first rank makes it
  std::ofstream(str_cat(dir, "/armed_rank", global_rank));
}

uint64_t FlightRecorder::issued(const CommOp& op) {
  const Tensor& t = op.tensor.defined() ? op.tensor : op.input;
  const uint64_t bytes = std::max<uint64_t>(op.tensor.defined() ? op.tensor.nbytes() : 0,
                                            op.input.defined() ? op.input.nbytes() : 0);
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  FlightEntry& e = ring_[id % ring_.size()];
  e.id = id;
  e.op = op.type;
  e.seq = op.seq;
  e.peer = op.peer;
  e.root = op.root;
  e.bytes = bytes;
  e.dtype = t.defined() ? std::string(dtype_name(t.dtype())) : std::string();
  e.state = FlightEntry::State::kPending;
  e.issued_us =
      op.issued_at == std::chrono::steady_clock::time_point{} ? now_us() : us_of(op.issued_at);
  e.ended_us = 0;
  if (is_collective(op.type)) collective_ids_[op.seq % collective_ids_.size()] = id;
  return id;
}

void FlightRecorder::ended(uint64_t id, bool ok) {
  const int64_t t = now_us();
  std::lock_guard lock(mu_);
  end_locked(id, ok, t);
}

void FlightRecorder::ended_collective(uint64_t seq, bool ok) {
  const int64_t t = now_us();
  std::lock_guard lock(mu_);
  const uint64_t id = collective_ids_[seq % collective_ids_.size()];
  const FlightEntry& e = ring_[id % ring_.size()];
  if (e.id == id && e.seq == seq && is_collective(e.op)) end_locked(id, ok, t);
}

void FlightRecorder::end_locked(uint64_t id, bool ok, int64_t t) {
  FlightEntry& e = ring_[id % ring_.size()];
  if (e.id != id || e.state != FlightEntry::State::kPending) return;
  e.state = ok ? FlightEntry::State::kCompleted : FlightEntry::State::kFailed;
  e.ended_us = t;
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  {
    std::lock_guard lock(mu_);
    const uint64_t kept = std::min<uint64_t>(next_id_, ring_.size());
    for (uint64_t id = next_id_ - kept; id < next_id_; ++id) {
      out.push_back(ring_[id % ring_.size()]);
    }
  }
  const int64_t offset = wall_offset_us();
  for (FlightEntry& e : out) {
    e.issued_us += offset;
    if (e.ended_us != 0) e.ended_us += offset;
  }
  return out;
}

std::string FlightRecorder::to_json(int global_rank, const std::string& group, int group_rank,
                                    int group_size, const std::string& reason,
                                    int64_t failed_seq) const {
  nlohmann::json ops = nlohmann::json::array();
  for (const FlightEntry& e : snapshot()) {
    const bool collective = is_collective(e.op);
    const bool failed =
        collective && int64_t(e.seq) == failed_seq && e.state == FlightEntry::State::kPending;
    ops.push_back({{"id", e.id},
                   {"op", op_name(e.op)},
                   {"seq", e.seq},
                   {"peer", e.peer},
                   {"root", e.root},
                   {"bytes", e.bytes},
                   {"dtype", e.dtype},
                   {"state", failed ? "failed" : state_name(e.state)},
                   {"issued_us", e.issued_us},
                   {"ended_us", e.ended_us}});
  }
  nlohmann::json doc = {{"rank", global_rank},      {"group", group},
                        {"group_rank", group_rank}, {"group_size", group_size},
                        {"reason", reason},         {"dumped_us", wall_now_us()},
                        {"ops", std::move(ops)}};
  return doc.dump(1);
}

std::string FlightRecorder::dump(int global_rank, const std::string& group, int group_rank,
                                 int group_size, const std::string& reason,
                                 int64_t failed_seq) const {
  const char* dir = std::getenv("SPMD_FLIGHT_RECORDER_DIR");
  if (!dir || !*dir) return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string file = group;
  for (char& c : file) {
    if (c == '/') c = '.';
  }
  const std::string path = str_cat(dir, "/flight_rank", global_rank, "_", file, ".json");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << to_json(global_rank, group, group_rank, group_size, reason, failed_seq) << '\n';
    if (!out) return "";
  }
  // Renamed into place whole, so that a reader never sees half a dump.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return "";
  return path;
}

}  // namespace spmd::dist
