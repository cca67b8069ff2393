// Threads: results do not depend on the thread count, and a process forked
// after its parent ran multi-threaded ops works on one thread instead of
// hanging in OpenMP (threads.h).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reference.h"
#include "tensor/threads.h"

using namespace spmd;
using namespace spmd::test;

namespace {

// Runs body in a forked child and returns its exit code; -1 if it had to be
// killed after timeout_s (it hung).
int run_in_child(const std::function<int()>& body, int timeout_s = 30) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  for (int i = 0; i < timeout_s * 20; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    usleep(50000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

}  // namespace

TEST_CASE("results do not depend on the thread count", "[threads]") {
  const int before = num_threads();
  std::mt19937 rng(50);
  const Tensor x = random_tensor(rng, {300, 700}, DType::kF32, Layout::kTransposed);
  set_num_threads(1);
  const std::vector<float> one = ops::to_vector<float>(ops::softmax(ops::gelu(x)));
  set_num_threads(3);
  CHECK(ops::to_vector<float>(ops::softmax(ops::gelu(x))) == one);
  CHECK(num_threads() == 3);
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("at least 1 thread"));
  set_num_threads(before);
}

TEST_CASE("a child forked after multi-threaded ops runs on one thread, not hangs", "[threads]") {
  const int before = num_threads();
  set_num_threads(2);
  CHECK(ops::sum(ops::tanh(ops::rand({1 << 20}))).item<double>() != 0);  // starts the pool
  const int code = run_in_child([] {
    if (num_threads() != 1) return 2;
    const Tensor y = ops::matmul(ops::ones({300, 300}), ops::ones({300, 300}));
    if (ops::sum(y).item<double>() != 300.0 * 300 * 300) return 3;
    if (ops::sum(ops::tanh(ops::zeros({1 << 20}))).item<double>() != 0) return 4;
    try {
      set_num_threads(2);
      return 5;  // should have thrown
    } catch (const Error& e) {
      if (std::string(e.what()).find("forked") == std::string::npos) return 6;
    }
    return 0;
  });
  CHECK(code == 0);  // -1: the child hung in OpenMP
  set_num_threads(before);
}
