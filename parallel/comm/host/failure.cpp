// The host backend when a collective fails: the error its Work reports, the
// abort that makes the peers fail at once too, and the words that say why
// (the ranks never seen at the collective and the hosts they run on, the
// group's abort record); and the arrival record a slow collective leaves in
// the store for them.
#include <algorithm>
#include <thread>

#include "parallel/comm/host/host_process_group.h"
#include "parallel/comm/host/transport.h"
#include "parallel/comm/tcp/link.h"
#include "runtime/error.h"

namespace spmd::dist {

using namespace tcp;   // NOLINT: this file is the backend's own
using namespace host;  // NOLINT

namespace {

// "[1, 2]".
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += str_cat(text.empty() ? "[" : ", ", r);
  return ranks.empty() ? "[]" : text + "]";
}

}  // namespace

// How long a collective waits before recording its arrival in the store; also
// the grace a timed-out rank gives late arrivals to be recorded.
std::chrono::milliseconds HostProcessGroup::slow_after(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
}

// Turns the error that stopped a collective into the one its Work reports,
// and aborts the group so that the peers fail at once too.
std::exception_ptr HostProcessGroup::fail(const CommOp& op, std::exception_ptr error) {
  std::string cause;
  bool caller_error = false;
  bool timed_out = false;
  bool store_lost = false;  // then nothing more is asked of it: each try would wait its timeout
  try {
    std::rethrow_exception(error);
  } catch (const LinkError& e) {
    caller_error = e.is_mismatch();
    cause = e.what();
    if (!caller_error) {
      cause += where_ranks_run({e.peer()}, remote_hosts_);
      note_failure();  // so that a rank that diagnoses need not wait for this one
      cause += peer_report(e.peer());
    }
  } catch (const TimeoutError& e) {
    timed_out = true;
    cause = str_cat(e.what(), "; ", never_arrived(op, &store_lost));
  } catch (const std::exception& e) {
    cause = e.what();
  }
  if (caller_error || timed_out) {
    mesh_->abort();  // the peers fail now, and publish their ledgers
    if (!store_lost) cause += desync_report(op.seq);  // who issued what (desync_check.h)
  }
  const std::string message =
      str_cat(op.description, " (rank ", rank(), " of ", size(), ") failed: ", cause);
  aborted_ = message;
  set_aborted();
  dump_flight_record(int64_t(op.seq), message);  // into SPMD_FLIGHT_RECORDER_DIR, when set
  try {  // the first reason recorded wins: it is the root cause the others report
    const std::string mine = str_cat(rank_name(rank()), " reported: ", message);
    if (!store_lost) store().compare_set(key("abort"), {}, Bytes(mine.begin(), mine.end()));
  } catch (...) {
    // The store may have died with its host: the record only adds words to
    // the peers' reports, and this rank's own error below says what failed.
  }
  mesh_->abort();
  p2p_->abort(str_cat("the group was aborted: ", message));
  if (caller_error) return std::make_exception_ptr(InvalidArgument(message));
  if (timed_out) return std::make_exception_ptr(TimeoutError(message));
  return std::make_exception_ptr(CommError(message));
}

// Which ranks were never seen at `op`: no header from them reached this rank,
// and they left no arrival record in the store (waiting a little for late
// ones); with the host of each that runs on another one. When the store
// cannot be reached (the link to its host is down, say), the ranks not heard
// from, and *store_lost is set.
std::string HostProcessGroup::never_arrived(const CommOp& op, bool* store_lost) {
  std::vector<int> heard = mesh_->heard_from();
  std::vector<std::string> keys;
  std::vector<int> unknown;
  for (int r = 0; r < size(); ++r) {
    if (r == rank() || std::count(heard.begin(), heard.end(), r)) continue;
    unknown.push_back(r);
    keys.push_back(key(str_cat("arrived/", op.seq, "/", r)));
  }
  if (unknown.empty()) return "every rank reached it (a peer is stuck or too slow)";
  std::vector<int> missing;
  try {
    try {
      store().wait(keys, slow_after(timeout()));
    } catch (const TimeoutError&) {
      // Expected when some never arrive: the check below names them.
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!store().check({keys[i]})) missing.push_back(unknown[i]);
    }
  } catch (const std::exception& e) {
    *store_lost = true;
    return str_cat("ranks not heard from at ", op_name(op.type), " #", op.seq, ": ",
                   rank_list(unknown), where_ranks_run(unknown, remote_hosts_),
                   "; the store could not be reached to tell whether they arrived (", e.what(),
                   ")");
  }
  if (missing.empty()) return "every rank reached it (a peer is stuck or too slow)";
  return str_cat("ranks that never arrived at ", op_name(op.type), " #", op.seq, ": ",
                 rank_list(missing), where_ranks_run(missing, remote_hosts_));
}

// What the group's abort record says, when a peer vanished: often the lost
// peer (or another) aborted for a reason of its own, and writes the record
// once it has compared the ranks' ledgers, so this waits a little for it.
std::string HostProcessGroup::peer_report(int /*peer*/) {
  const auto deadline =
      Mesh::Clock::now() + std::min(slow_after(timeout()), std::chrono::milliseconds(500));
  try {
    for (;;) {
      if (store().check({key("abort")}))
        return "; the group's abort record says: " + store().get_string(key("abort"));
      if (Mesh::Clock::now() >= deadline) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (...) {
    // The store is unreachable: the report goes on without the record's
    // words (the caller's message already names the lost peer).
  }
  return "";
}

void HostProcessGroup::announce_arrival() {
  announced_ = true;
  try {
    store().set(key(str_cat("arrived/", current_seq_, "/", rank())), std::string_view("1"));
  } catch (...) {
    // Best effort: the record only helps a failing peer name who arrived; a
    // store that cannot take it must not fail a collective that may still end well.
  }
}

}  // namespace spmd::dist
