// A message that does not fit its recv fails both ends. The receiver fails
// its recv, reads and drops the payload (so the pair's stream stays in
// step), and sends the sender a refusal frame: a header with op kRecv, the
// refused message's number in `seq`, its tag in `arg`, and as payload the
// text that names both sides (count bytes of u8). The sender, which reads
// its connections while a send is in flight and whenever it waits on a
// recv, then fails the refused send's Work if it is still being written;
// if the Work had already completed (its bytes were handed to the kernel),
// nothing of it can fail any more, so the pair fails instead: every
// pending and later operation with that peer fails with the refusal.
#include <algorithm>

#include "parallel/comm/tcp/p2p.h"
#include "parallel/comm/tcp/p2p_state.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd::dist::tcp {
namespace {
constexpr size_t kMaxRefusalBytes = 4096;  // longer than any text refuse() writes
}  // namespace

void P2PEngine::refuse(Peer& peer, Op& recv, const Header& sent) {
  const std::string why =
      str_cat("rank ", peer.rank, "'s send of ", sent.count, " ", dtype_name(sent.dtype),
              " elements (its message #", sent.seq, " to rank ", rank_, ", tag ", sent.arg,
              ") does not match rank ", rank_, "'s recv of ", recv.count, " ",
              dtype_name(recv.dtype), " elements in group ", group_);
  finish(recv.work, std::make_exception_ptr(InvalidArgument(
                        str_cat(describe_op(recv), ": ", why,
                                "; the message was discarded and rank ", peer.rank, " told"))));
  auto frame = std::make_unique<Op>();
  frame->is_send = true;
  frame->peer = peer.rank;
  frame->tag = sent.arg;
  frame->text = why.substr(0, kMaxRefusalBytes);
  frame->data = frame->text.data();
  frame->count = frame->bytes = frame->text.size();
  frame->dtype = DType::kU8;
  frame->header.op = OpType::kRecv;  // a refusal, not a message: no send_seq of its own
  frame->header.dtype = DType::kU8;
  frame->header.group = group_hash(group_);
  frame->header.arg = sent.arg;
  frame->header.seq = sent.seq;
  frame->header.count = frame->bytes;
  frame->deadline = Clock::now() + timeout_;  // its Work is a completed one: nobody waits
  peer.sends.push_back(std::move(frame));
  write_some(peer);
}

bool P2PEngine::begin_refusal(Peer& peer) {
  const Header& h = peer.header;
  if (h.magic != kMagic || h.group != group_hash(group_) || h.op != OpType::kRecv) return false;
  if (h.dtype != DType::kU8 || h.count == 0 || h.count > kMaxRefusalBytes ||
      h.seq >= peer.send_seq) {
    fail_peer(peer, str_cat("received a malformed refusal from rank ", peer.rank, " (", describe(h),
                            "; this rank has sent it ", peer.send_seq, " messages)"));
    return true;
  }
  peer.refusal.assign(h.count, '\0');
  peer.in = Peer::In::kPayload;
  peer.target = Peer::Target::kRefusal;
  peer.payload = peer.refusal.data();
  peer.payload_bytes = peer.refusal.size();
  peer.payload_done = 0;
  return true;
}

void P2PEngine::on_refusal(Peer& peer) {
  const uint64_t seq = peer.header.seq;
  const std::string why = str_cat("rank ", peer.rank, " refused it: ", peer.refusal);
  auto in_flight = std::find_if(peer.sends.begin(), peer.sends.end(),
                                [&](const auto& op) { return op->header.seq == seq; });
  if (in_flight != peer.sends.end() && (*in_flight)->header.op == OpType::kSend) {
    (*in_flight)->refused = why;  // fails when its last byte is written (write_some)
    return;
  }
  SPMD_LOG_ERROR("send to rank ", peer.rank, " in group ", group_, " (message #", seq,
                 ") had completed when ", why, "; every later operation with rank ", peer.rank,
                 " fails");
  fail_peer(peer, str_cat("an earlier send to rank ", peer.rank, " (message #", seq,
                          ") was refused: ", why));
}

}  // namespace spmd::dist::tcp
