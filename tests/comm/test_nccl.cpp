// GPU tests (CUDA builds; each case skips itself when no GPU is present).
//   [nccl]: a 1-rank NCCL communicator runs every collective on one GPU (one
//           GPU is all a single rank needs; more ranks need more GPUs).
//   [gpu]:  several ranks share one GPU through the TCP backend, their CUDA
//           tensors staged through pinned host buffers.
// CUDA tensors are made here from cudaMalloc'ed memory (the tensor layer's
// CUDA backend is not needed to test the communicator).
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <vector>

#include "harness.h"
#include "parallel/comm/nccl/nccl_process_group.h"
#include "runtime/hash_store.h"
#include "tensor/cuda_api.h"
#include "tensor/factory.h"
#include "tests/skip.h"
#include "values.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

void check(bool cond, const char* what) { expect(cond, what); }

Tensor gpu_floats(const std::vector<float>& values) {
  return ops::from_vector(values, Shape{int64_t(values.size())}, Device::cuda(0));
}

std::vector<float> to_host(const Tensor& t) { return ops::to_vector<float>(t); }

}  // namespace

TEST_CASE("a 1-rank NCCL group runs every collective on one GPU", "[nccl][gpu]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  auto outcome = run_processes(
      1,
      [](int, const std::string&) {
        GroupOptions options;
        options.timeout = std::chrono::seconds(30);
        auto g = NcclProcessGroup::create(std::make_shared<HashStore>(), 0, 1, options, 0);
        Tensor t = gpu_floats({1, 2, 3});
        const std::vector<float> same = {1, 2, 3};
        g->all_reduce(t).wait();
        check(to_host(t) == same, "all_reduce sum on one rank");
        g->all_reduce(t, ReduceOp::kAvg).wait();
        check(to_host(t) == same, "all_reduce avg on one rank");
        g->broadcast(t, 0).wait();
        g->reduce(t, 0, ReduceOp::kMax).wait();
        check(to_host(t) == same, "broadcast and reduce on one rank");
        Tensor out = gpu_floats({0, 0, 0});
        g->all_gather(out, t).wait();
        check(to_host(out) == same, "all_gather");
        Tensor rs = gpu_floats({0, 0, 0});
        g->reduce_scatter(rs, t).wait();
        check(to_host(rs) == same, "reduce_scatter");
        Tensor a2a = gpu_floats({0, 0, 0});
        g->all_to_all(a2a, t).wait();
        check(to_host(a2a) == same, "all_to_all");
        Tensor gathered = gpu_floats({0, 0, 0});
        g->gather(gathered, t, 0).wait();
        check(to_host(gathered) == same, "gather");
        Tensor scattered = gpu_floats({0, 0, 0});
        g->scatter(scattered, t, 0).wait();
        check(to_host(scattered) == same, "scatter");
        Tensor placed = gpu_floats({-1, 0, 0, -1});  // the block lands at offset 1
        g->all_to_allv(placed, t, {2}, {2}, {1}, {1}).wait();
        check(to_host(placed) == std::vector<float>{-1, 2, 3, -1}, "all_to_allv");
        g->barrier().wait();
        Tensor b = gpu_floats(std::vector<float>(16 << 20, 1.5f));  // 64 MiB
        g->all_reduce(b).wait();
        check(to_host(b)[12345] == 1.5f, "64 MiB all_reduce");
        bool refused = false;
        try {
          g->all_reduce(cpu_tensor(3, DType::kF32));
        } catch (const InvalidArgument&) {
          refused = true;
        }
        check(refused, "a CPU tensor must be refused at the call");
        g->shutdown();
        report("ok");
      },
      std::chrono::seconds(60));
  INFO(outcome[0].report);
  CHECK(outcome[0].exited_ok());
  CHECK(outcome[0].report == "ok");
}

TEST_CASE("three ranks share one GPU through the TCP backend", "[gpu]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    std::vector<float> mine(1000);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = float(input_value(ReduceOp::kSum, r, i));
    Tensor t = gpu_floats(mine);
    g.all_reduce(t).wait();
    std::vector<float> got = to_host(t);
    for (size_t i = 0; i < got.size(); ++i) {
      expect(got[i] == float(reduced_value(ReduceOp::kSum, p, i)), "rank ", r, ": element ", i,
             " is ", got[i]);
    }
    Tensor all = gpu_floats(std::vector<float>(3000, -1.f));
    g.all_gather(all, t).wait();
    expect(to_host(all)[2999] == got[999], "all_gather of CUDA tensors");
    Tensor out = gpu_floats(std::vector<float>(500, float(r)));
    Tensor in = gpu_floats(std::vector<float>(500, -1.f));
    g.batch_isend_irecv(
         {{OpType::kSend, out, (r + 1) % p, 0}, {OpType::kRecv, in, (r + p - 1) % p, 0}})
        .wait();
    expect(to_host(in)[499] == float((r + p - 1) % p), "send/recv of CUDA tensors");
    // gather and scatter of CUDA tensors: only the root has the whole buffer.
    Tensor whole = r == 1 ? gpu_floats(std::vector<float>(1500, -1.f)) : Tensor();
    g.gather(whole, out, 1).wait();
    if (r == 1) {
      expect(to_host(whole)[1000] == 2.f && to_host(whole)[499] == 0.f, "gather of CUDA tensors");
    }
    Tensor part = gpu_floats(std::vector<float>(500, -1.f));
    g.scatter(part, whole, 1).wait();
    expect(to_host(part)[0] == float(r), "scatter of CUDA tensors");
  }));
}
