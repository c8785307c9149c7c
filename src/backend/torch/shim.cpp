// The few libtorch calls `tch` does not expose, behind a C interface:
// per-device autocast switches (tch only toggles the legacy CUDA one), the
// AdamW, Adam and SGD updates written with the exact tensor ops of PyTorch's
// `_single_tensor_adamw` / `_single_tensor_adam` / `_single_tensor_sgd`
// (tch's add/addcmul_/addcdiv_ lack the `alpha` and `value` arguments),
// and thinner paths for the calls whose libtorch overhead is most of their cost.
// Every function catches all exceptions: nothing is thrown across the C ABI.
// Tensors arrive as `at::Tensor*`, the representation of tch's C tensors.
#include "shim_guard.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

namespace {

using enkai::guarded;

at::DeviceType device_type(int d) { return d == 1 ? at::kCUDA : at::kCPU; }

// A new at::Tensor holding run()'s result, computed below the autograd layer
// unless `grad` (some input requires grad).
template <typename F>
at::Tensor* below_autograd_unless(bool grad, F run) {
  if (grad) return new at::Tensor(run());
  at::AutoDispatchBelowAutograd below;
  return new at::Tensor(run());
}

// A Python number as the operand of a tensor op, as PyTorch's Python passes
// it (a wrapped number): it takes no part in type promotion, so a bf16 or
// fp16 op computes with it in float. Passed as a C++ Scalar instead, it is
// first rounded to the tensor's dtype.
at::Tensor number(double v) {
  at::Tensor t = at::scalar_tensor(v, at::TensorOptions().dtype(at::kDouble));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

}  // namespace

extern "C" {

// Returns NULL, or a malloc'ed message that the caller frees.
char* enkai_shim_adamw_step(at::Tensor* param, at::Tensor* grad, at::Tensor* exp_avg,
                            at::Tensor* exp_avg_sq, double decay, double lerp, double beta2,
                            double sq_weight, double bc2_sqrt, double eps, double step_size) {
  // The scalars come from crate::vocab::optim::AdamwStep; the ops are _single_tensor_adamw's.
  return guarded([&] {
    at::NoGradGuard no_grad;
    if (decay != 1) param->mul_(decay);
    exp_avg->lerp_(*grad, lerp);
    exp_avg_sq->mul_(beta2).addcmul_(*grad, *grad, sq_weight);
    at::Tensor denom = (exp_avg_sq->sqrt() / bc2_sqrt).add_(eps);
    param->addcdiv_(*exp_avg, denom, -step_size);
  });
}

// torch.optim.Adam's _single_tensor_adam for one param (foreach=False, not
// capturable); the scalars come from crate::vocab::optim::AdamStep.
// `max_exp_avg_sq` is NULL without amsgrad.
char* enkai_shim_adam_step(at::Tensor* param, at::Tensor* grad, at::Tensor* exp_avg, at::Tensor* exp_avg_sq,
                           at::Tensor* max_exp_avg_sq, double weight_decay, double lerp, double beta2,
                           double sq_weight, double bc2_sqrt, double eps, double step_size) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    at::Tensor g = *grad;
    if (weight_decay != 0) g = g.add(*param, weight_decay);
    exp_avg->lerp_(g, lerp);
    exp_avg_sq->mul_(number(beta2)).addcmul_(g, g, sq_weight);
    at::Tensor denom;
    if (max_exp_avg_sq != nullptr) {
      at::maximum_out(*max_exp_avg_sq, *max_exp_avg_sq, *exp_avg_sq);
      denom = (max_exp_avg_sq->sqrt() / number(bc2_sqrt)).add_(number(eps));
    } else {
      denom = (exp_avg_sq->sqrt() / number(bc2_sqrt)).add_(number(eps));
    }
    param->addcdiv_(*exp_avg, denom, -step_size);
  });
}

// torch.optim.SGD's _single_tensor_sgd for one param; the scalars come from
// crate::vocab::optim::SgdStep. `buf` is the momentum buffer, NULL before the
// first step with momentum: that step makes it (a clone of the direction, no
// dampening) and stores it in *made, which is left NULL otherwise.
char* enkai_shim_sgd_step(at::Tensor* param, at::Tensor* grad, at::Tensor* buf, at::Tensor** made,
                          double weight_decay, double momentum, double damp_weight, int nesterov, double lr) {
  *made = nullptr;
  return guarded([&] {
    at::NoGradGuard no_grad;
    at::Tensor d = *grad;
    if (weight_decay != 0) d = d.add(*param, weight_decay);
    at::Tensor fresh;
    if (momentum != 0) {
      at::Tensor b;
      if (buf == nullptr) {
        fresh = d.detach().clone();
        b = fresh;
      } else {
        b = *buf;
        b.mul_(number(momentum)).add_(d, damp_weight);
      }
      d = nesterov ? d.add(b, momentum) : b;
    }
    param->add_(d, -lr);
    if (fresh.defined()) *made = new at::Tensor(std::move(fresh));
  });
}

// torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale).
char* enkai_shim_unscale(at::Tensor* const* grads, size_t n, at::Tensor* found_inf, at::Tensor* inv_scale) {
  return guarded([&] {
    std::vector<at::Tensor> list;
    list.reserve(n);
    for (size_t i = 0; i < n; i++) list.push_back(*grads[i]);
    at::_amp_foreach_non_finite_check_and_unscale_(list, *found_inf, *inv_scale);
  });
}

// Autocast state of this thread for a device type (0 = CPU, 1 = CUDA).
void enkai_shim_autocast_get(int device, int* enabled, int* dtype) {
  *enabled = at::autocast::is_autocast_enabled(device_type(device)) ? 1 : 0;
  *dtype = static_cast<int>(at::autocast::get_autocast_dtype(device_type(device)));
}

char* enkai_shim_autocast_set(int device, int enabled, int dtype) {
  return guarded([&] {
    at::autocast::set_autocast_enabled(device_type(device), enabled != 0);
    at::autocast::set_autocast_dtype(device_type(device), static_cast<at::ScalarType>(dtype));
  });
}

void enkai_shim_autocast_increment_nesting() { at::autocast::increment_nesting(); }

// Leaving the outermost region clears the cast cache, as torch.autocast's __exit__ does.
void enkai_shim_autocast_decrement_nesting() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

// The CPU generator's state (randn, dropout), as torch.get_rng_state() gives it.
char* enkai_shim_rng_get_state(at::Tensor** out) {
  return guarded([&] {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    *out = new at::Tensor(gen.get_state());
  });
}

// A CPU generator of the caller's own, seeded as torch.manual_seed(seed)
// seeds the default one (so its draws are the same), touching no shared
// state: concurrent seeded inits cannot interleave. NULL on failure.
void* enkai_shim_generator_new(uint64_t seed) {
  try {
    return new at::Generator(at::make_generator<at::CPUGeneratorImpl>(seed));
  } catch (...) {
    return nullptr;
  }
}

void enkai_shim_generator_free(void* gen) { delete static_cast<at::Generator*>(gen); }

// torch.randn(shape, generator=gen): fp32 on the CPU.
char* enkai_shim_randn_with(void* gen, const int64_t* shape, size_t ndim, at::Tensor** out) {
  return guarded([&] {
    auto* g = static_cast<at::Generator*>(gen);
    *out = new at::Tensor(at::randn(at::IntArrayRef(shape, ndim), *g, at::TensorOptions().dtype(at::kFloat)));
  });
}

// torch.set_rng_state(state): rejects a state of the wrong size or dtype.
char* enkai_shim_rng_set_state(at::Tensor* state) {
  return guarded([&] {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*state);
  });
}

// Elementwise ops: 0 add, 1 sub, 2 mul, 3 div; 0 relu, 1 sigmoid, 2 tanh,
// 3 gelu. When no input requires grad, the autograd layer has nothing to
// record and only costs time (about 350 instructions of a 6000-instruction
// add of two [4] tensors), so the op is dispatched below it, as the autograd
// kernels themselves redispatch: the same result, with no grad_fn either way.
// In-place ops are not routed here (the autograd layer checks those).
char* enkai_shim_binary(int op, const at::Tensor* a, const at::Tensor* b, at::Tensor** out) {
  return guarded([&] {
    auto run = [&] {
      switch (op) {
        case 0: return at::add(*a, *b);
        case 1: return at::sub(*a, *b);
        case 2: return at::mul(*a, *b);
        default: return at::div(*a, *b);
      }
    };
    *out = below_autograd_unless(a->requires_grad() || b->requires_grad(), run);
  });
}

// torch.zeros(shape, dtype) on the CPU: what at::zeros ends in (the CPU
// allocator's empty tensor, then zero bytes, which are 0 in every dtype),
// without its two trips through the dispatcher (about 1300 instructions of a
// 4500-instruction zeros([4]) + free).
char* enkai_shim_zeros_cpu(const int64_t* shape, size_t ndim, int dtype, at::Tensor** out) {
  return guarded([&] {
    at::Tensor t(at::detail::empty_cpu(at::IntArrayRef(shape, ndim), static_cast<at::ScalarType>(dtype)));
    if (size_t n = t.nbytes()) std::memset(t.data_ptr(), 0, n);
    *out = new at::Tensor(std::move(t));
  });
}

}  // extern "C"

extern "C" {

// at::from_blob with a deleter (tch's from_blob has none): `release(ctx)` runs
// exactly once — when the storage dies, or before this returns an error.
char* enkai_shim_from_blob(void* data, const int64_t* sizes, const int64_t* strides, size_t ndim, int dtype,
                           int device, int index, void (*release)(void*), void* ctx, at::Tensor** out) {
  struct Releaser {
    void (*fn)(void*);
    void* ctx;
    Releaser(void (*f)(void*), void* c) : fn(f), ctx(c) {}
    Releaser(const Releaser&) = delete;
    Releaser& operator=(const Releaser&) = delete;
    ~Releaser() { fn(ctx); }
  };
  std::shared_ptr<Releaser> owner;
  try {
    owner = std::make_shared<Releaser>(release, ctx);
  } catch (...) {
    release(ctx);
    return enkai::dup("out of memory wrapping foreign memory");
  }
  // The deleter's copy of `owner` is the last one once this returns; on an
  // exception every copy dies during unwinding and `release` runs then.
  return guarded([&] {
    auto opts = at::TensorOptions()
                    .dtype(static_cast<at::ScalarType>(dtype))
                    .device(at::Device(device_type(device), static_cast<c10::DeviceIndex>(index)));
    at::Tensor t = at::for_blob(data, at::IntArrayRef(sizes, ndim))
                       .strides(at::IntArrayRef(strides, ndim))
                       .deleter([owner](void*) mutable { owner.reset(); })
                       .options(opts)
                       .make_tensor();
    *out = new at::Tensor(std::move(t));
  });
}

}  // extern "C"
