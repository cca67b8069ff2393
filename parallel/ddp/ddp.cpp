// DistributedDataParallel: the wrapper around the reducer. Construction is
// where data parallelism is set up (same parameters everywhere, then rank
// 0's values everywhere); forward arms the reducer; no_sync disarms it.
#include "parallel/ddp/ddp.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "parallel/comm/object_collectives.h"
#include "runtime/error.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

// The trainable parameters, with their names in the module.
std::vector<std::pair<std::string, Tensor>> trainable(const nn::Module& module) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

// What every rank must agree on about one parameter or buffer, as a record
// the ranks exchange (parallel/comm/object_collectives.h).
struct TensorRecord {
  std::string kind;  // "parameter" or "buffer"
  std::string name;  // dotted, in the module
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;

  void encode(RecordWriter& w) const {
    w.str(kind);
    w.str(name);
    w.i64s(shape);
    w.u8(uint8_t(dtype));
  }
  static TensorRecord decode(RecordReader& r) {
    TensorRecord t{r.str(), r.str(), r.i64s()};
    t.dtype = DType(r.u8());
    return t;
  }
  bool operator==(const TensorRecord&) const = default;
  std::string layout() const { return str_cat(Shape(shape), " ", dtype_name(dtype)); }
  // "parameter 'fc.weight' with shape [4, 3] f32"
  std::string text() const { return str_cat(kind, " '", name, "' with shape ", layout()); }
};

// One rank's whole model: its parameters, then its buffers.
struct ModelRecord {
  std::vector<TensorRecord> tensors;
  void encode(RecordWriter& w) const { w.list(tensors); }
  static ModelRecord decode(RecordReader& r) { return {r.list<TensorRecord>()}; }
};

ModelRecord describe(const nn::Module& module) {
  ModelRecord m;
  for (auto& [name, p] : module.named_parameters())
    m.tensors.push_back({"parameter", name, p.shape().to_vector(), p.dtype()});
  for (auto& [name, b] : module.named_buffers())
    m.tensors.push_back({"buffer", name, b.shape().to_vector(), b.dtype()});
  return m;
}

// Where rank r's list first differs from rank 0's, in words ("" if nowhere).
std::string first_difference(const std::vector<TensorRecord>& root,
                             const std::vector<TensorRecord>& other, int r) {
  for (size_t i = 0; i < std::min(root.size(), other.size()); ++i) {
    if (root[i] == other[i]) continue;
    if (root[i].kind == other[i].kind && root[i].name == other[i].name)  // other shape or dtype
      return str_cat(root[i].text(), " on rank 0 but ", other[i].layout(), " on rank ", r);
    return str_cat("entry ", i, " is ", root[i].text(), " on rank 0 but ", other[i].text(),
                   " on rank ", r);
  }
  if (root.size() == other.size()) return "";
  const bool root_longer = root.size() > other.size();
  return str_cat("rank 0 has ", root.size(), " entries and rank ", r, " has ", other.size(),
                 "; the first extra one is ",
                 (root_longer ? root[other.size()] : other[root.size()]).text(), " on rank ",
                 root_longer ? 0 : r);
}

}  // namespace

void verify_same_parameters(ProcessGroup& group, const nn::Module& module) {
  const std::vector<ModelRecord> all = all_gather_object(group, describe(module));
  for (int r = 1; r < group.size(); ++r) {
    const std::string diff = first_difference(all[0].tensors, all[size_t(r)].tensors, r);
    SPMD_CHECK(diff.empty(), "DistributedDataParallel: the ranks' models differ (", diff,
               "); every rank must build the same model, with the same parameters, shapes and "
               "dtypes, before wrapping it");
  }
}

void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  std::vector<Work> works;
  std::vector<std::pair<Tensor, Tensor>> staged;  // (tensor, the buffer that travels)
  for (const Tensor& t : tensors) {
    Tensor buffer = t;
    if (!is_comm_dtype(t.dtype())) buffer = ops::to(t, DType::kI32);  // bool, u8
    if (!buffer.is_contiguous()) buffer = ops::contiguous(buffer);
    works.push_back(group.broadcast(buffer, root));
    if (!buffer.is_same(t)) staged.emplace_back(t, buffer);
  }
  for (const Work& w : works) w.wait();
  for (auto& [t, buffer] : staged) ops::copy_(t, buffer);
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)) {
  SPMD_CHECK(module_ != nullptr && group_ != nullptr,
             "DistributedDataParallel: the module and the group must not be null");
  register_module("module", module_);
  // 1. The same model everywhere, checked before any value moves.
  verify_same_parameters(*group_, *module_);
  // 2. Rank 0's values everywhere: the copies start equal.
  std::vector<Tensor> tensors = module_->parameters();
  for (auto& [name, b] : module_->named_buffers()) tensors.push_back(b);
  {
    NoGradGuard no_grad;
    broadcast_tensors(*group_, tensors, 0);
  }
  // 3. The reducer and its hooks.
  reducer_ =
      std::make_shared<Reducer>(trainable(*module_), group_,
                                ReducerOptions{options.bucket_cap_mb, options.first_bucket_cap_mb,
                                               options.find_unused_parameters});
  reducer_->set_observer(timer_);
  reducer_->attach();
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  reducer_->prepare_for_backward(sync_ && autograd::grad_mode_enabled());
  return (*module_)(x);
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  SPMD_CHECK(hook != nullptr, "DistributedDataParallel::register_comm_hook: the hook is empty");
  reducer_->set_comm_hook(std::move(hook));
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  return reducer_->bucket_parameter_names();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.sync_) {
  ddp_.sync_ = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.sync_ = previous_; }

}  // namespace spmd::dist
