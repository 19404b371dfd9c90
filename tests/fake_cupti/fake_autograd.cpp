// A stand-in for the part of PyTorch's libtorch_cpu.so the collector reads:
// the autograd engine's current node (`torch::autograd::get_current_node`),
// for testing on machines without a GPU (CI) how the backward pass's tensors
// are named by their node.
//
// The classes, namespaces and the getter's signature are torch's own
// (torch/csrc/autograd/function.h, function.cpp), built by the same
// compiler and standard library, so the mangled names, the shared_ptr the
// getter returns and the C++ type information read are the real ones. What
// real PyTorch does is tested on the GPU machine (tests/gpu).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

namespace torch {
namespace autograd {

struct Node : std::enable_shared_from_this<Node> {
  virtual ~Node() = default;
  virtual void apply() = 0;
};

// As torch keeps it: the node this thread evaluates, set by a guard around
// each node the engine runs.
static thread_local std::shared_ptr<Node> current_evaluating_node;

struct NodeGuard {
  explicit NodeGuard(std::shared_ptr<Node> node)
      : last_(std::move(current_evaluating_node)) {
    current_evaluating_node = std::move(node);
  }
  ~NodeGuard() { current_evaluating_node = std::move(last_); }
  std::shared_ptr<Node> last_;
};

__attribute__((visibility("default"))) std::shared_ptr<Node> get_current_node() {
  return current_evaluating_node;
}

namespace generated {
// A backward node whose apply allocates a tensor, as an op's gradient does.
struct AddmmBackward0 : Node {
  uint64_t (*malloc_fn)(size_t);
  size_t bytes;
  void apply() override { malloc_fn(bytes); }
};
}  // namespace generated

}  // namespace autograd
}  // namespace torch

extern "C" {
// On a new thread that runs no Python (as the engine's device threads):
// evaluates an AddmmBackward0 node whose apply allocates `bytes` through
// `malloc_fn` (the stand-in allocator's fake_torch_malloc), then allocates
// `bytes` once more outside any node. Returns the node's use count after
// its evaluation (1: only the engine's own reference is left, whatever read
// the current node in between).
long fake_autograd_backward(uint64_t (*malloc_fn)(size_t), size_t bytes) {
  long uses = -1;
  std::thread t([&] {
    auto node = std::make_shared<torch::autograd::generated::AddmmBackward0>();
    node->malloc_fn = malloc_fn;
    node->bytes = bytes;
    {
      torch::autograd::NodeGuard guard(node);
      node->apply();
    }
    uses = node.use_count();
    malloc_fn(bytes);
  });
  t.join();
  return uses;
}
}
