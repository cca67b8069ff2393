// Differentiable collectives: the raw moves along a dim first (gather_along,
// reduce_scatter_along, chunk_of, exchange_along), then one autograd
// Function per pair of the table in functional.h, each backward the other's
// forward; send and recv last.
#include "parallel/functional.h"

#include "autograd/function.h"
#include "autograd/variable.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

using autograd::FunctionCtx;
using autograd::TensorList;

int wrap_dim(const Tensor& x, int dim, const char* op) {
  const int n = x.ndim();
  SPMD_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor of shape ",
             x.shape());
  return dim < 0 ? dim + n : dim;
}

void check_divisible(const Tensor& x, int dim, const ProcessGroup& g, const char* op) {
  SPMD_CHECK(x.size(dim) % g.size() == 0, op, ": dim ", dim, " of shape ", x.shape(), " (",
             x.size(dim), ") does not divide by the ", g.size(), " ranks of group ", g.name());
}

// --- Raw moves along a dim ---------------------------------------------------------------

// Every rank's x, concatenated along dim in rank order.
Tensor gather_along(const Tensor& x, int dim, ProcessGroup& g) {
  if (g.size() == 1) return ops::clone(x);
  std::vector<int64_t> dims{g.size()};
  for (int64_t s : x.shape()) dims.push_back(s);
  Tensor stacked = ops::empty(Shape(dims), {x.dtype(), x.device()});  // (n, ...x)
  g.wait(g.all_gather(stacked, ops::contiguous(x)), OpType::kAllGather);
  if (dim == 0) {  // (n, s0, ...) is already (n s0, ...) in memory
    dims.erase(dims.begin());
    dims[0] *= g.size();
    return ops::view(stacked, Shape(dims));
  }
  std::vector<Tensor> parts;  // another dim: one copy puts the pieces side by side
  for (int r = 0; r < g.size(); ++r) parts.push_back(ops::select(stacked, 0, r));
  return ops::cat(parts, dim);
}

// The sum over ranks of x, this rank's chunk along dim.
Tensor reduce_scatter_along(const Tensor& x, int dim, ProcessGroup& g) {
  if (g.size() == 1) return ops::clone(x);
  // The chunks along dim, one after another in memory: (n, chunk...). Along
  // dim 0 a contiguous x already is; along another dim it takes a copy.
  const Tensor chunks = dim == 0 ? ops::contiguous(x) : ops::stack(ops::chunk(x, g.size(), dim), 0);
  std::vector<int64_t> d(x.shape().begin(), x.shape().end());
  d[dim] /= g.size();
  Tensor out = ops::empty(Shape(d), {x.dtype(), x.device()});
  g.wait(g.reduce_scatter(out, chunks), OpType::kReduceScatter);
  return out;
}

// This rank's chunk of x along dim (a copy).
Tensor chunk_of(const Tensor& x, int dim, const ProcessGroup& g) {
  const int64_t len = x.size(dim) / g.size();
  return ops::contiguous(ops::narrow(x, dim, g.rank() * len, len));
}

// Chunk j of x along split_dim to rank j; the received chunks concatenated
// along concat_dim.
Tensor exchange_along(const Tensor& x, int split_dim, int concat_dim, ProcessGroup& g) {
  if (g.size() == 1) return ops::clone(x);
  const Tensor send = ops::stack(ops::chunk(x, g.size(), split_dim), 0);  // (n, chunk...)
  Tensor recv = ops::empty(send.shape(), {x.dtype(), x.device()});
  g.wait(g.all_to_all(recv, send), OpType::kAllToAll);
  std::vector<Tensor> parts;
  for (int r = 0; r < g.size(); ++r) parts.push_back(ops::select(recv, 0, r));
  return ops::cat(parts, concat_dim);
}

Tensor summed(const Tensor& x, ProcessGroup& g) {
  Tensor out = ops::contiguous(x);
  if (out.is_same(x)) out = ops::clone(x);  // never write into the caller's tensor
  if (g.size() > 1) g.wait(g.all_reduce(out), OpType::kAllReduce);
  return out;
}

// --- The Functions --------------------------------------------------------------------------

struct CopyToGroup : autograd::Function<CopyToGroup> {
  static constexpr const char* kName = "copy_to_group";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, ProcessGroup* g) {
    ctx.set("group", g);
    return x;
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {summed(grads[0], *ctx.get<ProcessGroup*>("group"))};
  }
};

struct ReduceFromGroup : autograd::Function<ReduceFromGroup> {
  static constexpr const char* kName = "reduce_from_group";
  static Tensor forward(FunctionCtx&, const Tensor& x, ProcessGroup* g) { return summed(x, *g); }
  static TensorList backward(FunctionCtx&, const TensorList& grads) { return {grads[0]}; }
};

// all_gather and reduce_scatter along a dim: each the other's backward.
struct AllGather : autograd::Function<AllGather> {
  static constexpr const char* kName = "all_gather";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int dim, ProcessGroup* g) {
    ctx.set("dim", dim);
    ctx.set("group", g);
    return gather_along(x, dim, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {reduce_scatter_along(grads[0], ctx.get<int>("dim"), *ctx.get<ProcessGroup*>("group"))};
  }
};

struct ReduceScatter : autograd::Function<ReduceScatter> {
  static constexpr const char* kName = "reduce_scatter";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int dim, ProcessGroup* g) {
    ctx.set("dim", dim);
    ctx.set("group", g);
    return reduce_scatter_along(x, dim, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {gather_along(grads[0], ctx.get<int>("dim"), *ctx.get<ProcessGroup*>("group"))};
  }
};

// Split and gather of a tensor whose gradient is the same on every rank.
struct ScatterToGroup : autograd::Function<ScatterToGroup> {
  static constexpr const char* kName = "scatter_to_group";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int dim, ProcessGroup* g) {
    ctx.set("dim", dim);
    ctx.set("group", g);
    return chunk_of(x, dim, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {gather_along(grads[0], ctx.get<int>("dim"), *ctx.get<ProcessGroup*>("group"))};
  }
};

struct GatherFromGroup : autograd::Function<GatherFromGroup> {
  static constexpr const char* kName = "gather_from_group";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int dim, ProcessGroup* g) {
    ctx.set("dim", dim);
    ctx.set("group", g);
    return gather_along(x, dim, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {chunk_of(grads[0], ctx.get<int>("dim"), *ctx.get<ProcessGroup*>("group"))};
  }
};

struct AllToAll : autograd::Function<AllToAll> {
  static constexpr const char* kName = "all_to_all";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int split_dim, int concat_dim,
                        ProcessGroup* g) {
    ctx.set("split_dim", split_dim);
    ctx.set("concat_dim", concat_dim);
    ctx.set("group", g);
    return exchange_along(x, split_dim, concat_dim, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {exchange_along(grads[0], ctx.get<int>("concat_dim"), ctx.get<int>("split_dim"),
                           *ctx.get<ProcessGroup*>("group"))};
  }
};

// Rows to each rank as the split sizes say; the backward returns them.
Tensor exchange_rows(const Tensor& x, const std::vector<int64_t>& out_sizes,
                     const std::vector<int64_t>& in_sizes, ProcessGroup& g) {
  int64_t rows = 0;
  for (int64_t s : out_sizes) rows += s;
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
  shape[0] = rows;
  Tensor out = ops::empty(Shape(shape), {x.dtype(), x.device()});
  g.wait(g.all_to_all(out, ops::contiguous(x), out_sizes, in_sizes), OpType::kAllToAll);
  return out;
}

struct AllToAllSingle : autograd::Function<AllToAllSingle> {
  static constexpr const char* kName = "all_to_all_single";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const std::vector<int64_t>& out_sizes,
                        const std::vector<int64_t>& in_sizes, ProcessGroup* g) {
    ctx.set("out_sizes", out_sizes);
    ctx.set("in_sizes", in_sizes);
    ctx.set("group", g);
    return exchange_rows(x, out_sizes, in_sizes, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {exchange_rows(grads[0], ctx.get<std::vector<int64_t>>("in_sizes"),
                          ctx.get<std::vector<int64_t>>("out_sizes"),
                          *ctx.get<ProcessGroup*>("group"))};
  }
};

// The backward of a send is a receive of the gradient.
struct Send : autograd::Function<Send> {
  static constexpr const char* kName = "send";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, int dst, int tag, ProcessGroup* g) {
    g->wait(g->send(ops::contiguous(x), dst, tag), OpType::kSend);
    ctx.set("shape", x.shape());
    ctx.set("dtype", x.dtype());
    ctx.set("device", x.device());
    ctx.set("dst", dst);
    ctx.set("tag", tag);
    ctx.set("group", g);
    return ops::zeros({1}, {x.dtype(), x.device()});  // the token
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList&) {
    ProcessGroup& g = *ctx.get<ProcessGroup*>("group");
    Tensor grad =
        ops::empty(ctx.get<Shape>("shape"), {ctx.get<DType>("dtype"), ctx.get<Device>("device")});
    g.wait(g.recv(grad, ctx.get<int>("dst"), ctx.get<int>("tag")), OpType::kRecv);
    return {grad};
  }
};

}  // namespace

Tensor send(const Tensor& x, int dst, ProcessGroup& group, int tag) {
  SPMD_CHECK(x.defined(), "send: the tensor is undefined");
  return Send::apply(x, dst, tag, &group);
}

Tensor recv(const Shape& shape, DType dtype, Device device, int src, ProcessGroup& group, int tag) {
  Tensor x = ops::empty(shape, {dtype, device});
  group.wait(group.recv(x, src, tag), OpType::kRecv);
  x.requires_grad_();
  // The backward of a receive is a send of the gradient, back to src.
  register_hook(x, [&group, src, tag](const Tensor& grad) {
    group.wait(group.send(ops::contiguous(grad), src, tag), OpType::kSend);
    return Tensor();  // keep the gradient as it is
  });
  return x;
}

Tensor copy_to_group(const Tensor& x, ProcessGroup& group) { return CopyToGroup::apply(x, &group); }

Tensor reduce_from_group(const Tensor& x, ProcessGroup& group) {
  return ReduceFromGroup::apply(x, &group);
}

Tensor all_gather(const Tensor& x, int dim, ProcessGroup& group) {
  dim = wrap_dim(x, dim, "all_gather");
  return AllGather::apply(x, dim, &group);
}

Tensor reduce_scatter(const Tensor& x, int dim, ProcessGroup& group) {
  dim = wrap_dim(x, dim, "reduce_scatter");
  check_divisible(x, dim, group, "reduce_scatter");
  return ReduceScatter::apply(x, dim, &group);
}

Tensor scatter_to_group(const Tensor& x, int dim, ProcessGroup& group) {
  dim = wrap_dim(x, dim, "scatter_to_group");
  check_divisible(x, dim, group, "scatter_to_group");
  return ScatterToGroup::apply(x, dim, &group);
}

Tensor gather_from_group(const Tensor& x, int dim, ProcessGroup& group) {
  dim = wrap_dim(x, dim, "gather_from_group");
  return GatherFromGroup::apply(x, dim, &group);
}

Tensor all_to_all(const Tensor& x, int split_dim, int concat_dim, ProcessGroup& group) {
  split_dim = wrap_dim(x, split_dim, "all_to_all");
  concat_dim = wrap_dim(x, concat_dim, "all_to_all");
  check_divisible(x, split_dim, group, "all_to_all");
  return AllToAll::apply(x, split_dim, concat_dim, &group);
}

Tensor all_to_all_single(const Tensor& x, const std::vector<int64_t>& output_split_sizes,
                         const std::vector<int64_t>& input_split_sizes, ProcessGroup& group) {
  SPMD_CHECK(x.defined() && x.ndim() >= 1, "all_to_all_single: expected a tensor with a dim 0");
  SPMD_CHECK(int(output_split_sizes.size()) == group.size() &&
                 int(input_split_sizes.size()) == group.size(),
             "all_to_all_single: ", output_split_sizes.size(), " output and ",
             input_split_sizes.size(), " input split sizes for the ", group.size(),
             " ranks of group ", group.name());
  return AllToAllSingle::apply(x, output_split_sizes, input_split_sizes, &group);
}

}  // namespace spmd::dist
