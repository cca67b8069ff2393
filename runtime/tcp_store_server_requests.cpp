// The TCPStore server's requests: how each frame changes the table and
// when it is answered (at once, or parked until its keys exist or its
// deadline passes).

#include <algorithm>
#include <vector>

#include "runtime/logging.h"
#include "runtime/tcp_store_server_loop.h"

namespace spmd {

using namespace store_wire;
using Clock = net::Clock;

// ---- requests ----

// Handles every complete frame in c.in until the connection parks a request.
// Returns whether it handled any.
bool TCPStoreServer::Loop::handle_frames(Conn& c) {
  bool handled = false;
  size_t pos = 0;
  try {
    while (!c.closed && !c.closing && !c.waiting && c.in.size() - pos >= 4) {
      uint32_t len = load_u32(c.in.data() + pos);
      if (len > kMaxFrameBytes)
        throw ProtocolError(
            str_cat("a frame of ", len, " bytes exceeds the limit of ", kMaxFrameBytes));
      if (c.in.size() - pos - 4 < len) break;
      Reader r(c.in.data() + pos + 4, len);
      pos += 4 + len;
      c.greeted ? handle_request(c, r) : handle_hello(c, r);
      handled = true;
    }
  } catch (const std::exception& e) {
    drop(c, e.what());
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(std::min(pos, c.in.size())));
  return handled;
}

void TCPStoreServer::Loop::handle_hello(Conn& c, Reader& r) {
  uint32_t magic = r.u32();
  if (magic != kMagic) throw ProtocolError(str_cat("not a store client (bad greeting)"));
  uint16_t version = r.u16();
  r.expect_end();
  Writer w;
  if (version != kVersion) {
    w.u8(static_cast<uint8_t>(Status::kError))
        .str(str_cat("the store server speaks protocol version ", kVersion, ", the client ",
                     version));
    c.closing = true;
    SPMD_LOG_WARN("TCPStoreServer: refusing ", c.peer, ": protocol version ", version);
  } else {
    w.u8(static_cast<uint8_t>(Status::kOk)).u16(kVersion);
    c.greeted = true;
  }
  reply(c, w);
}

void TCPStoreServer::Loop::handle_request(Conn& c, Reader& r) {
  auto op = static_cast<Op>(r.u8());
  switch (op) {
    case Op::kGet: {
      std::string key = r.str();
      int64_t timeout_ms = r.i64();
      r.expect_end();
      return start_wait(c, op, {key}, timeout_ms);
    }
    case Op::kWait: {
      std::vector<std::string> keys = r.keys();
      int64_t timeout_ms = r.i64();
      r.expect_end();
      return start_wait(c, op, std::move(keys), timeout_ms);
    }
    case Op::kSet:
    case Op::kAdd:
    case Op::kCompareSet:
      return handle_write(c, op, r);
    case Op::kCheck:
    case Op::kDeleteKey:
    case Op::kNumKeys:
      return handle_query(c, op, r);
  }
  throw ProtocolError(str_cat("unknown operation ", static_cast<int>(op)));
}

// set, add, compare_set: change the table, answer, wake the parked requests.
void TCPStoreServer::Loop::handle_write(Conn& c, Op op, Reader& r) {
  Writer w;
  std::string key = r.str();
  if (op == Op::kSet) {
    Bytes value = r.bytes();
    r.expect_end();
    table_.set(key, value);
    w.u8(static_cast<uint8_t>(Status::kOk));
  } else if (op == Op::kAdd) {
    int64_t delta = r.i64();
    r.expect_end();
    try {
      int64_t value = table_.add(key, delta);
      w.u8(static_cast<uint8_t>(Status::kOk)).i64(value);
    } catch (const InvalidArgument& e) {  // a well-formed request the table refuses
      w.u8(static_cast<uint8_t>(Status::kError)).str(e.what());
    }
  } else {
    Bytes expected = r.bytes(), desired = r.bytes();
    r.expect_end();
    w.u8(static_cast<uint8_t>(Status::kOk)).bytes(table_.compare_set(key, expected, desired));
  }
  reply(c, w);
  wake_waiters();
}

// check, delete_key, num_keys: answer at once.
void TCPStoreServer::Loop::handle_query(Conn& c, Op op, Reader& r) {
  Writer w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  if (op == Op::kCheck) {
    std::vector<std::string> keys = r.keys();
    r.expect_end();
    w.u8(table_.missing(keys).empty() ? 1 : 0);
  } else if (op == Op::kDeleteKey) {
    std::string key = r.str();
    r.expect_end();
    w.u8(table_.erase(key) ? 1 : 0);
  } else {
    r.expect_end();
    w.i64(table_.size());
  }
  reply(c, w);
}

void TCPStoreServer::Loop::start_wait(Conn& c, Op op, std::vector<std::string> keys,
                                      int64_t timeout_ms) {
  if (timeout_ms < 0) throw ProtocolError(str_cat("negative timeout ", timeout_ms));
  c.wait_op = op;
  c.wait_keys = std::move(keys);
  c.wait_timeout_ms = timeout_ms;
  c.wait_deadline =
      Clock::now() + std::chrono::milliseconds(std::min<int64_t>(timeout_ms, int64_t{1} << 40));
  c.waiting = true;
  if (table_.missing(c.wait_keys).empty()) answer_wait(c);
}

void TCPStoreServer::Loop::answer_wait(Conn& c) {
  Writer w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  if (c.wait_op == Op::kGet) w.bytes(*table_.find(c.wait_keys[0]));
  c.waiting = false;
  c.wait_keys.clear();
  reply(c, w);
}

void TCPStoreServer::Loop::wake_waiters() {
  for (auto& c : conns_)
    if (c->waiting && !c->closed && table_.missing(c->wait_keys).empty()) answer_wait(*c);
}

void TCPStoreServer::Loop::expire_waiters() {
  Clock::time_point now = Clock::now();
  for (auto& c : conns_) {
    if (!c->waiting || c->closed || c->wait_deadline > now) continue;
    Writer w;
    w.u8(static_cast<uint8_t>(Status::kTimeout)).keys(table_.missing(c->wait_keys));
    c->waiting = false;
    c->wait_keys.clear();
    reply(*c, w);
  }
}

int TCPStoreServer::Loop::poll_timeout() const {
  // No parked request and no stop pending: sleep until something happens.
  int ms = stopping_.load() ? net::poll_timeout_ms(stop_deadline_.load()) : -1;
  if (Clock::now() < accept_resume_) {  // the listener rests: wake to poll it again
    int left = net::poll_timeout_ms(accept_resume_);
    ms = ms < 0 ? left : std::min(ms, left);
  }
  for (const auto& c : conns_) {
    if (!c->waiting) continue;
    int left = net::poll_timeout_ms(c->wait_deadline);
    ms = ms < 0 ? left : std::min(ms, left);
  }
  return ms;
}

}  // namespace spmd
