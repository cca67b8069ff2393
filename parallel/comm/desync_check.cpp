// DesyncCheck: recording at issue, publishing from a thread, and the
// comparison a failing rank makes.
#include "parallel/comm/desync_check.h"

#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/progress.h"
#include "runtime/trace.h"

namespace spmd::dist {

namespace {

std::chrono::milliseconds interval_from_env() {
  const char* text = std::getenv("SPMD_DESYNC_INTERVAL_MS");
  if (!text || !*text) return std::chrono::milliseconds(200);
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  SPMD_CHECK(*end == '\0' && v >= 1, "SPMD_DESYNC_INTERVAL_MS='", text, "' is not an integer >= 1");
  return std::chrono::milliseconds(v);
}

// The tensor whose shape the ranks must agree on: what each passes in.
// all_to_all's split sizes may differ by rank, so only its dtype counts.
void describe_tensor(const CommOp& op, LedgerCall& c) {
  const bool takes_input = op.type == OpType::kAllGather || op.type == OpType::kReduceScatter ||
                           op.type == OpType::kGather || op.type == OpType::kAllToAll ||
                           op.type == OpType::kAllToAllv;
  const Tensor& t = takes_input && op.input.defined() ? op.input : op.tensor;
  if (!t.defined()) return;
  const Shape& shape = t.shape();
  c.dtype = t.dtype();
  if (op.type == OpType::kAllToAll || op.type == OpType::kAllToAllv) return;
  c.ndim = shape.ndim();
  c.dims = shape.begin();
}

}  // namespace

bool DesyncCheck::enabled_by_env() {
  const char* text = std::getenv("SPMD_DESYNC_CHECK");
  return !(text && std::string_view(text) == "0");
}

DesyncCheck::DesyncCheck(std::shared_ptr<Store> store, std::string prefix, std::string group,
                         int rank, int size, std::vector<int> global_ranks)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      globals_(std::move(global_ranks)),
      root_(globals_.empty()),
      interval_(interval_from_env()),
      tick_us_(trace_now_us()),
      published_(UINT64_MAX) {
  if (root_) {
    for (int r = 0; r < size_; ++r) globals_.push_back(r);
  }
  SPMD_CHECK(int(globals_.size()) == size_, "DesyncCheck: ", globals_.size(),
             " global ranks for a group of ", size_);
  list_group();
  publisher_ = std::thread([this] { publisher_loop(); });
}

// Two round trips per group made: the count, then the entry. A launcher that
// reads the count before the entry is set skips it until its next look.
void DesyncCheck::list_group() {
  const int me = globals_[rank_];
  const int64_t i = store_->add(group_count_key(me), 1) - 1;
  store_->set(group_entry_key(me, i), encode_group({group_, rank_, globals_}));
}

void DesyncCheck::beat() {
  const auto now = std::chrono::steady_clock::now();
  if (!root_ || now - beaten_ < kHeartbeat) return;
  beaten_ = now;
  store_->set(heartbeat_key(globals_[rank_]), std::to_string(trace_now_us()));
}

DesyncCheck::~DesyncCheck() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  publisher_.join();
}

// On the issuing thread, for every collective: no lock, no allocation, no
// clock read (the publisher's tick stands in for the time), nothing copied
// but into the ring. The tag is cleaned and hashed when it changes, not per
// call.
void DesyncCheck::record(const CommOp& op, std::string_view tag) {
  LedgerCall call;
  call.op = op.type;
  describe_tensor(op, call);
  const bool reduces = op.type == OpType::kAllReduce || op.type == OpType::kReduce ||
                       op.type == OpType::kReduceScatter;
  if (reduces) call.reduce_op = op.reduce_op;
  const bool rooted = op.type == OpType::kBroadcast || op.type == OpType::kReduce ||
                      op.type == OpType::kGather || op.type == OpType::kScatter;
  if (rooted) call.root = op.root;
  if (tag != tag_text_) {
    tag_text_ = tag;
    LedgerEntry cleaned;
    cleaned.set_tag(tag);
    tag_ = cleaned.tag;
    tag_hash_ = tag_hash(tag_);
  }
  if (!tag.empty()) call.tag = &tag_, call.tag_hash = tag_hash_;
  ledger_.record(op.seq, call, tick_us_.load(std::memory_order_relaxed));
}

// --- Publishing ----------------------------------------------------------------------

void DesyncCheck::publish(bool final) {
  std::lock_guard publishing(publish_mu_);  // a final record is never overwritten
  {
    std::lock_guard lock(mu_);
    if (final_) return;
  }
  LedgerRecord r = ledger_.snapshot(rank_);
  r.final = final;
  store_->set(prefix_ + "ledger/" + std::to_string(rank_), encode(r));
  std::lock_guard lock(mu_);
  published_ = r.count;
  final_ = final;
}

void DesyncCheck::publish_final() {
  try {
    publish(true);
  } catch (...) {  // a store that is gone leaves the others without this record: no worse
  }
}

void DesyncCheck::note_waiting(uint64_t seq, std::vector<PeerWait> waiting) {
  std::lock_guard lock(mu_);
  waiting_seq_ = seq;
  waiting_ = std::move(waiting);
}

// How many of the first `issued` collectives have completed. A group's
// collectives complete in issue order (a backend runs them in order, as a
// stream does), so a slot saying that #v-1 is done says that all before it
// are: the count jumps from slot to slot, a few reads per publication
// however many collectives ran since the last.
uint64_t DesyncCheck::count_completed(uint64_t issued) {
  uint64_t c = completed_;
  while (c < issued) {
    const uint64_t v = done_[c % kDone].load(std::memory_order_relaxed);
    if (v <= c) break;  // #c is not done: the slot still holds an older one
    c = v;
  }
  completed_ = std::min(c, issued);
  return completed_;
}

// The oldest collective not completed (collectives complete in issue order).
void DesyncCheck::publish_progress() {
  const LedgerRecord r = ledger_.snapshot(rank_);
  RankProgress p;
  p.rank = rank_;
  p.issued = r.count;
  p.completed = count_completed(r.count);
  if (p.in_flight()) {
    p.seq = p.completed;
    if (p.seq != seen_seq_) seen_seq_ = p.seq, seen_us_ = tick_us_.load(std::memory_order_relaxed);
    const uint64_t first = r.count - r.entries.size();
    if (p.seq >= first) {
      p.op = r.entries[p.seq - first].describe();
      p.since_us = r.entries[p.seq - first].issued_us;
    } else {                  // issued more than Ledger::kKept collectives ago (a deep async queue)
      p.op.assign(1, '?');    // (not `= "?"`: GCC 12 warns falsely of an overlapping copy)
      p.since_us = seen_us_;  // first seen in flight: within an interval of its issue, or later
    }
    std::lock_guard lock(mu_);
    if (waiting_seq_ == p.seq) p.waiting = waiting_;
  }
  std::string text = encode_progress(p);
  if (text == progress_) return;
  store_->set(progress_key(group_, rank_), text);
  progress_ = std::move(text);
}

// Reads every rank's record and reports the first call on which they
// differ (not ranks that are merely behind: that is normal while running).
void DesyncCheck::compare_records() {
  if (rank_ != 0 || size_ < 2 || reported_ || ++wakes_ % 5 != 0) return;
  const uint64_t count = ledger_.count();
  if (count == compared_) return;
  compared_ = count;
  std::vector<std::optional<LedgerRecord>> records(size_);
  records[0] = ledger_.snapshot(0);
  for (int r = 1; r < size_; ++r) {
    const std::string key = prefix_ + "ledger/" + std::to_string(r);
    if (!store_->check({key})) continue;
    const Bytes b = store_->get(key, interval_);
    records[r] = decode(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  }
  const auto found = find_desync(records, group_, /*behind=*/false);
  if (!found) return;
  reported_ = true;
  const std::string line = "desync: " + *found;
  store_->compare_set(prefix_ + "desync", {}, Bytes(line.begin(), line.end()));
  SPMD_LOG_ERROR(line, " (found by rank 0's ledger check while the job runs)");
}

void DesyncCheck::publisher_loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [&] { return stop_; });
    if (stop_) break;
    tick_us_.store(trace_now_us(), std::memory_order_relaxed);
    const bool ledger_changed = !final_ && ledger_.count() != published_;
    lock.unlock();
    try {
      if (ledger_changed) publish(false);
      publish_progress();
      beat();
      compare_records();
    } catch (...) {  // the store is gone (the job is ending): stop publishing
      lock.lock();
      break;
    }
    lock.lock();
  }
}

// --- Diagnosing ----------------------------------------------------------------------

std::string DesyncCheck::diagnose(uint64_t seq, std::chrono::milliseconds grace) {
  try {
    publish_final();
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::vector<std::optional<LedgerRecord>> records(size_);
    records[rank_] = ledger_.snapshot(rank_);
    auto settled = [&](int r) {
      return records[r] && (records[r]->final || records[r]->count > seq);
    };
    for (;;) {
      bool waiting = false;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || settled(r)) continue;
        const std::string key = prefix_ + "ledger/" + std::to_string(r);
        if (store_->check({key})) {
          const Bytes b = store_->get(key, grace);
          if (auto rec =
                  decode(std::string_view(reinterpret_cast<const char*>(b.data()), b.size())))
            records[r] = std::move(rec);
        }
        waiting = waiting || !settled(r);
      }
      if (!waiting || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Calls that differ are a desync whatever else holds; a rank short of
    // #seq is only behind if it is alive to be behind.
    auto found = find_desync(records, group_, /*behind=*/false);
    if (!found) {
      std::vector<int> late;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && !settled(r)) late.push_back(r);
      }
      const std::string silent = silent_ranks(late, records, seq);
      if (!silent.empty()) return silent;
      found = find_desync(records, group_);
    }
    if (!found) return "";
    const std::string line = "desync: " + *found;
    const Bytes mine(line.begin(), line.end());
    if (store_->compare_set(prefix_ + "desync", {}, mine) == mine) SPMD_LOG_ERROR(line);
    return line;
  } catch (const std::exception&) {  // the store is gone: the error stands without the ledger
    return "";
  }
}

std::string DesyncCheck::silent_ranks(const std::vector<int>& late,
                                      const std::vector<std::optional<LedgerRecord>>& records,
                                      uint64_t seq) {
  std::string text;
  for (int r : late) {
    const std::string key = heartbeat_key(globals_[r]);
    if (!store_->check({key})) continue;  // no heartbeat to judge by (no root group there)
    const int64_t beat_us = std::atoll(store_->get_string(key).c_str());
    const double silent_s = double(trace_now_us() - beat_us) / 1e6;
    if (silent_s * 1000 < 3 * double(kHeartbeat.count())) continue;
    const std::string name = globals_[r] == r
                                 ? str_cat("rank ", r)
                                 : str_cat("rank ", r, " (global rank ", globals_[r], ")");
    const uint64_t count = records[r] ? records[r]->count : 0;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", silent_s);
    text += str_cat(
        text.empty() ? "stuck: " : "; ", name, " has been silent for ", secs,
        " s (no heartbeat: its process is stopped or frozen, or its host cannot reach the store); "
        "its last record ends ",
        count == 0 ? "before collective #0" : str_cat("at collective #", count - 1), " of group ",
        group_, ", so whether it called #", seq, " is unknown");
  }
  return text;
}

}  // namespace spmd::dist
