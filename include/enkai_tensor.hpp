/*
 * enkai_tensor.hpp — a header-only C++17 API over the C ABI of enkai_tensor.h,
 * in the style of ONNX Runtime's C++ API: RAII handle classes (copy = retain,
 * move = take over, destructor = free), errors as exceptions carrying the
 * numeric code, operators, spans for data in and out, and an autocast scope
 * guard. Nothing of C++ crosses the library boundary: every member is an
 * inline call of the C functions, and the .so stays a C library.
 *
 *   enkai::Device cpu("cpu");
 *   auto x = enkai::Tensor::randn({2, 3}, "fp32", cpu).require_grad();
 *   auto y = enkai::matmul(x, enkai::Tensor::ones({3, 2}, "fp32", cpu)).relu().sum();
 *   y.backward();
 *   std::vector<float> g = x.grad().to_vector<float>();
 */
#ifndef ENKAI_TENSOR_HPP
#define ENKAI_TENSOR_HPP

#include "enkai_tensor.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>
#if __cplusplus >= 202002L
#include <span>
#endif

namespace enkai {

/// A failed call: `code()` is the EnkaiErrorCode, `what()` the library's
/// "E_CODE: detail" message.
class Error : public std::runtime_error {
 public:
  Error(EnkaiErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  EnkaiErrorCode code() const noexcept { return code_; }

 private:
  EnkaiErrorCode code_;
};

#if __cplusplus >= 202002L
template <class T>
using span = std::span<T>;
#else
/// A view of contiguous elements (std::span before C++20): from a pointer and
/// a count, a C array, or any container with data() and size().
template <class T>
class span {
 public:
  constexpr span() noexcept = default;
  constexpr span(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  template <std::size_t N>
  constexpr span(T (&a)[N]) noexcept : data_(a), size_(N) {}
  template <class C, class = std::enable_if_t<std::is_convertible_v<decltype(std::declval<C&>().data()), T*>>>
  constexpr span(C&& c) noexcept : data_(c.data()), size_(c.size()) {}
  constexpr T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};
#endif

using Shape = std::vector<int64_t>;

namespace detail {

[[noreturn]] inline void throw_last_error() {
  const char* m = enkai_tensor_last_error();
  throw Error(static_cast<EnkaiErrorCode>(enkai_tensor_last_error_code()),
              m ? m : "E_INTERNAL: failed without an error message");
}

// The C ABI's three sentinels: handle 0, status 1, NaN with an error set.
inline int64_t check(int64_t handle) {
  if (handle == 0) throw_last_error();
  return handle;
}
inline void check_status(int rc) {
  if (rc != 0) throw_last_error();
}
inline double check_value(double v) {
  if (std::isnan(v) && enkai_tensor_last_error_code() != 0) throw_last_error();
  return v;
}

// A string the library malloc'ed, taken into a std::string and freed.
template <class F>
std::string out_string(F f) {
  char* p = nullptr;
  std::size_t n = 0;
  check_status(f(&p, &n));
  std::string s(p, n);
  enkai_tensor_string_free(p);
  return s;
}

inline std::string int_list(const int64_t* v, std::size_t n) {
  std::string s = "[";
  for (std::size_t i = 0; i < n; i++) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

inline std::vector<int64_t> parse_int_list(const char* s, std::size_t n) {
  std::vector<int64_t> out;
  std::size_t i = 0;
  while (i < n) {
    if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
      char* end = nullptr;
      std::string num(s + i, n - i);
      out.push_back(std::strtoll(num.c_str(), &end, 10));
      i += static_cast<std::size_t>(end - num.c_str());
    } else {
      i++;
    }
  }
  return out;
}

// copy = retain, move = take over, destructor = free (errors ignored there).
template <int (*Retain)(int64_t), int (*Free)(int64_t)>
class Handle {
 public:
  Handle() noexcept = default;
  Handle(const Handle& o) : h_(o.h_) {
    if (h_) check_status(Retain(h_));
  }
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, 0)) {}
  Handle& operator=(const Handle& o) {
    if (this != &o) {
      Handle copy(o);
      std::swap(h_, copy.h_);
    }
    return *this;
  }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, 0);
    }
    return *this;
  }
  ~Handle() { reset(); }

  /// The C handle, still owned by this object.
  int64_t handle() const noexcept { return h_; }
  /// Gives the reference up to the caller (who must free it); leaves this empty.
  int64_t release() noexcept { return std::exchange(h_, 0); }
  /// Frees the reference now; leaves this empty.
  void reset() noexcept {
    if (h_) Free(std::exchange(h_, 0));
  }
  explicit operator bool() const noexcept { return h_ != 0; }

 protected:
  explicit Handle(int64_t h) noexcept : h_(h) {}
  int64_t h_ = 0;
};

template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "fp32";
  else if constexpr (std::is_same_v<T, double>) return "fp64";
  else if constexpr (std::is_same_v<T, int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else static_assert(!sizeof(T), "no enkai dtype for this element type (bf16/fp16 go through to_dtype)");
}

}  // namespace detail

/// A device handle: `cpu`, `cuda`, `cuda:N`, `auto`.
class Device : public detail::Handle<enkai_tensor_device_retain, enkai_tensor_device_free> {
 public:
  Device() noexcept = default;
  explicit Device(const std::string& spec) : Handle(detail::check(enkai_tensor_device(spec.c_str()))) {}
  /// Takes over a device handle a C function returned (0 throws its error).
  static Device adopt(int64_t h) { return Device(detail::check(h), 0); }

 private:
  Device(int64_t h, int) noexcept : Handle(h) {}
};

class Tensor;
using Tensors = std::vector<Tensor>;

namespace detail {
inline std::string handle_list(const Tensors& ts);
}

/// A tensor handle. Every operation returns a new Tensor owning its result;
/// failures throw enkai::Error.
class Tensor : public detail::Handle<enkai_tensor_retain, enkai_tensor_free> {
 public:
  Tensor() noexcept = default;
  /// Takes over a tensor handle a C function returned (0 throws its error).
  static Tensor adopt(int64_t h) { return Tensor(detail::check(h), 0); }
  /// A new reference to a handle someone else keeps (retained).
  static Tensor borrow(int64_t h) {
    detail::check_status(enkai_tensor_retain(h));
    return Tensor(h, 0);
  }

  static Tensor randn(const Shape& s, const std::string& dtype, const Device& d) {
    return adopt(enkai_tensor_randn(shape_json(s).c_str(), dtype.c_str(), d.handle()));
  }
  static Tensor zeros(const Shape& s, const std::string& dtype, const Device& d) {
    return adopt(enkai_tensor_zeros(shape_json(s).c_str(), dtype.c_str(), d.handle()));
  }
  static Tensor ones(const Shape& s, const std::string& dtype, const Device& d) {
    return adopt(enkai_tensor_ones(shape_json(s).c_str(), dtype.c_str(), d.handle()));
  }
  static Tensor full(const Shape& s, double value, const std::string& dtype, const Device& d) {
    return adopt(enkai_tensor_full(shape_json(s).c_str(), value, dtype.c_str(), d.handle()));
  }
  /// A copy of `data` (row-major) with the element type's dtype.
  template <class T>
  static Tensor from_data(span<const T> data, const Shape& s, const Device& d) {
    return adopt(enkai_tensor_from_data(data.data(), data.size_bytes(), shape_json(s).c_str(),
                                        detail::dtype_name<T>(), d.handle()));
  }
  template <class T>
  static Tensor from_data(const std::vector<T>& data, const Shape& s, const Device& d) {
    return from_data(span<const T>(data.data(), data.size()), s, d);
  }
  /// Wraps a producer's DLPack 1.x tensor without copying; ownership passes
  /// in every case (on failure its deleter has run before this throws).
  static Tensor from_dlpack(DLManagedTensorVersioned* managed) { return adopt(enkai_tensor_from_dlpack(managed)); }
  /// Token ids as an int64 [batch, seq] tensor.
  static Tensor ids(span<const uint32_t> ids, int64_t batch, int64_t seq, const Device& d) {
    return adopt(enkai_tensor_ids_u32(ids.data(), ids.size(), batch, seq, d.handle()));
  }

  Shape shape() const {
    EnkaiSlice s = enkai_tensor_shape(h_);
    if (!s.ptr) detail::throw_last_error();
    Shape out = detail::parse_int_list(reinterpret_cast<const char*>(s.ptr), s.len);
    enkai_free(s.ptr, s.len);
    return out;
  }
  std::string dtype() const {
    return detail::out_string([&](char** p, std::size_t* n) { return enkai_tensor_dtype(h_, p, n); });
  }
  std::string device_name() const {
    return detail::out_string([&](char** p, std::size_t* n) { return enkai_tensor_device_name(h_, p, n); });
  }
  int64_t numel() const {
    int64_t n = enkai_tensor_numel(h_);
    if (n < 0) detail::throw_last_error();
    return n;
  }
  double item() const { return detail::check_value(enkai_tensor_item(h_)); }
  /// Copies the elements out; `out` must hold exactly numel() of the tensor's dtype.
  template <class T>
  void copy_to(span<T> out) const {
    static_assert(!std::is_const_v<T>, "copy_to writes into the span");
    detail::check_status(enkai_tensor_copy_to(h_, out.data(), out.size_bytes()));
  }
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> v(static_cast<std::size_t>(numel()));
    copy_to(span<T>(v.data(), v.size()));
    return v;
  }

  /// A DLPack 1.x view sharing this tensor's memory; the caller owns it and
  /// must call its deleter once (include dlpack.h to read it).
  DLManagedTensorVersioned* to_dlpack() const {
    DLManagedTensorVersioned* m = enkai_tensor_to_dlpack(h_);
    if (!m) detail::throw_last_error();
    return m;
  }

  Tensor reshape(const Shape& s) const { return adopt(enkai_tensor_reshape(h_, shape_json(s).c_str())); }
  Tensor view(const Shape& s) const { return adopt(enkai_tensor_view(h_, shape_json(s).c_str())); }
  Tensor transpose(int64_t d0, int64_t d1) const { return adopt(enkai_tensor_transpose(h_, d0, d1)); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const {
    return adopt(enkai_tensor_slice(h_, dim, start, end, step));
  }
  /// Sum over `dim`, or over everything when `dim` is negative (the C ABI's rule).
  Tensor sum(int64_t dim = -1, bool keepdim = false) const { return adopt(enkai_tensor_sum(h_, dim, keepdim)); }
  Tensor mean(int64_t dim = -1, bool keepdim = false) const { return adopt(enkai_tensor_mean(h_, dim, keepdim)); }
  Tensor softmax(int64_t dim) const { return adopt(enkai_tensor_softmax(h_, dim)); }
  Tensor relu() const { return adopt(enkai_tensor_relu(h_)); }
  Tensor sigmoid() const { return adopt(enkai_tensor_sigmoid(h_)); }
  Tensor tanh() const { return adopt(enkai_tensor_tanh(h_)); }
  Tensor gelu() const { return adopt(enkai_tensor_gelu(h_)); }
  Tensor dropout(double p, bool train = true) const { return adopt(enkai_tensor_dropout(h_, p, train)); }
  Tensor detach() const { return adopt(enkai_tensor_detach(h_)); }
  Tensor to_dtype(const std::string& dtype) const { return adopt(enkai_tensor_to_dtype(h_, dtype.c_str())); }
  Tensor to_device(const Device& d) const { return adopt(enkai_tensor_to_device(h_, d.handle())); }

  /// Marks a leaf as requiring grad; returns *this for chaining.
  Tensor& require_grad() & {
    detail::check(enkai_tensor_require_grad(h_));
    return *this;
  }
  Tensor&& require_grad() && { return std::move(require_grad()); }
  /// As `Tensor.requires_grad_(flag)`: false freezes a leaf (a parameter).
  const Tensor& requires_grad_(bool flag = true) const {
    detail::check_status(enkai_tensor_requires_grad_(h_, flag ? 1 : 0));
    return *this;
  }
  bool requires_grad() const {
    int r = enkai_tensor_requires_grad(h_);
    if (r < 0) detail::throw_last_error();
    return r != 0;
  }
  void backward() const { detail::check_status(enkai_tensor_backward(h_)); }
  /// The gradient (sharing storage with it), or an empty Tensor when there is none.
  Tensor grad() const {
    int64_t g = enkai_tensor_grad(h_);
    if (g == 0 && enkai_tensor_last_error_code() != 0) detail::throw_last_error();
    return Tensor(g, 0);
  }
  void zero_grad() const { detail::check_status(enkai_tensor_zero_grad(h_)); }

  /// A 0-dim tensor holding `v` as torch promotes a Python scalar against
  /// this tensor: its dtype, unless `v` is of a higher kind.
  template <class S, class = std::enable_if_t<std::is_arithmetic_v<S>>>
  Tensor scalar_like(S v) const {
    std::string dt = dtype();
    const bool floating = dt == "fp32" || dt == "fp64" || dt == "bf16" || dt == "fp16";
    if constexpr (std::is_same_v<S, bool>) dt = "bool";
    else if constexpr (std::is_floating_point_v<S>) dt = floating ? dt : "fp32";
    else if (dt == "bool") dt = "int64";
    return full({}, static_cast<double>(v), dt, Device(device_name()));
  }

 private:
  Tensor(int64_t h, int) noexcept : Handle(h) {}
  static std::string shape_json(const Shape& s) { return detail::int_list(s.data(), s.size()); }
};

namespace detail {
inline std::string handle_list(const Tensors& ts) {
  std::vector<int64_t> hs;
  hs.reserve(ts.size());
  for (const Tensor& t : ts) hs.push_back(t.handle());
  return int_list(hs.data(), hs.size());
}

// The grads of `params` (sharing their storage) as a JSON handle list, 0 for
// a param without one; `keep` owns them for the caller's call.
inline std::string grad_list(const Tensors& params, Tensors& keep) {
  std::string list = out_string([&](char** p, std::size_t* n) {
    return enkai_tensor_grad_multi(handle_list(params).c_str(), p, n);
  });
  std::vector<int64_t> hs = parse_int_list(list.data(), list.size());
  for (int64_t h : hs)
    if (h) keep.push_back(Tensor::adopt(h));
  return list;
}
}  // namespace detail

inline Tensor operator+(const Tensor& a, const Tensor& b) { return Tensor::adopt(enkai_tensor_add(a.handle(), b.handle())); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Tensor::adopt(enkai_tensor_sub(a.handle(), b.handle())); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Tensor::adopt(enkai_tensor_mul(a.handle(), b.handle())); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return Tensor::adopt(enkai_tensor_div(a.handle(), b.handle())); }

#define ENKAI_SCALAR_OPERATOR(op)                                                   \
  template <class S, class = std::enable_if_t<std::is_arithmetic_v<S>>>          \
  Tensor operator op(const Tensor& a, S s) { return a op a.scalar_like(s); }      \
  template <class S, class = std::enable_if_t<std::is_arithmetic_v<S>>>          \
  Tensor operator op(S s, const Tensor& a) { return a.scalar_like(s) op a; }
ENKAI_SCALAR_OPERATOR(+)
ENKAI_SCALAR_OPERATOR(-)
ENKAI_SCALAR_OPERATOR(*)
ENKAI_SCALAR_OPERATOR(/)
#undef ENKAI_SCALAR_OPERATOR

inline Tensor operator-(const Tensor& a) { return a * int64_t{-1}; }

/// Matrix product (`*` is elementwise, as in torch).
namespace detail {
// The exception a span function threw on this thread, for the caller of
// the library call that ran it (nothing is thrown across the C ABI).
inline std::exception_ptr& span_failure() {
  thread_local std::exception_ptr e;
  return e;
}
inline int64_t span_call(void* ctx, const int64_t* inputs, std::size_t n, int64_t* out, std::size_t cap) {
  try {
    Tensors in;
    for (std::size_t i = 0; i < n; i++) in.push_back(Tensor::borrow(inputs[i]));
    Tensors res = (*static_cast<std::function<Tensors(const Tensors&)>*>(ctx))(in);
    if (res.size() > cap) throw std::length_error("checkpoint: the function returned more outputs than cap");
    for (std::size_t i = 0; i < res.size(); i++) out[i] = res[i].release();
    return static_cast<int64_t>(res.size());
  } catch (...) {
    span_failure() = std::current_exception();
    return -1;
  }
}
inline void span_release(void* ctx) { delete static_cast<std::function<Tensors(const Tensors&)>*>(ctx); }
}  // namespace detail

/// `torch.utils.checkpoint.checkpoint(fn, inputs...)`: `fn(inputs)` without
/// keeping its activations; the backward pass runs `fn` again (see
/// `enkai_grad_checkpoint`). An exception `fn` throws in this first run is
/// rethrown here; one in the recomputation makes `backward` throw E_AUTOGRAD.
inline Tensors checkpoint(std::function<Tensors(const Tensors&)> fn, const Tensors& inputs, std::size_t cap = 64) {
  auto* owned = new std::function<Tensors(const Tensors&)>(std::move(fn));
  std::vector<int64_t> in;
  for (const Tensor& t : inputs) in.push_back(t.handle());
  std::vector<int64_t> out(cap);
  detail::span_failure() = nullptr;
  int64_t n = enkai_grad_checkpoint(detail::span_call, detail::span_release, owned, in.data(), in.size(), out.data(), cap);
  if (n < 0) {
    if (std::exception_ptr e = std::exchange(detail::span_failure(), nullptr)) std::rethrow_exception(e);
    detail::throw_last_error();
  }
  Tensors res;
  for (int64_t i = 0; i < n; i++) res.push_back(Tensor::adopt(out[i]));
  return res;
}

/// `enkai_op`: PyTorch's op `name` on `inputs` (an empty Tensor stands for
/// an optional input left out), the other arguments as a JSON object.
inline Tensors op(const char* name, const Tensors& inputs, const char* kwargs = nullptr, std::size_t cap = 8) {
  std::vector<int64_t> in;
  for (const Tensor& t : inputs) in.push_back(t.handle());
  std::vector<int64_t> out(cap);
  int64_t n = enkai_op(name, in.data(), in.size(), kwargs, out.data(), cap);
  if (n < 0) detail::throw_last_error();
  Tensors res;
  for (int64_t i = 0; i < n; i++) res.push_back(Tensor::adopt(out[i]));
  return res;
}

inline Tensor matmul(const Tensor& a, const Tensor& b) { return Tensor::adopt(enkai_tensor_matmul(a.handle(), b.handle())); }
inline Tensor concat(const Tensors& ts, int64_t dim) {
  return Tensor::adopt(enkai_tensor_concat(detail::handle_list(ts).c_str(), dim));
}
inline Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim, int64_t mask_type = 2) {
  return Tensor::adopt(enkai_tensor_masked_softmax(x.handle(), mask.handle(), dim, mask_type));
}
inline Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), double eps = 1e-5) {
  return Tensor::adopt(enkai_tensor_layernorm(x.handle(), w.handle(), b.handle(), eps));
}
inline Tensor embedding(const Tensor& w, const Tensor& ids) {
  return Tensor::adopt(enkai_tensor_embedding(w.handle(), ids.handle()));
}
/// Weight-only int8 (README "Quantized tensors"): a Tensor whose dtype() is
/// "qint8" or "q8_0"; linear/matmul take it as the weight, other ops throw E_DTYPE.
inline Tensor quantize_per_channel(const Tensor& x, int64_t axis) {
  return Tensor::adopt(enkai_quantize_per_channel(x.handle(), axis));
}
inline Tensor quantize_q8_0(const Tensor& x) { return Tensor::adopt(enkai_quantize_q8_0(x.handle())); }
inline Tensor dequantize(const Tensor& q) { return Tensor::adopt(enkai_dequantize(q.handle())); }
inline Tensor quantized_scales(const Tensor& q) { return Tensor::adopt(enkai_quantized_scales(q.handle())); }
/// x @ w + b with w laid out [in, out] (F.linear(x, w.T, b)); b may be empty.
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) {
  return Tensor::adopt(enkai_tensor_linear(x.handle(), w.handle(), b.handle()));
}
inline Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  return Tensor::adopt(enkai_tensor_cross_entropy(logits.handle(), targets.handle()));
}

inline void zero_grad(const Tensors& params) {
  detail::check_status(enkai_tensor_zero_grad_multi(detail::handle_list(params).c_str()));
}
/// Throws E_NOT_FINITE when any element is inf or NaN.
inline void check_finite(const Tensors& ts) {
  detail::check_status(enkai_tensor_check_finite_multi(detail::handle_list(ts).c_str()));
}
/// torch.nn.utils.clip_grad_norm_(params, ...): scales the params' grads in
/// place; returns the total norm before clipping.
inline double clip_grad_norm(const Tensors& params, double max_norm, double norm_type = 2.0) {
  Tensors grads;
  std::string list = detail::grad_list(params, grads);
  double total = 0;
  detail::check_status(enkai_tensor_clip_grad_norm_multi(list.c_str(), max_norm, norm_type, &total));
  return total;
}

/// An optimizer handle of any kind (AdamW, Adam, SGD): param groups, lr
/// schedules (set_lr), stepping. The kinds below construct it.
class Optimizer : public detail::Handle<enkai_opt_retain, enkai_tensor_opt_free> {
 public:
  Optimizer() noexcept = default;
  /// Takes ownership of an optimizer handle returned by a C function
  /// (e.g. enkai_checkpoint_load's).
  static Optimizer adopt(int64_t h) { return Optimizer(detail::check(h)); }
  void step() const { detail::check_status(enkai_opt_step(h_)); }
  /// Adds a group with its own lr and weight decay; the other
  /// hyperparameters are the optimizer's.
  void add_param_group(const Tensors& params, double lr, double weight_decay) const {
    detail::check_status(enkai_opt_add_param_group(h_, detail::handle_list(params).c_str(), lr, weight_decay));
  }
  void set_lr(int64_t group, double lr) const { detail::check_status(enkai_opt_set_lr(h_, group, lr)); }
  void step_group(int64_t group) const { detail::check_status(enkai_opt_param_group_step(h_, group)); }

 protected:
  explicit Optimizer(int64_t h) noexcept : Handle(h) {}
};

/// torch.optim.AdamW over `params` (group 0; add more with add_param_group).
class AdamW : public Optimizer {
 public:
  AdamW() noexcept = default;
  explicit AdamW(const Tensors& params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                 double eps = 1e-8, double weight_decay = 1e-2)
      : Optimizer(detail::check(
            enkai_opt_adamw_create(detail::handle_list(params).c_str(), lr, beta1, beta2, eps, weight_decay))) {}
  static AdamW adopt(int64_t h) {
    AdamW o;
    o.h_ = detail::check(h);
    return o;
  }
  void step() const { detail::check_status(enkai_opt_adamw_step(h_)); }
};

/// torch.optim.Adam over `params` (coupled L2 weight decay, amsgrad).
class Adam : public Optimizer {
 public:
  Adam() noexcept = default;
  explicit Adam(const Tensors& params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                double eps = 1e-8, double weight_decay = 0.0, bool amsgrad = false)
      : Optimizer(detail::check(enkai_opt_adam_create(detail::handle_list(params).c_str(), lr, beta1, beta2, eps,
                                                      weight_decay, amsgrad ? 1 : 0))) {}
};

/// torch.optim.SGD over `params` (momentum, dampening, nesterov, weight decay).
class SGD : public Optimizer {
 public:
  SGD() noexcept = default;
  explicit SGD(const Tensors& params, double lr = 1e-3, double momentum = 0.0, double dampening = 0.0,
               double weight_decay = 0.0, bool nesterov = false)
      : Optimizer(detail::check(enkai_opt_sgd_create(detail::handle_list(params).c_str(), lr, momentum, dampening,
                                                     weight_decay, nesterov ? 1 : 0))) {}
};

/// The lr of the schedule `spec` (JSON, see enkai_lr_schedule) after `step`
/// scheduler steps, for an optimizer created with `base_lr`; apply it with set_lr.
inline double lr_schedule(const std::string& spec, int64_t step, double base_lr) {
  double lr = 0;
  detail::check_status(enkai_lr_schedule(spec.c_str(), step, base_lr, &lr));
  return lr;
}

/// torch.amp.GradScaler's rules over a scaler handle.
class GradScaler : public detail::Handle<enkai_amp_scaler_retain, enkai_amp_scaler_free> {
 public:
  explicit GradScaler(double init_scale = 65536.0, double growth_factor = 2.0, double backoff_factor = 0.5,
                      int64_t growth_interval = 2000)
      : Handle(detail::check(enkai_amp_scaler_create(init_scale, growth_factor, backoff_factor, growth_interval))) {}
  Tensor scale(const Tensor& loss) const { return Tensor::adopt(enkai_amp_scale_loss(loss.handle(), h_)); }
  /// Unscales the params' grads in place (torch's unscale_); true when one
  /// held an inf or NaN.
  bool unscale(const Tensors& params) const {
    Tensors grads;
    std::string list = detail::grad_list(params, grads);
    int found = 0;
    detail::check_status(enkai_amp_unscale_grads(list.c_str(), h_, &found));
    return found != 0;
  }
  void update(bool found_inf) const { detail::check_status(enkai_amp_scaler_update(h_, found_inf)); }
  double get_scale() const { return detail::check_value(enkai_amp_scaler_get_scale(h_)); }
  /// Scaled backward, unscale, step unless a grad is not finite, update.
  /// Returns false when the step was skipped.
  bool step(const Tensor& loss, const Tensors& params, const Optimizer& opt) const {
    int rc = enkai_amp_step(loss.handle(), h_, detail::handle_list(params).c_str(), opt.handle());
    if (rc == 1) detail::throw_last_error();
    return rc == 0;
  }
};

/// An autocast region for this thread (bf16 on CPU, fp16 on CUDA, or a given
/// device and dtype), closed when the guard goes out of scope.
class AutocastGuard {
 public:
  AutocastGuard() { detail::check_status(enkai_autocast_enter()); }
  AutocastGuard(const Device& d, const std::string& dtype) {
    detail::check_status(enkai_autocast_enter_device(d.handle(), dtype.c_str()));
  }
  ~AutocastGuard() { enkai_autocast_exit(); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
};

/// `torch::NoGradGuard`: no graph is recorded on this thread while it lives;
/// the previous grad mode comes back when it goes out of scope.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(enkai_set_grad_enabled(0)) {}
  ~NoGradGuard() { enkai_set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  int prev_;
};

inline bool is_grad_enabled() { return enkai_is_grad_enabled() == 1; }

inline void manual_seed(int64_t seed) { detail::check_status(enkai_tensor_manual_seed(seed)); }

/// The TinyLM's parameters (see enkai_tensor_tinylm_init).
inline Tensors tinylm_init(int64_t vocab, int64_t seq, int64_t d_model, int64_t n_layers, int64_t n_heads,
                           const Device& d, int64_t seed) {
  std::string list = detail::out_string([&](char** p, std::size_t* n) {
    return enkai_tensor_tinylm_init(vocab, seq, d_model, n_layers, n_heads, d.handle(), seed, p, n);
  });
  Tensors out;
  for (int64_t h : detail::parse_int_list(list.data(), list.size())) out.push_back(Tensor::adopt(h));
  return out;
}
inline Tensor forward_tinylm(const Tensors& params, span<const uint32_t> inputs, span<const uint32_t> targets,
                             int64_t batch, int64_t seq, int64_t n_heads) {
  return Tensor::adopt(enkai_tensor_forward_tinylm(detail::handle_list(params).c_str(), inputs.data(), inputs.size(),
                                                   targets.data(), targets.size(), batch, seq, n_heads));
}

namespace detail {

[[noreturn]] inline void bad_json(const std::string& s) {
  throw Error(E_INTERNAL, "E_INTERNAL: unexpected JSON from the library: " + s.substr(0, 200));
}

// A JSON reader for what the library writes (serde_json: strings, string
// lists and maps, int lists), so the header needs no JSON library.
class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}
  // Skips whitespace; then whether the next character is `c`.
  bool at(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!at(c)) bad_json(s_);
    i_++;
  }
  // Reads `open`, then items until `close`, calling item() for each.
  template <class F>
  void sequence(char open, char close, F item) {
    expect(open);
    if (at(close)) {
      i_++;
      return;
    }
    for (;;) {
      item();
      if (!at(',')) break;
      i_++;
    }
    expect(close);
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;  // UTF-8 bytes pass through
        continue;
      }
      if (i_ >= s_.size()) bad_json(s_);
      switch (char e = s_[i_++]) {
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': utf8(out, code_point()); break;
        default: out += e;  // \" \\ \/
      }
    }
    expect('"');
    return out;
  }
  int64_t integer() {
    ws();
    const char* begin = s_.c_str() + i_;
    char* end = nullptr;
    long long v = std::strtoll(begin, &end, 10);
    if (end == begin) bad_json(s_);
    i_ += static_cast<std::size_t>(end - begin);
    return v;
  }
  // Skips one value of any kind (a key this header does not know).
  void skip() {
    if (at('"')) {
      string();
    } else if (at('[')) {
      sequence('[', ']', [&] { skip(); });
    } else if (at('{')) {
      sequence('{', '}', [&] {
        string();
        expect(':');
        skip();
      });
    } else {
      while (i_ < s_.size() && std::string(",]} \n\t\r").find(s_[i_]) == std::string::npos) i_++;
    }
  }
  void end() {
    ws();
    if (i_ != s_.size()) bad_json(s_);
  }

 private:
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) i_++;
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++, i_++) {
      const char c = i_ < s_.size() ? s_[i_] : 'x';
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) bad_json(s_);
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }
  // \uXXXX, and the low half of a surrogate pair when it is one.
  uint32_t code_point() {
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(i_, 2, "\\u") == 0) {
      i_ += 2;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4() - 0xDC00);
    }
    return cp;
  }
  static void utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  const std::string& s_;
  std::size_t i_ = 0;
};

// A JSON string literal of UTF-8 text `s`.
inline std::string json_string(const std::string& s) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A C string of `s`: an embedded NUL would cut it short without a word.
inline const char* c_arg(const std::string& s, const char* what) {
  if (s.find('\0') != std::string::npos)
    throw Error(E_INVALID_ARG, std::string("E_INVALID_ARG: ") + what + " contains a NUL byte");
  return s.c_str();
}

}  // namespace detail

/// A tensor's entry in a safetensors header: the format's dtype name (BOOL,
/// U8, I8, I16, I32, I64, F16, BF16, F32, F64, or one the library cannot
/// hold, such as F8_E4M3) and its shape.
struct TensorInfo {
  std::string dtype;
  Shape shape;
};

/// An open safetensors file (enkai_safetensors_open): memory-mapped, its
/// whole header validated. Move-only, since the C ABI has no retain for
/// this kind; the destructor frees the handle. Tensors got from it stay
/// valid after it is gone (each holds the mapping it views).
///
///   enkai::SafetensorsFile f("model.safetensors");
///   for (const std::string& name : f.names()) auto w = f.get(name, cpu);
class SafetensorsFile {
 public:
  SafetensorsFile() noexcept = default;
  explicit SafetensorsFile(const std::string& path)
      : h_(detail::check(enkai_safetensors_open(detail::c_arg(path, "path")))) {}
  SafetensorsFile(SafetensorsFile&& o) noexcept : h_(std::exchange(o.h_, 0)) {}
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, 0);
    }
    return *this;
  }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile() { reset(); }

  /// Tensor names in file (offset) order.
  std::vector<std::string> names() const {
    std::string json = detail::out_string([&](char** p, std::size_t* n) { return enkai_safetensors_names(h_, p, n); });
    std::vector<std::string> out;
    detail::JsonReader r(json);
    r.sequence('[', ']', [&] { out.push_back(r.string()); });
    r.end();
    return out;
  }
  /// Throws E_INVALID_ARG for a name the file does not hold.
  TensorInfo info(const std::string& name) const {
    std::string json = detail::out_string([&](char** p, std::size_t* n) {
      return enkai_safetensors_info(h_, detail::c_arg(name, "name"), p, n);
    });
    TensorInfo out;
    detail::JsonReader r(json);
    r.sequence('{', '}', [&] {
      std::string key = r.string();
      r.expect(':');
      if (key == "dtype") out.dtype = r.string();
      else if (key == "shape") r.sequence('[', ']', [&] { out.shape.push_back(r.integer()); });
      else r.skip();
    });
    r.end();
    return out;
  }
  /// Tensor `name` on device `d`: on the CPU the file's bytes in place
  /// (copy-on-write: writing into it never reaches the file or the other
  /// tensors got from it), on CUDA a copy. Throws E_INVALID_ARG (no such
  /// name), E_DTYPE (a dtype the library cannot hold), E_CKPT_FORMAT.
  Tensor get(const std::string& name, const Device& d) const {
    return Tensor::adopt(enkai_safetensors_get(h_, detail::c_arg(name, "name"), d.handle()));
  }
  /// Every tensor by name, in file order, each as `get` makes it, in one
  /// call (a qint8 tensor's scales come inside it). Throws as `get`.
  std::vector<std::pair<std::string, Tensor>> all(const Device& d) const {
    int64_t n = enkai_safetensors_get_all(h_, d.handle(), nullptr, 0, nullptr, nullptr);
    if (n < 0) detail::throw_last_error();
    std::vector<int64_t> hs(static_cast<std::size_t>(n));
    std::vector<Tensor> ts;
    std::string json = detail::out_string([&](char** p, std::size_t* len) {
      int64_t got = enkai_safetensors_get_all(h_, d.handle(), hs.data(), hs.size(), p, len);
      for (int64_t i = 0; i < got; i++) ts.push_back(Tensor::adopt(hs[static_cast<std::size_t>(i)]));
      return got < 0 ? 1 : 0;
    });
    std::vector<std::pair<std::string, Tensor>> out;
    detail::JsonReader r(json);
    r.sequence('[', ']', [&] {
      std::string name = r.string();
      out.emplace_back(std::move(name), std::move(ts.at(out.size())));
    });
    r.end();
    return out;
  }
  /// The file's `__metadata__` (empty when it has none).
  std::map<std::string, std::string> metadata() const {
    std::string json =
        detail::out_string([&](char** p, std::size_t* n) { return enkai_safetensors_metadata(h_, p, n); });
    std::map<std::string, std::string> out;
    detail::JsonReader r(json);
    r.sequence('{', '}', [&] {
      std::string key = r.string();
      r.expect(':');
      out[key] = r.string();
    });
    r.end();
    return out;
  }

  /// The C handle, still owned by this object.
  int64_t handle() const noexcept { return h_; }
  /// Gives the handle up to the caller (who must free it); leaves this empty.
  int64_t release() noexcept { return std::exchange(h_, 0); }
  /// Frees the handle now; leaves this empty.
  void reset() noexcept {
    if (h_) enkai_safetensors_free(std::exchange(h_, 0));
  }
  explicit operator bool() const noexcept { return h_ != 0; }

 private:
  int64_t h_ = 0;
};

/// Writes `tensors` (name, Tensor pairs: a vector of pairs, a std::map, ...;
/// any dtype, layout and device) to a safetensors file at `path` that the
/// reference `safetensors` package reads, laid out as it lays them out, with
/// `metadata` as its `__metadata__` (none when empty). Atomic: on an error
/// neither the file nor a temporary is left. Throws E_INVALID_ARG (a name
/// twice, or `__metadata__`), E_HANDLE_*, E_CKPT_IO.
template <class Named = std::vector<std::pair<std::string, Tensor>>>
void save_safetensors(const std::string& path, const Named& tensors,
                      const std::map<std::string, std::string>& metadata = {}) {
  std::string names = "[", handles = "[", meta = "{";
  for (const auto& [name, t] : tensors) {
    names += (names.size() > 1 ? "," : "") + detail::json_string(name);
    handles += (handles.size() > 1 ? "," : "") + std::to_string(t.handle());
  }
  for (const auto& [k, v] : metadata) meta += (meta.size() > 1 ? "," : "") + detail::json_string(k) + ":" + detail::json_string(v);
  names += "]";
  handles += "]";
  meta += "}";
  detail::check_status(enkai_safetensors_save(detail::c_arg(path, "path"), names.c_str(), handles.c_str(),
                                              metadata.empty() ? nullptr : meta.c_str()));
}

/// Records the ops this thread runs while alive (enkai_onnx_trace_begin/end):
/// the trace `onnx_export` writes.
class OnnxTrace {
 public:
  OnnxTrace() { detail::check_status(enkai_onnx_trace_begin()); }
  ~OnnxTrace() { enkai_onnx_trace_end(); }
  OnnxTrace(const OnnxTrace&) = delete;
  OnnxTrace& operator=(const OnnxTrace&) = delete;
};

/// Writes the ONNX model of `outputs` computed from `inputs` by this
/// thread's last trace, `params` as initializers under their names;
/// `dynamic_batch` makes dim 0 of each input the symbolic batch. Throws
/// E_UNSUPPORTED (an op with no ONNX form, named), E_INVALID_ARG, E_HANDLE_*,
/// E_CKPT_IO; a failed export leaves no file.
template <class Named = std::vector<std::pair<std::string, Tensor>>>
void onnx_export(const std::string& path, const Tensors& inputs, const Tensors& outputs, const Named& params,
                 int64_t opset = 17, bool dynamic_batch = false) {
  std::string ins = "[", names = "{";
  for (const auto& t : inputs) {
    ins += (ins.size() > 1 ? "," : "") + std::string("{\"handle\":") + std::to_string(t.handle()) +
           (dynamic_batch ? ",\"batch_dim\":0}" : "}");
  }
  for (const auto& [name, t] : params) {
    names += (names.size() > 1 ? "," : "") + detail::json_string(name) + ":" + std::to_string(t.handle());
  }
  ins += "]";
  names += "}";
  detail::check_status(enkai_onnx_export(detail::c_arg(path, "path"), ins.c_str(), detail::handle_list(outputs).c_str(),
                                         names.c_str(), opset));
}

/// Live handles per kind (enkai_tensor_live_*).
struct LiveCounts {
  int64_t tensors, devices, opts, scalers, safetensors;
  bool operator==(const LiveCounts& o) const {
    return tensors == o.tensors && devices == o.devices && opts == o.opts && scalers == o.scalers &&
           safetensors == o.safetensors;
  }
  bool operator!=(const LiveCounts& o) const { return !(*this == o); }
};
inline LiveCounts live() {
  return {enkai_tensor_live_tensors(), enkai_tensor_live_devices(), enkai_tensor_live_opts(),
          enkai_tensor_live_scalers(), enkai_tensor_live_safetensors()};
}

/// The library's ABI version (major, minor, patch).
struct Version {
  unsigned major, minor, patch;
};
inline Version abi_version() {
  uint64_t v = enkai_abi_version();
  return {static_cast<unsigned>(v >> 32), static_cast<unsigned>((v >> 16) & 0xffff), static_cast<unsigned>(v & 0xffff)};
}

}  // namespace enkai

#endif  // ENKAI_TENSOR_HPP
