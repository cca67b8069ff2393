// fully_shard: taking a module's parameters over, then the hooks of one step
// in the order they fire (fully_shard.h draws the life of a unit).
#include "parallel/fsdp/fully_shard.h"

#include <map>
#include <mutex>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "runtime/trace.h"

namespace spmd::dist {
namespace {

// Which modules are units: how a root finds the units below it, and how
// fully_shard refuses a module twice. Entries leave with their unit.
std::mutex g_registry_mu;
std::map<const nn::Module*, std::weak_ptr<FsdpModule>>& registry() {
  static auto* r = new std::map<const nn::Module*, std::weak_ptr<FsdpModule>>();
  return *r;
}

std::shared_ptr<FsdpModule> lookup(const nn::Module* m) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = registry().find(m);
  return it == registry().end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<FsdpModule>> all_units() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::vector<std::shared_ptr<FsdpModule>> out;
  for (auto& [m, weak] : registry())
    if (auto u = weak.lock()) out.push_back(u);
  return out;
}

bool starts_with_path(const std::string& name, const std::string& path) {
  return name.size() > path.size() && name.compare(0, path.size(), path) == 0 &&
         name[path.size()] == '.';
}

// The mesh axes to shard and replicate along, checked.
void resolve_axes(const DeviceMesh& mesh, FsdpOptions& o) {
  if (o.shard_axis.empty()) {
    SPMD_CHECK(mesh.ndim() <= 2, "fully_shard: a mesh of ", mesh.ndim(), " axes (",
               mesh.describe(), "): name the shard axis (FsdpOptions::shard_axis)");
    // FSDP2's convention: a 1-D mesh shards; a 2-D one is (replicate, shard).
    o.shard_axis = mesh.axis_names().back();
    if (mesh.ndim() == 2 && o.replicate_axis.empty()) o.replicate_axis = mesh.axis_names()[0];
  }
  for (const std::string* axis : {&o.shard_axis, &o.replicate_axis}) {
    if (axis->empty()) continue;
    SPMD_CHECK(mesh.has_axis(*axis), "fully_shard: the mesh (", mesh.describe(),
               ") has no axis '", *axis, "'");
  }
  SPMD_CHECK(o.shard_axis != o.replicate_axis, "fully_shard: axis '", o.shard_axis,
             "' cannot both shard and replicate");
}

}  // namespace

// The identity on a unit's output whose backward runs the unit's
// pre-backward: its gradient arriving means the unit's backward is next.
struct PreBackward : autograd::Function<PreBackward> {
  static constexpr const char* kName = "fsdp_pre_backward";
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, FsdpModule* unit) {
    ctx.set("unit", unit);
    return x;
  }
  static autograd::TensorList backward(autograd::FunctionCtx& ctx,
                                       const autograd::TensorList& grads) {
    ctx.get<FsdpModule*>("unit")->pre_backward();
    return {grads[0]};
  }
};

// --- Taking the parameters over -------------------------------------------------------------

FsdpModule::FsdpModule(nn::Module& module, const DeviceMesh& mesh, FsdpOptions options)
    : module_(&module), options_(std::move(options)), name_(module.type_name()) {
  // The unit's own parameters: all of them, less those of units below it.
  std::vector<std::string> below;
  for (auto& [path, m] : module.named_modules()) {
    if (m != &module && lookup(m) != nullptr) below.push_back(path);
  }
  auto ignored = [this](const Tensor& t) {
    for (const Tensor& i : options_.ignored_params)
      if (i.is_same(t)) return true;
    return false;
  };
  std::vector<std::pair<std::string, Tensor*>> slots;
  for (auto& [name, t] : module.named_parameters()) {
    bool theirs = ignored(t);
    for (const std::string& path : below) theirs = theirs || starts_with_path(name, path);
    if (theirs) continue;
    for (const auto& other : all_units()) {
      for (const ParamGroup::Param& p : other->params().params()) {
        SPMD_CHECK(!p.shard.is_same(t) && p.origin.lock() != t.storage(), "fully_shard(",
                   name_, "): parameter ", name, " is also held by another unit (as its ", p.name,
                   "): a parameter shared between units; put both of its users in one unit");
      }
    }
    slots.emplace_back(name, &module.parameter_slot(name));
  }
  group_ = std::make_unique<ParamGroup>(std::move(slots), mesh, options_.shard_axis,
                                        options_.replicate_axis, options_.mixed_precision, name_);
  // A tensor registered under two names would still show its whole self.
  for (auto& [name, t] : module.named_parameters()) {
    bool ours_or_below = ignored(t);
    for (const std::string& path : below) ours_or_below = ours_or_below || starts_with_path(name, path);
    for (const ParamGroup::Param& p : group_->params()) ours_or_below = ours_or_below || p.shard.is_same(t);
    SPMD_CHECK(ours_or_below, "fully_shard(", name_, "): parameter ", name,
               " is registered under a second name in the unit; tie it once");
  }
  // A parameter's gradient is in: the last one in ends the unit's backward.
  for (const ParamGroup::Param& p : group_->params()) {
    if (!p.full.requires_grad()) continue;
    ++grads_expected_;
    register_post_accumulate_grad_hook(p.full, [this](const Tensor&) {
      if (in_backward_ && !reduced_ && ++grads_seen_ == grads_expected_) post_backward();
    });
  }
}

FsdpModule::~FsdpModule() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = registry().find(module_);
  if (it != registry().end() && it->second.expired()) registry().erase(it);
}

std::shared_ptr<FsdpModule> fully_shard(const std::shared_ptr<nn::Module>& module,
                                        const DeviceMesh& mesh, FsdpOptions options) {
  SPMD_CHECK(module != nullptr, "fully_shard: no module");
  SPMD_CHECK(lookup(module.get()) == nullptr, "fully_shard: this ", module->type_name(),
             " was already passed to fully_shard");
  resolve_axes(mesh, options);
  auto unit = std::make_shared<FsdpModule>(*module, mesh, std::move(options));
  // The hooks own the unit; the unit only points at the module.
  unit->hooks_[0] = module->register_forward_pre_hook(
      [unit](nn::Module&, Tensor&) { unit->pre_forward(); });
  unit->hooks_[1] = module->register_forward_hook(
      [unit](nn::Module&, const Tensor&, Tensor& out) { unit->post_forward(out); });
  std::lock_guard<std::mutex> lock(g_registry_mu);
  registry()[module.get()] = unit;
  return unit;
}

std::shared_ptr<FsdpModule> fsdp_unit_of(const nn::Module& module) { return lookup(&module); }

// The first unit to run forward is a root: it takes the units below it (a
// unit that ran alone before, as a root of its own, joins too).
void FsdpModule::lazy_init_as_root() {
  root_ = this;
  name_ = "root";
  group_->set_name(name_);
  units_ = {this};
  for (auto& [path, m] : module_->named_modules()) {
    if (m == module_) continue;
    std::shared_ptr<FsdpModule> u = lookup(m);
    if (u == nullptr || (u->root_ != nullptr && u->root_ != u.get())) continue;
    u->root_ = this;
    u->name_ = path;
    u->group_->set_name(path);
    u->units_.clear();
    u->index_ = int(units_.size());
    units_.push_back(u.get());
  }
}

FsdpModule* FsdpModule::neighbour(int step) const {
  const int i = index_ + step;
  return i >= 0 && i < int(root_->units_.size()) ? root_->units_[i] : nullptr;
}

// --- Forward --------------------------------------------------------------------------------

void FsdpModule::pre_forward() {
  if (root_ == nullptr) lazy_init_as_root();
  if (autograd::backward_running()) {  // recomputation during backward: gathered already
    group_->finish_gather();
    return;
  }
  if (is_root()) {  // a step begins
    if (callback_queued_) {  // the last backward threw before its end: start clean
      if (pending_reduce_ != nullptr) pending_reduce_->group_->finish_reduce();
      pending_reduce_ = nullptr;
      callback_queued_ = false;
    }
    for (FsdpModule* u : units_) {
      u->group_->gather_times().clear();
      u->group_->reduce_times().clear();
    }
  }
  group_->finish_gather();
  note_memory();
  if (options_.prefetch) {
    if (FsdpModule* next = neighbour(+1)) next->group_->start_gather();
  }
  forward_start_us_ = trace_now_us();
}

void FsdpModule::post_forward(Tensor& output) {
  if (autograd::backward_running()) return;
  forward_end_us_ = trace_now_us();
  if (trace_enabled())
    trace_record("fsdp forward " + name_, "compute", forward_start_us_,
                 forward_end_us_ - forward_start_us_);
  const bool backward_follows = autograd::grad_mode_enabled() && output.requires_grad();
  if (!backward_follows || (!is_root() && options_.reshard_after_forward)) group_->reshard();
  if (backward_follows) output = PreBackward::apply(output, this);
}

// --- Backward -------------------------------------------------------------------------------

void FsdpModule::pre_backward() {
  FsdpModule* root = root_;
  if (!root->callback_queued_) {
    root->callback_queued_ = true;
    autograd::queue_callback([root] { root->end_of_backward(); });
  }
  in_backward_ = true;
  reduced_ = false;
  grads_seen_ = 0;
  group_->finish_gather();
  note_memory();
  if (options_.prefetch) {
    // Backward runs the units in reverse: the root's turn comes last, but it
    // is gathered already; after the root comes the last unit.
    FsdpModule* prev = is_root() ? (units_.size() > 1 ? units_.back() : nullptr) : neighbour(-1);
    if (prev != nullptr) prev->group_->start_gather();
  }
}

void FsdpModule::post_backward() {
  note_memory();  // the unit's full parameters and gradients, both alive now
  reduced_ = true;
  if (reshard_after_backward_) group_->reshard();  // the parameters are done with, not the grads
  if (!sync_gradients_) return;
  FsdpModule* root = root_;
  if (root->pending_reduce_ != nullptr) root->pending_reduce_->group_->finish_reduce();
  group_->start_reduce();
  root->pending_reduce_ = this;
  note_memory();
}

void FsdpModule::end_of_backward() {
  // Units whose every gradient did not arrive (a parameter unused this step)
  // reduce what they have, in reverse order, the same on every rank.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    if ((*it)->in_backward_ && !(*it)->reduced_) (*it)->post_backward();
  }
  if (pending_reduce_ != nullptr) pending_reduce_->group_->finish_reduce();
  pending_reduce_ = nullptr;
  for (FsdpModule* u : units_) {
    u->in_backward_ = false;
    if (u->reshard_after_backward_) u->group_->reshard();
  }
  callback_queued_ = false;
}

// --- Controls and what they measured ----------------------------------------------------------

void FsdpModule::unshard() { group_->finish_gather(); }
void FsdpModule::reshard() { group_->reshard(); }

void FsdpModule::set_requires_gradient_sync(bool sync, bool recurse) {
  sync_gradients_ = sync;
  if (recurse) {
    for (const auto& u : units_below()) u->sync_gradients_ = sync;
  }
}

void FsdpModule::set_reshard_after_forward(bool reshard) { options_.reshard_after_forward = reshard; }

void FsdpModule::set_reshard_after_backward(bool reshard, bool recurse) {
  reshard_after_backward_ = reshard;
  if (recurse) {
    for (const auto& u : units_below()) u->reshard_after_backward_ = reshard;
  }
}

void FsdpModule::reduce_gradients() { reduce_gradients(std::vector<FsdpModule*>{this}); }

void FsdpModule::reduce_gradients(const std::vector<FsdpModule*>& units) {
  for (const auto& u : units) {
    SPMD_CHECK(!autograd::backward_running(), "fsdp ", u->name_,
               ": reduce_gradients during a backward; call it after the backwards");
    u->group_->start_reduce();
  }
  for (const auto& u : units) {
    u->group_->finish_reduce();
    u->group_->reshard();
    u->note_memory();
  }
}

void FsdpModule::set_prefetch(bool prefetch) { options_.prefetch = prefetch; }

std::vector<std::shared_ptr<FsdpModule>> FsdpModule::units_below() const {
  std::vector<std::shared_ptr<FsdpModule>> below;
  for (auto& [path, m] : module_->named_modules()) {
    if (m == module_) continue;
    if (auto u = lookup(m)) below.push_back(std::move(u));
  }
  return below;
}

void FsdpModule::note_memory() {
  FsdpModule* root = root_ != nullptr ? root_ : this;
  size_t bytes = 0;
  for (FsdpModule* u : root->units_) bytes += u->group_->unsharded_bytes();
  root->peak_unsharded_ = std::max(root->peak_unsharded_, bytes);
}

std::vector<FsdpUnitTimes> FsdpModule::timeline() const {
  std::vector<FsdpUnitTimes> out;
  for (FsdpModule* u : units_) {
    out.push_back({u->name_, u->group_->gather_times(), u->group_->reduce_times(),
                   u->forward_start_us_, u->forward_end_us_});
  }
  return out;
}

}  // namespace spmd::dist
