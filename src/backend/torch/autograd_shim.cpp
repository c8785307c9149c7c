// libtorch's autograd engine for what tch does not expose: a node whose
// backward is a Rust closure (a custom autograd Function built from Rust),
// torch.autograd.backward with several roots and their gradients, and the
// leaves a graph reaches. Every function catches all exceptions: nothing is
// thrown across the C ABI. Tensors arrive as `at::Tensor*`, the
// representation of tch's C tensors.
#include "shim_guard.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

extern "C" {
// Runs the Rust backward once: takes ownership of `state` and of the
// non-NULL `grads` (one per output), and writes one new at::Tensor* (or
// NULL: no gradient) per input to `out`. Returns NULL or a malloc'ed message.
typedef char* (*enkai_custom_backward_fn)(void* state, at::Tensor** grads, size_t n_grads, at::Tensor** out, size_t n_out);
// Drops a backward that never ran.
typedef void (*enkai_custom_drop_fn)(void* state);
}

namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

struct RustNode : public Node {
  RustNode(std::string label, void* state, enkai_custom_backward_fn run, enkai_custom_drop_fn drop)
      : label_(std::move(label)), state_(state), run_(run), drop_(drop) {}

  ~RustNode() override {
    if (state_) drop_(state_);
  }

  std::string name() const override { return label_; }

  variable_list apply(variable_list&& grads) override {
    TORCH_CHECK(state_, "trying to backward through the graph a second time (", label_,
                " was already freed); compute the loss again");
    void* state = state_;
    state_ = nullptr;
    std::vector<at::Tensor*> in(grads.size(), nullptr);
    for (size_t i = 0; i < grads.size(); i++) {
      if (grads[i].defined()) in[i] = new at::Tensor(grads[i]);
    }
    std::vector<at::Tensor*> out(num_outputs(), nullptr);
    char* err = run_(state, in.data(), in.size(), out.data(), out.size());
    variable_list result(out.size());
    for (size_t i = 0; i < out.size(); i++) {
      if (out[i]) {
        result[i] = *out[i];
        delete out[i];
      }
    }
    if (err) {
      std::string msg(err);
      std::free(err);
      TORCH_CHECK(false, msg);
    }
    return result;
  }

 private:
  std::string label_;
  void* state_;
  enkai_custom_backward_fn run_;
  enkai_custom_drop_fn drop_;
};

}  // namespace

extern "C" {

// Gives the fresh `outs` one RustNode over `inputs`; floating outputs get
// its history in place, others none. The node owns `state` from the start:
// on any failure it drops it.
char* enkai_shim_custom_node(at::Tensor** inputs, size_t n_in, at::Tensor** outs, size_t n_out, const char* name,
                             void* state, enkai_custom_backward_fn run, enkai_custom_drop_fn drop) {
  c10::intrusive_ptr<RustNode> node;
  try {
    node = c10::make_intrusive<RustNode>(name, state, run, drop);
  } catch (...) {
    drop(state);
    return enkai::dup("out of memory making an autograd node");
  }
  return enkai::guarded([&] {
    variable_list ins;
    ins.reserve(n_in);
    for (size_t i = 0; i < n_in; i++) ins.push_back(*inputs[i]);
    node->set_next_edges(torch::autograd::collect_next_edges(ins));
    for (size_t i = 0; i < n_out; i++) {
      at::Tensor& o = *outs[i];
      if (o.is_floating_point() || o.is_complex()) {
        torch::autograd::create_gradient_edge(o, node);  // the node is intrusively counted (libtorch >= 2.12)
      } else {
        node->add_input_metadata(Node::undefined_input());
      }
    }
  });
}

// torch.autograd.backward(outs, grads).
char* enkai_shim_backward_with(at::Tensor** outs, at::Tensor** grads, size_t n) {
  return enkai::guarded([&] {
    variable_list o, g;
    for (size_t i = 0; i < n; i++) {
      o.push_back(*outs[i]);
      g.push_back(*grads[i]);
    }
    torch::autograd::backward(o, g);
  });
}

// The leaves that require grad and that the outputs' graphs reach, each
// once, as new at::Tensor* in a malloc'ed array (*leaves, *n_leaves).
char* enkai_shim_graph_leaves(at::Tensor** outs, size_t n, at::Tensor*** leaves, size_t* n_leaves) {
  *leaves = nullptr;
  *n_leaves = 0;
  std::vector<at::Tensor> found;
  char* err = enkai::guarded([&] {
    std::unordered_set<const void*> seen_leaf;
    std::unordered_set<const Node*> seen;
    std::vector<Node*> stack;
    auto leaf = [&](const at::Tensor& t) {
      if (t.defined() && seen_leaf.insert(t.unsafeGetTensorImpl()).second) found.push_back(t);
    };
    for (size_t i = 0; i < n; i++) {
      const at::Tensor& o = *outs[i];
      if (auto fn = o.grad_fn()) {
        stack.push_back(fn.get());
      } else if (o.requires_grad()) {
        leaf(o);
      }
    }
    while (!stack.empty()) {
      Node* fn = stack.back();
      stack.pop_back();
      if (!seen.insert(fn).second) continue;
      for (const auto& e : fn->next_edges()) {
        Node* next = e.function.get();
        if (!next) continue;
        if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(next)) {
          leaf(acc->variable);
        } else {
          stack.push_back(next);
        }
      }
    }
  });
  if (err) return err;
  auto** arr = static_cast<at::Tensor**>(std::malloc(sizeof(at::Tensor*) * (found.empty() ? 1 : found.size())));
  if (!arr) return enkai::dup("out of memory listing a graph's leaves");
  for (size_t i = 0; i < found.size(); i++) arr[i] = new at::Tensor(found[i]);
  *leaves = arr;
  *n_leaves = found.size();
  return nullptr;
}

}  // extern "C"
