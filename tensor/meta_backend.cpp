// MetaBackend: every method of backend.h, doing nothing (meta_backend.h).
#include "tensor/meta_backend.h"

#include "tensor/meta_memory.h"

namespace spmd {
namespace {

class MetaBackend final : public Backend {
 public:
  // No bytes: a token that counts them (meta_memory.h).
  DataPtr allocate(size_t nbytes, Device) override { return meta_allocate(nbytes); }
  void copy(const Tensor& src, const Tensor& dst) override {
    if (dst.device().is_meta()) return;
    SPMD_CHECK(MetaReadsAsZeros::active(), "cannot copy a meta tensor (shape ", src.shape(),
               ") to ", dst.device(), ": it has no values until it is materialized ",
               "(tensor/deferred.h)");
    backend_for(dst.device()).fill(dst, 0);  // a dry run's stand-in (meta_memory.h)
  }

  void fill(const Tensor&, double) override {}
  void arange(const Tensor&, double, double) override {}
  void unary(UnaryOp, const Tensor&, const Tensor&) override {}
  void binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) override {}
  void binary_scalar(BinaryOp, const Tensor&, double, const Tensor&, bool) override {}
  void where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void masked_fill(const Tensor&, const Tensor&, double, const Tensor&) override {}
  void triangle(const Tensor&, int64_t, bool, const Tensor&) override {}
  void reduce(Reduction, const Tensor&, const Tensor&) override {}
  void arg_reduce(bool, const Tensor&, int, const Tensor&) override {}
  void matmul(const Tensor&, const Tensor&, const Tensor&, double, double) override {}
  void softmax(const Tensor&, const Tensor&, bool) override {}
  void softmax_backward(const Tensor&, const Tensor&, const Tensor&, bool) override {}
  void layer_norm(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                  const Tensor&) override {}
  void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void rms_norm(const Tensor&, const Tensor&, double, const Tensor&, const Tensor&) override {}
  void rms_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&) override {}
  void cross_entropy(const Tensor&, const Tensor&, int64_t, const Tensor&, const Tensor&) override {
  }
  void cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                              const Tensor&) override {}
  void rope(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool) override {}
  void index_select(const Tensor&, int, const Tensor&, const Tensor&) override {}
  void index_add(const Tensor&, int, const Tensor&, const Tensor&) override {}
  void gather(const Tensor&, int, const Tensor&, const Tensor&) override {}
  void scatter_add(const Tensor&, int, const Tensor&, const Tensor&) override {}
  void random_uniform(const Tensor&, double, double, uint64_t, uint64_t) override {}
  void random_normal(const Tensor&, double, double, uint64_t, uint64_t) override {}
  void adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const AdamWStep&) override {}
  void bias_gelu(const Tensor&, const Tensor&, bool, const Tensor&) override {}
  void bias_gelu_backward(const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&,
                          const Tensor&) override {}
  void attention(const Tensor&, const Tensor&, const Tensor&, bool, double, const Tensor&,
                 const Tensor&) override {}
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, bool, double, const Tensor&, const Tensor&,
                          const Tensor&) override {}
};

}  // namespace

Backend& meta_backend() {
  static MetaBackend backend;
  return backend;
}

}  // namespace spmd
