// DistributedDataParallel: the wrapper around the reducer. Construction is
// where data parallelism is set up (same parameters everywhere, then rank
// 0's values everywhere); forward arms the reducer; no_sync disarms it.
#include "parallel/ddp.h"

#include <algorithm>
#include <sstream>

#include "autograd/grad_mode.h"
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

// One line per tensor: "<kind> <name>\t<shape> <dtype>".
std::vector<std::string> describe(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : tensors)
    lines.push_back(str_cat(name, "\t", t.shape(), " ", dtype_name(t.dtype())));
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// "parameter 'fc.weight' with shape [4, 3] f32", from a line of describe()
// whose name is "parameter fc.weight" (a kind, a space, the dotted name).
std::string entry_text(const std::string& line) {
  const size_t tab = line.find('\t');
  const std::string name = line.substr(0, tab);
  const size_t space = name.find(' ');
  const std::string quoted = space == std::string::npos
                                 ? "'" + name + "'"
                                 : name.substr(0, space) + " '" + name.substr(space + 1) + "'";
  return str_cat(quoted, " with shape ", line.substr(tab + 1));
}

// Every rank's text, gathered to every rank (characters travel as i32).
std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  Tensor length = ops::full({1}, double(mine.size()), {DType::kI64});
  Tensor lengths = ops::empty({n}, {DType::kI64});
  group.all_gather(lengths, length).wait();
  const std::vector<int64_t> sizes = ops::to_vector<int64_t>(lengths);
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<int32_t> chars(size_t(longest), 0);
  std::copy(mine.begin(), mine.end(), chars.begin());
  Tensor all = ops::empty({n * longest}, {DType::kI32});
  group.all_gather(all, ops::from_vector(chars, {longest})).wait();
  const std::vector<int32_t> flat = ops::to_vector<int32_t>(all);
  std::vector<std::string> texts;
  for (int r = 0; r < n; ++r) {
    const auto begin = flat.begin() + r * longest;
    texts.emplace_back(begin, begin + sizes[size_t(r)]);
  }
  return texts;
}

// Where rank r's list first differs from rank 0's, in words ("" if nowhere).
std::string first_difference(const std::vector<std::string>& root,
                             const std::vector<std::string>& other, int r) {
  for (size_t i = 0; i < std::min(root.size(), other.size()); ++i) {
    if (root[i] == other[i]) continue;
    const std::string name = root[i].substr(0, root[i].find('\t'));
    if (name == other[i].substr(0, other[i].find('\t'))) {  // same name, other shape or dtype
      return str_cat(entry_text(root[i]), " on rank 0 but ",
                     other[i].substr(other[i].find('\t') + 1), " on rank ", r);
    }
    return str_cat("entry ", i, " is ", entry_text(root[i]), " on rank 0 but ",
                   entry_text(other[i]), " on rank ", r);
  }
  if (root.size() == other.size()) return "";
  const bool root_longer = root.size() > other.size();
  return str_cat("rank 0 has ", root.size(), " entries and rank ", r, " has ", other.size(),
                 "; the first extra one is ",
                 entry_text(root_longer ? root[other.size()] : other[root.size()]), " on rank ",
                 root_longer ? 0 : r);
}

}  // namespace

void verify_same_parameters(ProcessGroup& group,
                            const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const std::vector<std::string> texts = all_gather_strings(group, join_lines(describe(tensors)));
  const std::vector<std::string> root = split_lines(texts[0]);
  for (int r = 1; r < group.size(); ++r) {
    const std::string diff = first_difference(root, split_lines(texts[size_t(r)]), r);
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
  std::vector<std::pair<std::string, Tensor>> state;
  for (auto& [name, p] : module_->named_parameters()) state.emplace_back("parameter " + name, p);
  for (auto& [name, b] : module_->named_buffers()) state.emplace_back("buffer " + name, b);
  verify_same_parameters(*group_, state);
  // 2. Rank 0's values everywhere: the copies start equal.
  std::vector<Tensor> tensors;
  for (auto& entry : state) tensors.push_back(entry.second);
  {
    NoGradGuard no_grad;
    broadcast_tensors(*group_, tensors, 0);
  }
  // 3. The reducer and its hooks.
  reducer_ =
      std::make_shared<Reducer>(trainable(*module_), group_,
                                ReducerOptions{options.bucket_cap_mb, options.first_bucket_cap_mb,
                                               options.find_unused_parameters});
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
