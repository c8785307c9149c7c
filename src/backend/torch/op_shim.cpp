// The generic op call: any ATen operator, found once by its schema name
// ("topk", "sum.dim_IntList") and run through c10's boxed dispatcher, so it
// passes through autograd, autocast and every dispatch key exactly as
// `torch.<name>(...)` does. The Rust side (`backend/torch/opcall.rs`) sends
// the arguments already parsed and checked against the op table's schema
// line, positionally; arguments past the ones it sends take the operator's
// own defaults. Every function catches all exceptions (shim_guard.h).
#include "shim_guard.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>

#include <cstdint>
#include <string>
#include <vector>

extern "C" {

// One argument: `tag` says which field holds it.
struct EnkaiArg {
  int32_t tag;     // see the ARG_* constants in opcall.rs
  int64_t i;       // int, bool, ScalarType code
  double f;        // float
  const void* p;   // at::Tensor*, at::Tensor* const* (lists; NULL items = None), int64_t*, char*
  size_t n;        // list or string length
};

// The operator `name.overload` (overload "" for the default), or NULL with
// `*err` set (malloc'ed).
void* enkai_shim_op_find(const char* name, const char* overload, char** err) {
  void* found = nullptr;
  *err = enkai::guarded([&] {
    auto h = c10::Dispatcher::singleton().findSchemaOrThrow((std::string("aten::") + name).c_str(), overload);
    found = new c10::OperatorHandle(h);
  });
  return found;
}

static c10::IValue to_ivalue(const EnkaiArg& a) {
  switch (a.tag) {
    case 0: return c10::IValue();
    case 1: return c10::IValue(*static_cast<const at::Tensor*>(a.p));
    case 2: return c10::IValue(a.i);
    case 3: return c10::IValue(a.f);
    case 4: return c10::IValue(a.i != 0);
    case 5: {
      const int64_t* v = static_cast<const int64_t*>(a.p);
      return c10::IValue(std::vector<int64_t>(v, v + a.n));
    }
    case 6: return c10::IValue(std::string(static_cast<const char*>(a.p), a.n));
    case 7: return c10::IValue(static_cast<int64_t>(a.i));  // a ScalarType travels as its code
    case 8: {
      auto ts = static_cast<at::Tensor* const*>(a.p);
      std::vector<at::Tensor> v;
      v.reserve(a.n);
      for (size_t k = 0; k < a.n; k++) v.push_back(*ts[k]);
      return c10::IValue(v);
    }
    case 9: {
      auto ts = static_cast<at::Tensor* const*>(a.p);
      c10::List<std::optional<at::Tensor>> v;
      for (size_t k = 0; k < a.n; k++) v.push_back(ts[k] ? std::optional<at::Tensor>(*ts[k]) : std::nullopt);
      return c10::IValue(v);
    }
    default: throw std::runtime_error("enkai op shim: unknown argument tag");
  }
}

// Runs the operator; writes up to `cap` new at::Tensor* to `outs` (a bool
// result becomes a 0-dim bool tensor, a Tensor[] result its items) and
// their number to `*n_out`.
char* enkai_shim_op_call(void* op, const EnkaiArg* args, size_t n, at::Tensor** outs, size_t cap, size_t* n_out) {
  *n_out = 0;
  return enkai::guarded([&] {
    auto& h = *static_cast<c10::OperatorHandle*>(op);
    const auto& schema = h.schema().arguments();
    torch::jit::Stack stack;
    stack.reserve(schema.size());
    for (size_t i = 0; i < schema.size(); i++) {
      if (i < n && args[i].tag != 10) {  // 10: the operator's own default
        stack.push_back(to_ivalue(args[i]));
      } else if (schema[i].default_value()) {
        stack.push_back(*schema[i].default_value());
      } else {
        stack.push_back(c10::IValue());
      }
    }
    // As the typed shims: below the autograd layer when no input requires
    // grad (ADInplaceOrView still runs, so version counters still count).
    bool grad = false;
    for (const auto& v : stack) {
      if (v.isTensor() && v.toTensor().requires_grad()) grad = true;
      if (v.isTensorList())
        for (const at::Tensor& t : v.toTensorList().vec()) grad = grad || t.requires_grad();
    }
    if (grad || !c10::GradMode::is_enabled()) {
      h.callBoxed(stack);
    } else {
      at::AutoDispatchBelowAutograd below;
      h.callBoxed(stack);
    }
    std::vector<at::Tensor> res;
    for (auto& v : stack) {
      if (v.isTensor()) {
        res.push_back(std::move(v).toTensor());
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) res.push_back(t);
      } else if (v.isBool()) {
        res.push_back(at::scalar_tensor(v.toBool(), at::kBool));
      } else {
        throw std::runtime_error("enkai op shim: a result that is not a tensor");
      }
    }
    if (res.size() > cap) throw std::runtime_error("enkai op shim: more results than the table declares");
    for (size_t k = 0; k < res.size(); k++) outs[k] = new at::Tensor(std::move(res[k]));
    *n_out = res.size();
  });
}

}  // extern "C"
