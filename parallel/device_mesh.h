// DeviceMesh: the world's ranks laid out as an n-dimensional grid with named
// axes, and one process group per axis (16.6).
//
// The grid is one range reshaped, row-major: with shape {"dp": 2, "tp": 4}
// the eight ranks are
//
//          tp=0 tp=1 tp=2 tp=3
//   dp=0     0    1    2    3
//   dp=1     4    5    6    7
//
// and a rank's group along an axis is its line through the grid along that
// axis: rank 5's "tp" group is {4, 5, 6, 7} (the ranks that split one replica
// of the model), its "dp" group {1, 5} (the ranks that hold copies of the
// same shard and synchronize them). The last axis varies fastest, so its
// ranks are neighbours: put tp last, where a GPU node's NVLink is.
//
// Every strategy takes its group from an axis (mesh.group("tp")), never from
// the world. The groups are made once, at construction (and at flatten()),
// and reused. The grid arithmetic is the pure function mesh_line_ranks(),
// tested without any communication.
//
// Not here: meshes over a subset of the world, slicing several axes at once
// into a 2-D sub-mesh (flatten() gives the one group such a slice needs for a
// collective).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"

namespace spmd::dist {

// --- Grid arithmetic (pure) --------------------------------------------------------

// The coordinate of `rank` in a row-major grid of `shape`.
// REQUIRES: 0 <= rank < product(shape).
std::vector<int64_t> mesh_coordinate(const std::vector<int64_t>& shape, int64_t rank);
// The ranks that share every coordinate of `rank` except along `axes`, in
// row-major order over `axes` (so the i-th is group rank i): rank's group
// over those axes together.
std::vector<int> mesh_line_ranks(const std::vector<int64_t>& shape, int64_t rank,
                                 const std::vector<int>& axes);
// Checks a mesh's shape and names before anything is built: as many names as
// dims, each size >= 1, names non-empty and distinct, product == world_size.
// Throws InvalidArgument naming what is wrong.
void check_mesh_shape(const std::vector<int64_t>& shape, const std::vector<std::string>& names,
                      int world_size);

// --- The mesh --------------------------------------------------------------------------

class DeviceMesh {
 public:
  // Lays the world's ranks out as `shape` with `axis_names` (outermost
  // first) and makes one group per axis through world->split_known(). Collective:
  // every rank of the world calls it with the same shape and names.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<int64_t> shape,
             std::vector<std::string> axis_names);

  int ndim() const { return int(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return names_; }
  // The number of ranks in the mesh, and along one axis (or a flattened one).
  int64_t size() const;
  int64_t size(const std::string& axis) const;
  // This rank's position in the grid, one entry per axis, and along one axis
  // (a flattened axis counts row-major over its parts).
  const std::vector<int64_t>& coordinate() const { return coordinate_; }
  int64_t coordinate(const std::string& axis) const;
  bool has_axis(const std::string& axis) const { return groups_.count(axis) > 0; }

  // This rank's group along an axis (or a flattened one).
  ProcessGroup& group(const std::string& axis) const { return *group_ptr(axis); }
  const std::shared_ptr<ProcessGroup>& group_ptr(const std::string& axis) const;
  // The 1-D mesh of this rank's line along `axis`: mesh["tp"].
  DeviceMesh operator[](const std::string& axis) const;

  // Makes one group over several axes together (dp_replicate x dp_shard ->
  // "dp": the ranks that differ only in those coordinates) and registers it
  // under `name`, so group(name) and size(name) work afterwards; returns its
  // 1-D mesh. Collective over the world, like the constructor. Flattening
  // the same axes again returns the existing group.
  DeviceMesh flatten(const std::vector<std::string>& axes, const std::string& name);

  // "dp=1 tp=2 of dp:2 x tp:4", for logs.
  std::string describe() const;

 private:
  // A 1-D mesh over an existing group (operator[], flatten).
  DeviceMesh(std::shared_ptr<ProcessGroup> group, std::string name);
  int axis_index(const std::string& axis) const;

  std::shared_ptr<ProcessGroup> world_;
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  std::vector<int64_t> coordinate_;
  std::map<std::string, std::shared_ptr<ProcessGroup>> groups_;  // axes and flattened axes
  std::map<std::string, std::vector<std::string>> flattened_;    // name -> the axes it spans
};

}  // namespace spmd::dist
