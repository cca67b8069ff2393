// Hang triage on records made by hand (launcher/hang_triage.h): the cases a
// live job makes only by chance of timing. A rank still inside a collective
// its peer completed; two groups waiting on each other; a rank on another
// node known only by its silent heartbeat; a record without a start time.
// And the group list's text form (runtime/progress.h).
#include <catch2/catch.hpp>

#include "launcher/hang_triage.h"

using namespace spmd;
using namespace spmd::launcher;

namespace {

constexpr int64_t kNow = 1'800'000'000'000'000;  // µs since the epoch
constexpr int64_t kSecond = 1'000'000;

// A rank's record in a group: `issued` collectives, `completed` of them.
RankProgress record(int rank, uint64_t issued, uint64_t completed, const std::string& op = "-",
                    int64_t since_us = kNow - 5 * kSecond) {
  RankProgress p;
  p.rank = rank;
  p.issued = issued;
  p.completed = completed;
  if (completed < issued) p.seq = completed, p.op = op, p.since_us = since_us;
  return p;
}

// A job of `world` ranks on this node, all asleep, heartbeats fresh.
JobProgress job_of(int world) {
  JobProgress job;
  job.beat_us.assign(world, kNow - kSecond / 2);
  job.process.assign(world, ProcessState{'S', 1.0});
  job.cpu_while_stalled_s.assign(world, 0.0);
  job.stalled_s = 5;
  return job;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

TEST_CASE("hang triage: a rank still inside a collective its peer completed", "[hang]") {
  // Rank 0 finished all_reduce #5 (rank 1's bytes had arrived) and waits in
  // #6; rank 1 is still inside #5.
  JobProgress job = job_of(2);
  job.groups.push_back({"world", {0, 1}, {}});
  job.groups[0].ranks = {record(0, 7, 6, "all_reduce(f32[8])", kNow - 4 * kSecond),
                         record(1, 6, 5, "all_reduce(f32[8])", kNow - 6 * kSecond)};
  const std::string report = wavefront_report(job, kNow);
  CHECK(first_line(report) ==
        "spmdrun: hang: rank 1 is still inside collective #5 of group world "
        "(all_reduce(f32[8])), which rank 0 completed; rank 0 waits for it in collective #6 of "
        "group world (all_reduce(f32[8])); its process is asleep (state S), 0.0 s of CPU in the "
        "last 5.0 s");
  CHECK(report.find("in the collective for 6.0 s") != std::string::npos);
  CHECK(report.find("every rank is inside") == std::string::npos);
}

TEST_CASE("hang triage: two groups that wait on each other", "[hang]") {
  // Rank 0 waits in group a for rank 1; rank 1 waits in group b for rank 0.
  JobProgress job = job_of(2);
  job.groups.push_back({"world/a", {0, 1}, {}});
  job.groups.push_back({"world/b", {0, 1}, {}});
  job.groups[0].ranks = {record(0, 1, 0, "all_reduce(f32[8])"), record(1, 0, 0)};
  job.groups[1].ranks = {record(0, 0, 0), record(1, 1, 0, "broadcast(f32[8])")};
  CHECK(first_line(wavefront_report(job, kNow)) ==
        "spmdrun: hang: ranks wait on each other (a deadlock across groups): rank 0 in "
        "collective #0 of group world/a (all_reduce(f32[8])) on rank 1, rank 1 in collective #0 "
        "of group world/b (broadcast(f32[8])) on rank 0");
}

TEST_CASE("hang triage: a rank on another node, known by its silent heartbeat", "[hang]") {
  JobProgress job = job_of(2);
  job.process[1] = ProcessState{};  // not a worker of this node
  job.beat_us[1] = kNow - 12 * kSecond;
  job.groups.push_back({"world", {0, 1}, {}});
  job.groups[0].ranks = {record(0, 3, 2, "all_gather(f32[4])"), record(1, 2, 2)};
  const std::string report = wavefront_report(job, kNow);
  CHECK(first_line(report) ==
        "spmdrun: hang: rank 1 has been silent for 12.0 s (no heartbeat: its process is stopped "
        "or frozen, or its host cannot reach the store): rank 0 waits for it in collective #2 of "
        "group world (all_gather(f32[4])); "
        "its last record shows it in its own code");
  CHECK(report.find("silent 12.0 s") != std::string::npos);
}

TEST_CASE("hang triage: a collective older than the ledger keeps", "[hang]") {
  // op "?" (not kept) and no start time: no made-up duration, no "(?)".
  JobProgress job = job_of(2);
  job.groups.push_back({"world", {0, 1}, {}});
  job.groups[0].ranks = {record(0, 40, 20, "?", 0), record(1, 20, 20)};
  const std::string report = wavefront_report(job, kNow);
  CHECK(first_line(report) ==
        "spmdrun: hang: rank 1 never entered collective #20 of group world, where rank 0 waits; "
        "its process is asleep (state S), 0.0 s of CPU in the last 5.0 s");
  CHECK(report.find("in the collective  ") != std::string::npos);
}

TEST_CASE("group entries: text form", "[hang]") {
  const GroupEntry g{"world/split3.1", 1, {4, 6}};
  const auto back = decode_group(encode_group(g));
  REQUIRE(back);
  CHECK(back->name == g.name);
  CHECK(back->rank == 1);
  CHECK(back->globals == g.globals);
  CHECK(!decode_group("spmd-group 1 2 4,6 world"));  // rank past the members
  CHECK(!decode_group("spmd-group 1 0 4,x world"));
  CHECK(!decode_group("spmd-group 2 0 4 world"));
}
