// One profiled method per Backend method: a scope, the work, the call.
// Bytes are the sizes of every tensor the method is handed (inputs and
// outputs, each counted once per call, as if read or written once); FLOPs
// are counted for the products (2 M N K), attention (4 T S D per head, half
// of it when causal) and one per output element of the elementwise ops and
// per input element of the reductions. The other ops report bytes alone.
#include "tensor/profiled_backend.h"

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/profiler.h"

namespace spmd {
namespace {

double bytes_of(std::initializer_list<const Tensor*> ts) {
  double n = 0;
  for (const Tensor* t : ts)
    if (t->defined()) n += double(t->nbytes());
  return n;
}

// Opens the op's scope and notes its work.
struct OpScope : ProfileScope {
  OpScope(const char* name, std::initializer_list<const Tensor*> ts, double flops = 0)
      : ProfileScope(name) {
    if (active()) add_work(bytes_of(ts), flops);
  }
};

class ProfiledBackend final : public Backend {
 public:
  explicit ProfiledBackend(Backend& inner) : inner_(inner) {}
  Backend& inner() const { return inner_; }

  DataPtr allocate(size_t nbytes, Device device) override {
    ProfileScope s("allocate");
    return inner_.allocate(nbytes, device);
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    OpScope s("copy", {&src, &dst});
    inner_.copy(src, dst);
  }
  void synchronize(Device device) override {
    ProfileScope s("synchronize");
    inner_.synchronize(device);
  }
  void fill(const Tensor& out, double value) override {
    OpScope s("fill", {&out});
    inner_.fill(out, value);
  }
  void arange(const Tensor& out, double start, double step) override {
    OpScope s("arange", {&out});
    inner_.arange(out, start, step);
  }
  void unary(UnaryOp op, const Tensor& x, const Tensor& out) override {
    OpScope s(op_name(op), {&x, &out}, double(out.numel()));
    inner_.unary(op, x, out);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    OpScope s(op_name(op), {&a, &b, &out}, double(out.numel()));
    inner_.binary(op, a, b, out);
  }
  void binary_scalar(BinaryOp op, const Tensor& a, double v, const Tensor& out,
                     bool scalar_first) override {
    OpScope s(op_name(op), {&a, &out}, double(out.numel()));
    inner_.binary_scalar(op, a, v, out, scalar_first);
  }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override {
    OpScope s("where", {&cond, &a, &b, &out});
    inner_.where(cond, a, b, out);
  }
  void masked_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out) override {
    OpScope s("masked_fill", {&x, &mask, &out});
    inner_.masked_fill(x, mask, value, out);
  }
  void triangle(const Tensor& x, int64_t diagonal, bool upper, const Tensor& out) override {
    OpScope s(upper ? "triu" : "tril", {&x, &out});
    inner_.triangle(x, diagonal, upper, out);
  }
  void reduce(Reduction op, const Tensor& x, const Tensor& out) override {
    static constexpr const char* kNames[] = {"sum", "mean", "max", "min", "prod"};
    OpScope s(kNames[int(op)], {&x, &out}, double(x.numel()));
    inner_.reduce(op, x, out);
  }
  void arg_reduce(bool is_max, const Tensor& x, int dim, const Tensor& out) override {
    OpScope s(is_max ? "argmax" : "argmin", {&x, &out});
    inner_.arg_reduce(is_max, x, dim, out);
  }
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
              double beta) override {
    const int64_t k = a.size(-1);
    OpScope s("matmul", {&a, &b, &out}, 2.0 * double(out.numel()) * double(k));
    inner_.matmul(a, b, out, alpha, beta);
  }
  void softmax(const Tensor& x, const Tensor& out, bool log) override {
    OpScope s(log ? "log_softmax" : "softmax", {&x, &out});
    inner_.softmax(x, out, log);
  }
  void softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, bool log) override {
    OpScope s(log ? "log_softmax_backward" : "softmax_backward", {&dy, &y, &dx});
    inner_.softmax_backward(dy, y, dx, log);
  }
  void bias_gelu(const Tensor& u, const Tensor& bias, bool approximate, const Tensor& y) override {
    OpScope s("bias_gelu", {&u, &bias, &y}, double(y.numel()));
    inner_.bias_gelu(u, bias, approximate, y);
  }
  void bias_gelu_backward(const Tensor& dy, const Tensor& u, const Tensor& bias, bool approximate,
                          const Tensor& du, const Tensor& dbias) override {
    OpScope s("bias_gelu_backward", {&dy, &u, &bias, &du, &dbias}, double(du.numel()));
    inner_.bias_gelu_backward(dy, u, bias, approximate, du, dbias);
  }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& y, const Tensor& mean, const Tensor& rstd) override {
    OpScope s("layer_norm", {&x, &weight, &bias, &y, &mean, &rstd});
    inner_.layer_norm(x, weight, bias, eps, y, mean, rstd);
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias) override {
    OpScope s("layer_norm_backward", {&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias});
    inner_.layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                const Tensor& rstd) override {
    OpScope s("rms_norm", {&x, &weight, &y, &rstd});
    inner_.rms_norm(x, weight, eps, y, rstd);
  }
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight) override {
    OpScope s("rms_norm_backward", {&dy, &x, &weight, &rstd, &dx, &dweight});
    inner_.rms_norm_backward(dy, x, weight, rstd, dx, dweight);
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     const Tensor& loss, const Tensor& lse) override {
    OpScope s("cross_entropy", {&logits, &targets, &loss, &lse});
    inner_.cross_entropy(logits, targets, ignore_index, loss, lse);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dloss, int64_t ignore_index,
                              const Tensor& dlogits) override {
    OpScope s("cross_entropy_backward", {&logits, &targets, &lse, &dloss, &dlogits});
    inner_.cross_entropy_backward(logits, targets, lse, dloss, ignore_index, dlogits);
  }
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
            bool inverse) override {
    OpScope s(inverse ? "rope_backward" : "rope", {&x, &cos, &sin, &out});
    inner_.rope(x, cos, sin, out, inverse);
  }
  void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override {
    OpScope s("index_select", {&index, &out});
    inner_.index_select(x, dim, index, out);
  }
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override {
    OpScope s("index_add", {&index, &src});
    inner_.index_add(out, dim, index, src);
  }
  void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override {
    OpScope s("gather", {&index, &out});
    inner_.gather(x, dim, index, out);
  }
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override {
    OpScope s("scatter_add", {&index, &src});
    inner_.scatter_add(out, dim, index, src);
  }
  void random_uniform(const Tensor& out, double low, double high, uint64_t seed,
                      uint64_t offset) override {
    OpScope s("random_uniform", {&out});
    inner_.random_uniform(out, low, high, seed, offset);
  }
  void random_normal(const Tensor& out, double mean, double std, uint64_t seed,
                     uint64_t offset) override {
    OpScope s("random_normal", {&out});
    inner_.random_normal(out, mean, std, seed, offset);
  }
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWStep& hp) override {
    // Reads all four, writes three.
    OpScope s("adamw_step", {&param, &grad, &exp_avg, &exp_avg_sq, &param, &exp_avg, &exp_avg_sq});
    inner_.adamw_step(param, grad, exp_avg, exp_avg_sq, hp);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                 const Tensor& out, const Tensor& lse) override {
    OpScope s("attention", {&q, &k, &v, &out, &lse}, attention_flops(q, k, causal));
    inner_.attention(q, k, v, causal, scale, out, lse);
  }
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, bool causal, double scale,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv) override {
    // Five products of the forward's size (scores again, dv, dp, dq, dk).
    OpScope s("attention_backward", {&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv},
              2.5 * attention_flops(q, k, causal));
    inner_.attention_backward(dout, q, k, v, out, lse, causal, scale, dq, dk, dv);
  }

 private:
  // q (B, H, T, D) k (B, Hkv, S, D): two products of 2 T S D per head.
  static double attention_flops(const Tensor& q, const Tensor& k, bool causal) {
    const double per_head = 4.0 * double(q.size(2)) * double(k.size(2)) * double(q.size(3));
    return double(q.size(0)) * double(q.size(1)) * per_head * (causal ? 0.5 : 1.0);
  }

  Backend& inner_;
};

}  // namespace

Backend& profiled_backend(Backend& inner) {
  thread_local Backend* last_inner = nullptr;
  thread_local ProfiledBackend* last = nullptr;
  if (&inner == last_inner) return *last;
  static std::mutex mu;
  static auto* made = new std::vector<std::unique_ptr<ProfiledBackend>>;  // never freed
  std::lock_guard<std::mutex> lock(mu);
  ProfiledBackend* found = nullptr;
  for (const auto& p : *made)
    if (&p->inner() == &inner) found = p.get();
  if (!found) {
    made->push_back(std::make_unique<ProfiledBackend>(inner));
    found = made->back().get();
  }
  last_inner = &inner;
  last = found;
  return *found;
}

}  // namespace spmd
