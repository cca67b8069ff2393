// Reading a job's groups, records and heartbeats from the store.
#include "launcher/job_progress.h"

#include <cstdlib>

#include "runtime/error.h"

namespace spmd::launcher {

namespace {

constexpr auto kRead = std::chrono::seconds(5);  // a key that check() found is there

std::string text_of(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace

JobReader::JobReader(Store& store, int attempt, int world_size, std::vector<pid_t> pids)
    : store_(store),
      prefix_(str_cat("attempt_", attempt, "/")),
      world_size_(world_size),
      pids_(std::move(pids)),
      entries_read_(world_size, 0) {
  pids_.resize(world_size, 0);
}

// New entries of every rank's list; a group is kept once, under its name.
void JobReader::find_groups() {
  for (int g = 0; g < world_size_; ++g) {
    const std::string count_key = prefix_ + group_count_key(g);
    if (!store_.check({count_key})) continue;
    const int64_t count = std::atoll(text_of(store_.get(count_key, kRead)).c_str());
    for (; entries_read_[g] < count; ++entries_read_[g]) {
      const std::string key = prefix_ + group_entry_key(g, entries_read_[g]);
      if (!store_.check({key})) break;  // counted, not yet written: the next look
      const std::optional<GroupEntry> e = decode_group(text_of(store_.get(key, kRead)));
      if (!e || names_.count(e->name)) continue;
      names_.insert(e->name);
      GroupProgress group{e->name, e->globals, {}};
      if (e->name == "world") {
        groups_.insert(groups_.begin(), std::move(group));
      } else {
        groups_.push_back(std::move(group));
      }
    }
  }
}

JobProgress JobReader::read() {
  find_groups();
  JobProgress job;
  job.groups = groups_;
  if (job.groups.empty()) {  // nothing listed: the world, by its global ranks
    GroupProgress world{"world", {}, {}};
    for (int g = 0; g < world_size_; ++g) world.globals.push_back(g);
    job.groups.push_back(std::move(world));
  }
  for (GroupProgress& group : job.groups) {
    group.ranks.resize(group.globals.size());
    for (size_t r = 0; r < group.globals.size(); ++r) {
      const std::string key = prefix_ + progress_key(group.name, int(r));
      if (store_.check({key})) group.ranks[r] = decode_progress(text_of(store_.get(key, kRead)));
    }
  }
  job.beat_us.assign(world_size_, 0);
  job.process.resize(world_size_);
  job.cpu_while_stalled_s.assign(world_size_, -1);
  for (int g = 0; g < world_size_; ++g) {
    const std::string key = prefix_ + heartbeat_key(g);
    if (store_.check({key})) job.beat_us[g] = std::atoll(text_of(store_.get(key, kRead)).c_str());
    if (pids_[g] > 0) job.process[g] = read_process_state(pids_[g]);
  }
  return job;
}

// Progress is a collective completing, a rank entering one from its own
// code, or bytes arriving: not more collectives queued behind one that does
// not complete (a loop of asynchronous calls issues on while it waits).
std::string JobReader::progress_text(const JobProgress& job) {
  std::string text;
  for (const GroupProgress& group : job.groups) {
    text += group.name + "\n";
    for (const auto& p : group.ranks) {
      if (!p) {
        text += "-\n";
        continue;
      }
      text += str_cat(p->completed, p->in_flight() ? " waiting" : " own code");
      for (const PeerWait& w : p->waiting) text += str_cat(" ", w.peer, ":", w.received);
      text += "\n";
    }
  }
  return text;
}

}  // namespace spmd::launcher
