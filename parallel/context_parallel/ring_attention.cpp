// Ring attention: one block's forward and backward in raw ops, the ring that
// visits every key/value pair, and the autograd Function around them.
#include "parallel/context_parallel/ring_attention.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/function.h"
#include "autograd/selective_checkpoint.h"
#include "runtime/trace.h"
#include "tensor/attention.h"
#include "tensor/ops.h"

namespace spmd::dist::cp {
namespace {

std::atomic<int64_t> g_blocks{0};

enum class Visible { kNone, kDiagonal, kFull };

// How query chunk i sees key chunk j under the causal mask.
Visible visibility(int64_t i, int64_t j) {
  return j < i ? Visible::kFull : j == i ? Visible::kDiagonal : Visible::kNone;
}

// Scores of one block, the future masked to -inf on the diagonal block.
Tensor block_scores(const Tensor& q, const Tensor& k, double scale, Visible how) {
  Tensor s = ops::mul(ops::matmul(q, ops::transpose(k, -2, -1)), scale);  // (B, H, c, c)
  if (how == Visible::kDiagonal) {
    const Tensor future =
        ops::gt(ops::triu(ops::ones_like(s), 1), 0.0);  // bool, above the diagonal
    s = ops::masked_fill(s, future, -std::numeric_limits<double>::infinity());
  }
  return s;
}

struct Partial {
  Tensor out, lse;  // (B, H, c, D) and (B, H, c, 1); lse f32 from the fused kernel
};

// f64 blocks are computed in raw ops (exact to f64's precision; the fused
// kernel keeps lse in f32); every other dtype by the fused attention kernel,
// which never holds a block's c x c probabilities.
bool fused(const Tensor& q) { return q.dtype() != DType::kF64; }

Partial block_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                      Visible how) {
  if (fused(q)) {
    const ops::AttentionResult r = ops::attention(q, k, v, how == Visible::kDiagonal, scale);
    return {r.out, ops::unsqueeze(r.lse, -1)};
  }
  const Tensor s = block_scores(q, k, scale, how);
  const Tensor m = ops::amax(s, {-1}, true);
  const Tensor p = ops::exp(ops::sub(s, m));
  const Tensor l = ops::sum(p, {-1}, true);
  return {ops::div(ops::matmul(p, v), l), ops::add(m, ops::log(l))};
}

// The running result of a query chunk and one more block's, merged exactly
// (in f32 for the fused kernel's lse, the output in its own dtype).
void merge(Partial& acc, const Partial& b) {
  if (!acc.out.defined()) {
    acc = b;
    return;
  }
  const Tensor m = ops::maximum(acc.lse, b.lse);
  const Tensor lse =
      ops::add(m, ops::log(ops::add(ops::exp(ops::sub(acc.lse, m)), ops::exp(ops::sub(b.lse, m)))));
  const DType dt = acc.out.dtype();
  acc.out = ops::add(ops::mul(acc.out, ops::to(ops::exp(ops::sub(acc.lse, lse)), dt)),
                     ops::mul(b.out, ops::to(ops::exp(ops::sub(b.lse, lse)), dt)));
  acc.lse = lse;
}

// One block's contribution to dq, dk, dv under the softmax over the whole
// sequence. Raw ops (f64): P = exp(s - lse) from the saved global lse, and
// delta = rowsum(dout * out). Fused: the kernel's backward of the block alone
// recomputes the block's own probabilities P_b = P e^(lse - lse_b), so it is
// handed dout scaled by w = e^(lse_b - lse) per query row and the global out,
// which make its dV, dS and delta those of the global softmax.
void block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                    const Tensor& out, const Tensor& lse, const Tensor& block_lse,
                    const Tensor& delta, double scale, Visible how, Tensor& dq, Tensor& dk,
                    Tensor& dv) {
  if (fused(q)) {
    const Tensor w = ops::to(ops::exp(ops::sub(block_lse, lse)), dout.dtype());  // (B, H, c, 1)
    ops::AttentionResult saved{ops::contiguous(out), ops::contiguous(ops::squeeze(block_lse, -1))};
    const ops::AttentionGrads g = ops::attention_backward(
        ops::contiguous(ops::mul(dout, w)), ops::contiguous(q), ops::contiguous(k),
        ops::contiguous(v), saved, how == Visible::kDiagonal, scale);
    ops::add_(dq, g.dq), ops::add_(dk, g.dk), ops::add_(dv, g.dv);
    return;
  }
  const Tensor p = ops::exp(ops::sub(block_scores(q, k, scale, how), lse));  // (B, H, c, c)
  ops::add_(dv, ops::matmul(ops::transpose(p, -2, -1), dout));
  const Tensor dp = ops::matmul(dout, ops::transpose(v, -2, -1));
  const Tensor ds = ops::mul(p, ops::sub(dp, delta));
  ops::add_(dq, ops::mul(ops::matmul(ds, k), scale));
  ops::add_(dk, ops::mul(ops::matmul(ops::transpose(ds, -2, -1), q), scale));
}

// What the ring's transfers cost, per pass (ring_transfers()).
struct TransferCounters {
  std::atomic<int64_t> transfers{0}, transfer_us{0}, wait_us{0};
  RingTransfers get() const { return {transfers.load(), transfer_us.load(), wait_us.load()}; }
};
TransferCounters g_forward, g_backward;

// One transfer around the ring: `mine` sent to the next rank, the previous
// rank's received into `incoming`, timed from posting to completion.
// Keys and values travel with tag 0, backward's gradient accumulators with
// tag 1; each link carries them in the order both ends post them.
class Transfer {
 public:
  Transfer(const Tensor& mine, Tensor& incoming, ProcessGroup& g, int tag)
      : g_(&g), issued_us_(trace_now_us()), done_us_(std::make_shared<std::atomic<int64_t>>(0)) {
    incoming = ops::empty_like(mine);
    const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
    work_ = g.batch_isend_irecv(
        {{OpType::kSend, mine, next, tag}, {OpType::kRecv, incoming, prev, tag}});
    work_.on_complete([done = done_us_] { done->store(trace_now_us()); });
  }
  // Waits for it, and counts its time in flight and the time waited.
  void wait(TransferCounters& counters) {
    const int64_t start = trace_now_us();
    g_->wait(work_, OpType::kSend);
    const int64_t end = trace_now_us();
    const int64_t done = done_us_->load() > 0 ? done_us_->load() : end;
    counters.transfers.fetch_add(1);
    counters.transfer_us.fetch_add(done - issued_us_);
    counters.wait_us.fetch_add(end - start);
  }

 private:
  ProcessGroup* g_;
  int64_t issued_us_;
  std::shared_ptr<std::atomic<int64_t>> done_us_;
  Work work_;
};

// Keys or values of Hkv heads repeated to H (grouped-query attention).
Tensor repeat_heads(const Tensor& t, int64_t H) {
  const int64_t Hkv = t.size(1);
  if (Hkv == H) return ops::contiguous(t);
  const Shape s = t.shape();
  const Tensor e = ops::expand(ops::unsqueeze(t, 2), Shape{s[0], Hkv, H / Hkv, s[2], s[3]});
  return ops::reshape(ops::contiguous(e), Shape{s[0], H, s[2], s[3]});
}

Tensor sum_heads(const Tensor& t, int64_t Hkv) {
  const Shape s = t.shape();
  if (s[1] == Hkv) return t;
  return ops::sum(ops::view(t, Shape{s[0], Hkv, s[1] / Hkv, s[2], s[3]}), {2});
}

// The ring's forward: {out, lse, then each block's own lse in compute order}.
autograd::TensorList ring_forward(const Tensor& q, const Tensor& k_in, const Tensor& v_in,
                                  ProcessGroup& g, double scale) {
  const int64_t n = g.size(), r = g.rank(), H = q.size(1), c = q.size(2) / 2;
  const auto [a, b] = chunk_ids(n, r);
  const Tensor qc[2] = {ops::narrow(q, 2, 0, c), ops::narrow(q, 2, c, c)};
  const int64_t qid[2] = {a, b};
  Tensor kv = ops::stack({repeat_heads(k_in, H), repeat_heads(v_in, H)}, 0);
  Partial acc[2];
  autograd::TensorList outputs(2);  // out and lse, filled in at the end
  for (int64_t step = 0; step < n; ++step) {
    Tensor next;
    std::optional<Transfer> moving;
    if (step + 1 < n) moving.emplace(kv, next, g, 0);  // overlaps this step's blocks
    const auto [ka, kb] = chunk_ids(n, (r - step + n) % n);
    const int64_t kid[2] = {ka, kb};
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        const Visible how = visibility(qid[i], kid[j]);
        if (how == Visible::kNone) continue;
        const Tensor k = ops::narrow(ops::select(kv, 0, 0), 2, j * c, c);
        const Tensor v = ops::narrow(ops::select(kv, 0, 1), 2, j * c, c);
        const Partial block = block_forward(qc[i], k, v, scale, how);
        outputs.push_back(block.lse);
        merge(acc[i], block);
        g_blocks.fetch_add(1);
      }
    }
    if (moving) {
      moving->wait(g_forward);
      kv = next;
    }
  }
  outputs[0] = ops::cat({acc[0].out, acc[1].out}, 2);
  outputs[1] = ops::cat({acc[0].lse, acc[1].lse}, 2);
  return outputs;
}

// The output is on selective checkpointing's save list (autograd/
// selective_checkpoint.h): a recomputation takes it, and the blocks' lse,
// as they are, and runs no ring.
struct Ring : autograd::Function<Ring> {
  static constexpr const char* kName = "ring_attention";

  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& q_in, const Tensor& k_in,
                        const Tensor& v_in, ProcessGroup* g, double scale) {
    const Tensor q = ops::contiguous(q_in);
    const autograd::TensorList kept = autograd::keep_or_reuse(
        "ring_attention", [&] { return ring_forward(q, k_in, v_in, *g, scale); });
    const Tensor &out = kept[0], &lse = kept[1];
    ctx.save_for_backward({q, k_in, v_in, out, lse});
    ctx.set("group", g);
    ctx.set("scale", scale);
    ctx.set("block_lses", std::vector<Tensor>(kept.begin() + 2, kept.end()));
    return out;
  }

  static autograd::TensorList backward(autograd::FunctionCtx& ctx,
                                       const autograd::TensorList& grads) {
    const autograd::TensorList saved = ctx.saved_tensors();
    const Tensor &q = saved[0], &k_in = saved[1], &v_in = saved[2], &out = saved[3],
                 &lse = saved[4];
    ProcessGroup* g = ctx.get<ProcessGroup*>("group");
    const double scale = ctx.get<double>("scale");
    const int64_t n = g->size(), r = g->rank(), H = q.size(1), c = q.size(2) / 2;
    const Tensor dout = ops::contiguous(grads[0]);
    const Tensor delta = ops::sum(ops::mul(dout, out), {-1}, true);  // (B, H, 2c, 1)
    const std::vector<Tensor>& block_lses = ctx.get<std::vector<Tensor>>("block_lses");
    size_t block = 0;
    const auto [a, b] = chunk_ids(n, r);
    const int64_t qid[2] = {a, b};
    Tensor dq = ops::zeros_like(q);
    // At step s this rank holds the keys and values of rank o = r - s, and
    // adds its share of o's dK, dV to the accumulator that started at o and
    // has visited o+1 .. r-1. Keys and values for step s+1 travel while step
    // s computes; the accumulator goes on to r+1 after step s and is needed
    // there after its step s+1, so its transfer hides behind that step. The
    // last one brings every rank its own accumulator home.
    Tensor kv = ops::stack({repeat_heads(k_in, H), repeat_heads(v_in, H)}, 0);  // (2, B, H, 2c, D)
    Tensor acc;                        // (2, B, H, 2c, D): o's dK, dV so far
    std::optional<Transfer> incoming;  // the next owner's accumulator, on its way from r-1
    Tensor next_acc;
    for (int64_t step = 0; step < n; ++step) {
      Tensor next_kv;
      std::optional<Transfer> moving;
      if (step + 1 < n) moving.emplace(kv, next_kv, *g, 0);
      const auto [ka, kb] = chunk_ids(n, (r - step + n) % n);
      const int64_t kid[2] = {ka, kb};
      Tensor mine = ops::zeros_like(kv);  // this rank's share of o's dK, dV
      for (int i = 0; i < 2; ++i) {
        const Tensor qi = ops::narrow(q, 2, i * c, c), doi = ops::narrow(dout, 2, i * c, c);
        const Tensor li = ops::narrow(lse, 2, i * c, c), di = ops::narrow(delta, 2, i * c, c);
        const Tensor oi = ops::narrow(out, 2, i * c, c);
        Tensor dqi = ops::narrow(dq, 2, i * c, c);
        for (int j = 0; j < 2; ++j) {
          const Visible how = visibility(qid[i], kid[j]);
          if (how == Visible::kNone) continue;
          auto part = [&](const Tensor& t, int which) {
            return ops::narrow(ops::select(t, 0, which), 2, j * c, c);
          };
          Tensor dk = part(mine, 0), dv = part(mine, 1);
          block_backward(qi, part(kv, 0), part(kv, 1), doi, oi, li, block_lses[block++], di, scale,
                         how, dqi, dk, dv);
        }
      }
      if (incoming) {  // o's accumulator from r-1, which it sent after its step s-1
        incoming->wait(g_backward);
        acc = ops::add(next_acc, mine);
      } else {
        acc = mine;  // step 0: o is this rank, the accumulator starts here
      }
      if (n == 1) break;  // a group of one has nothing to pass
      incoming.emplace(acc, next_acc, *g, 1);
      if (moving) {
        moving->wait(g_backward);
        kv = next_kv;
      }
    }
    if (n > 1) {  // the last accumulator to arrive is this rank's own
      incoming->wait(g_backward);
      acc = next_acc;
    }
    const int64_t Hkv = k_in.size(1);
    return {dq, sum_heads(ops::select(acc, 0, 0), Hkv), sum_heads(ops::select(acc, 0, 1), Hkv)};
  }
};

}  // namespace

std::pair<int64_t, int64_t> chunk_ids(int64_t cp, int64_t rank) {
  return {rank, 2 * cp - 1 - rank};
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, ProcessGroup& group,
                      double scale) {
  SPMD_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4 && k.shape() == v.shape() &&
                 q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3) &&
                 k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             "ring_attention: expected q (B, H, 2c, D) and k, v (B, Hkv, 2c, D) with H a multiple "
             "of Hkv, got ",
             q.shape(), ", ", k.shape(), ", ", v.shape());
  SPMD_CHECK(q.size(2) % 2 == 0, "ring_attention: this rank holds ", q.size(2),
             " tokens, which are not two equal chunks (the sequence must divide into 2 x cp = ",
             2 * group.size(), " chunks)");
  if (scale < 0) scale = 1.0 / std::sqrt(double(q.size(3)));
  return Ring::apply(q, k, v, &group, scale);
}

int64_t ring_attention_blocks() { return g_blocks.load(); }

RingTransferStats ring_transfers() { return {g_forward.get(), g_backward.get()}; }

}  // namespace spmd::dist::cp
