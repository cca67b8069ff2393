// DeviceMesh: the grid arithmetic first (pure functions), then the mesh,
// whose groups are the world's splits along that arithmetic (split_known:
// every rank works out its line's members itself, so no rank waits on the
// store for the others' colors).
#include "parallel/device_mesh.h"

#include <algorithm>
#include <set>

#include "runtime/error.h"

namespace spmd::dist {

// --- Grid arithmetic ---------------------------------------------------------------------

std::vector<int64_t> mesh_coordinate(const std::vector<int64_t>& shape, int64_t rank) {
  std::vector<int64_t> coord(shape.size());
  for (int i = int(shape.size()) - 1; i >= 0; --i) {  // the last axis varies fastest
    coord[i] = rank % shape[i];
    rank /= shape[i];
  }
  return coord;
}

namespace {

// The row-major rank of a coordinate.
int64_t linear_rank(const std::vector<int64_t>& shape, const std::vector<int64_t>& coord) {
  int64_t r = 0;
  for (size_t i = 0; i < shape.size(); ++i) r = r * shape[i] + coord[i];
  return r;
}

// Row-major index of `coord` restricted to the axes in (or not in) `axes`:
// the color (not in: which line) and the key (in: where along it) of split().
int64_t index_over(const std::vector<int64_t>& shape, const std::vector<int64_t>& coord,
                   const std::vector<int>& axes, bool in) {
  int64_t r = 0;
  for (int i = 0; i < int(shape.size()); ++i) {
    const bool listed = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (listed == in) r = r * shape[i] + coord[i];
  }
  return r;
}

}  // namespace

std::vector<int> mesh_line_ranks(const std::vector<int64_t>& shape, int64_t rank,
                                 const std::vector<int>& axes) {
  std::vector<int64_t> coord = mesh_coordinate(shape, rank);
  int64_t count = 1;
  for (int a : axes) count *= shape[a];
  std::vector<int> ranks;
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i;  // i, row-major over `axes`, written into their coordinates
    for (int k = int(axes.size()) - 1; k >= 0; --k) {
      coord[axes[k]] = rest % shape[axes[k]];
      rest /= shape[axes[k]];
    }
    ranks.push_back(int(linear_rank(shape, coord)));
  }
  return ranks;
}

void check_mesh_shape(const std::vector<int64_t>& shape, const std::vector<std::string>& names,
                      int world_size) {
  SPMD_CHECK(!shape.empty(), "DeviceMesh: the shape has no dims");
  SPMD_CHECK(shape.size() == names.size(), "DeviceMesh: ", shape.size(), " dims but ", names.size(),
             " axis names");
  int64_t product = 1;
  std::set<std::string> seen;
  for (size_t i = 0; i < shape.size(); ++i) {
    SPMD_CHECK(!names[i].empty(), "DeviceMesh: axis ", i, " has an empty name");
    SPMD_CHECK(seen.insert(names[i]).second, "DeviceMesh: the axis name \"", names[i],
               "\" is repeated");
    SPMD_CHECK(shape[i] >= 1, "DeviceMesh: axis \"", names[i], "\" has size ", shape[i],
               "; sizes must be at least 1");
    product *= shape[i];
  }
  if (product != world_size) {
    std::string dims;
    for (size_t i = 0; i < shape.size(); ++i)
      dims += str_cat(i ? " x " : "", names[i], ":", shape[i]);
    SPMD_THROW(InvalidArgument, "DeviceMesh: ", dims, " holds ", product,
               " ranks but the world has ", world_size);
  }
}

// --- The mesh --------------------------------------------------------------------------------

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<int64_t> shape,
                       std::vector<std::string> axis_names)
    : world_(std::move(world)), shape_(std::move(shape)), names_(std::move(axis_names)) {
  SPMD_CHECK(world_ != nullptr, "DeviceMesh: no world group");
  check_mesh_shape(shape_, names_, world_->size());
  coordinate_ = mesh_coordinate(shape_, world_->rank());
  // One split per axis, in the same order on every rank: the ranks on this
  // rank's line share a color (their coordinates off the axis), ordered by
  // their coordinate along it.
  for (int a = 0; a < ndim(); ++a) {
    const int color = int(index_over(shape_, coordinate_, {a}, /*in=*/false));
    groups_[names_[a]] = world_->split_known(color, mesh_line_ranks(shape_, world_->rank(), {a}));
  }
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> group, std::string name)
    : world_(group), shape_{group->size()}, names_{name}, coordinate_{group->rank()} {
  groups_[name] = std::move(group);
}

int DeviceMesh::axis_index(const std::string& axis) const {
  auto it = std::find(names_.begin(), names_.end(), axis);
  return it == names_.end() ? -1 : int(it - names_.begin());
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group_ptr(const std::string& axis) const {
  auto it = groups_.find(axis);
  if (it == groups_.end()) {
    std::string known;
    for (auto& [name, g] : groups_) known += (known.empty() ? "" : ", ") + name;
    SPMD_THROW(InvalidArgument, "DeviceMesh: no axis named \"", axis, "\" (axes: ", known, ")");
  }
  return it->second;
}

int64_t DeviceMesh::size() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

int64_t DeviceMesh::size(const std::string& axis) const { return group(axis).size(); }

int64_t DeviceMesh::coordinate(const std::string& axis) const {
  const int a = axis_index(axis);
  if (a >= 0) return coordinate_[a];
  return group(axis).rank();  // a flattened axis: the group is ordered row-major over its parts
}

DeviceMesh DeviceMesh::operator[](const std::string& axis) const {
  return DeviceMesh(group_ptr(axis), axis);
}

DeviceMesh DeviceMesh::flatten(const std::vector<std::string>& axes, const std::string& name) {
  SPMD_CHECK(!axes.empty(), "DeviceMesh::flatten: no axes to flatten into \"", name, "\"");
  std::vector<int> indices;
  for (const std::string& axis : axes) {
    const int a = axis_index(axis);
    SPMD_CHECK(a >= 0, "DeviceMesh::flatten: no axis named \"", axis, "\" in ", describe());
    SPMD_CHECK(std::find(indices.begin(), indices.end(), a) == indices.end(),
               "DeviceMesh::flatten: the axis \"", axis, "\" is listed twice");
    SPMD_CHECK(indices.empty() || a > indices.back(), "DeviceMesh::flatten: list the axes in the ",
               "mesh's order (outermost first); \"", axis, "\" comes too late");
    indices.push_back(a);
  }
  auto known = flattened_.find(name);
  if (known != flattened_.end()) {
    SPMD_CHECK(known->second == axes, "DeviceMesh::flatten: \"", name,
               "\" already names a flattening of other axes");
    return (*this)[name];
  }
  SPMD_CHECK(!groups_.count(name), "DeviceMesh::flatten: \"", name, "\" is already an axis");
  if (axes.size() == 1) {
    groups_[name] = groups_.at(axes[0]);
  } else {
    const int color = int(index_over(shape_, coordinate_, indices, /*in=*/false));
    groups_[name] = world_->split_known(color, mesh_line_ranks(shape_, world_->rank(), indices));
  }
  flattened_[name] = axes;
  return (*this)[name];
}

std::string DeviceMesh::describe() const {
  std::string where, dims;
  for (int a = 0; a < ndim(); ++a) {
    where += str_cat(a ? " " : "", names_[a], "=", coordinate_[a]);
    dims += str_cat(a ? " x " : "", names_[a], ":", shape_[a]);
  }
  return where + " of " + dims;
}

}  // namespace spmd::dist
