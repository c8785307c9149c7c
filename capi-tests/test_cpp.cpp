// The C++ header (include/enkai_tensor.hpp) as a program would use it, under
// valgrind: RAII semantics (copy = retain, move, release/adopt), errors as
// exceptions with the right code, operators, spans, an autocast guard, and a
// small MLP trained with AdamW and a GradScaler. Every handle is freed by a
// destructor: the live counters end where they started.
#include "enkai_tensor.hpp"
#include "dlpack_min.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static int passed, failed;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (cond) {                                                                      \
      passed++;                                                                      \
    } else {                                                                         \
      failed++;                                                                      \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);  \
    }                                                                                \
  } while (0)

// `expr` throws enkai::Error with code `want`, and its message starts with the code's name.
#define CHECK_THROWS(expr, want)                                                      \
  do {                                                                                \
    bool thrown_ = false;                                                             \
    try {                                                                             \
      (void)(expr);                                                                   \
    } catch (const enkai::Error& e) {                                                 \
      thrown_ = e.code() == (want) && std::strncmp(e.what(), #want ": ", std::strlen(#want ": ")) == 0; \
      if (!thrown_) std::fprintf(stderr, "%s:%d: got %d %s\n", __FILE__, __LINE__, e.code(), e.what()); \
    }                                                                                 \
    CHECK(thrown_);                                                                   \
  } while (0)

static void semantics(const enkai::Device& cpu) {
  const enkai::LiveCounts base = enkai::live();
  {
    auto a = enkai::Tensor::ones({2, 3}, "fp32", cpu);
    enkai::Tensor b = a;  // retain: one more reference, not one more handle
    CHECK(b.handle() == a.handle());
    CHECK(enkai::live().tensors == base.tensors + 1);
    enkai::Tensor c = std::move(b);  // move: b is empty, nothing freed
    CHECK(!b && c.handle() == a.handle());
    a = a;  // self-assignment keeps the reference
    CHECK(a.numel() == 6);
    c = enkai::Tensor::zeros({1}, "fp32", cpu);  // the old reference is freed, a stays
    CHECK(a.numel() == 6 && c.numel() == 1);
    int64_t raw = c.release();  // now ours to free through the C API
    CHECK(!c && enkai_tensor_free(raw) == 0);
    CHECK_THROWS(enkai::Tensor::adopt(raw).numel(), E_HANDLE_STALE);
    auto borrowed = enkai::Tensor::borrow(a.handle());
    CHECK(borrowed.handle() == a.handle());
  }
  CHECK(enkai::live() == base);

  // Errors carry the code and the library's message.
  auto x = enkai::Tensor::randn({2, 3}, "fp32", cpu);
  CHECK_THROWS(enkai::matmul(x, x), E_SHAPE);
  CHECK_THROWS(enkai::Tensor::zeros({2}, "fp31", cpu), E_INVALID_ARG);
  CHECK_THROWS(enkai::Tensor::randn({2}, "int64", cpu), E_DTYPE);
  CHECK_THROWS(enkai::Device("tpu"), E_INVALID_ARG);
  CHECK_THROWS(x.reshape({4}), E_SHAPE);

  // Spans in and out, metadata, operators with scalars (torch's promotion).
  const float data[6] = {1, 2, 3, 4, 5, 6};
  auto t = enkai::Tensor::from_data<float>(data, {2, 3}, cpu);
  CHECK((t.shape() == enkai::Shape{2, 3}) && t.dtype() == "fp32" && t.device_name() == "cpu");
  std::array<float, 6> out{};
  t.copy_to<float>(out);
  CHECK(out[5] == 6.0f);
  auto u = (t * 2.0f + 1.0f) / 2 - t;  // = 0.5 everywhere
  CHECK(std::fabs(u.sum().item() - 3.0) < 1e-6);
  auto neg = -t;
  CHECK(neg.to_vector<float>()[0] == -1.0f);
  auto ints = enkai::Tensor::from_data(std::vector<int64_t>{1, 2, 3}, {3}, cpu);
  CHECK((ints * 2).dtype() == "int64" && (ints * 0.5).dtype() == "fp32" && (1.5 + ints).dtype() == "fp32");
  CHECK(enkai::matmul(t, t.transpose(0, 1)).to_vector<float>()[0] == 14.0f);
  CHECK(enkai::concat({t, t}, 0).numel() == 12);
  CHECK(t.slice(1, 0, 3, 2).numel() == 4);
  CHECK(enkai::abi_version().major == enkai_abi_version() >> 32);

  // DLPack: an export re-imported shares the memory; the export counts until freed.
  {
    DLManagedTensorVersioned* m = t.to_dlpack();
    CHECK(m->dl_tensor.ndim == 2 && static_cast<float*>(m->dl_tensor.data)[5] == 6.0f);
    auto back = enkai::Tensor::from_dlpack(m);
    CHECK(back.to_vector<float>()[5] == 6.0f);
    CHECK_THROWS(enkai::Tensor::from_dlpack(nullptr), E_NULL_POINTER);
    auto g = enkai::Tensor::zeros({1}, "fp32", cpu).require_grad();
    CHECK_THROWS(g.to_dlpack(), E_AUTOGRAD);
  }
}

// y = sum of the inputs' squares, learnt by a 2-layer MLP.
static void train(const enkai::Device& cpu) {
  enkai::manual_seed(7);
  const int64_t n = 64, d = 4, h = 16;
  auto x = enkai::Tensor::randn({n, d}, "fp32", cpu);
  auto y = (x * x).sum(1, true);
  auto w1 = (enkai::Tensor::randn({d, h}, "fp32", cpu) * 0.5).require_grad();
  auto b1 = enkai::Tensor::zeros({h}, "fp32", cpu).require_grad();
  auto w2 = (enkai::Tensor::randn({h, 1}, "fp32", cpu) * 0.5).require_grad();
  auto b2 = enkai::Tensor::zeros({1}, "fp32", cpu).require_grad();
  const enkai::Tensors params{w1, b1, w2, b2};  // copies: one more reference each
  enkai::AdamW opt(params, 0.02);
  enkai::GradScaler scaler(1024.0);
  double first = 0, last = 0;
  for (int step = 0; step < 60; step++) {
    enkai::zero_grad(params);
    enkai::Tensor loss;
    if (step % 2 == 0) {
      enkai::AutocastGuard autocast;  // bf16 matmuls on CPU, closed at the brace
      auto pred = enkai::linear(enkai::linear(x, w1, b1).relu(), w2, b2);
      CHECK(pred.dtype() == "bf16");
      auto diff = pred.to_dtype("fp32") - y;
      loss = (diff * diff).mean();
    } else {
      auto pred = enkai::linear(enkai::linear(x, w1, b1).relu(), w2, b2);
      auto diff = pred - y;
      loss = (diff * diff).mean();
    }
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 3 == 0) {
      CHECK(scaler.step(loss, params, opt));
    } else {
      loss.backward();
      CHECK(enkai::clip_grad_norm(params, 10.0) >= 0);
      opt.step();
    }
  }
  std::printf("cpp: MLP loss %.4f -> %.4f over 60 steps (scale %.0f)\n", first, last, scaler.get_scale());
  CHECK(last < first * 0.5);
  CHECK(w1.grad().numel() == h * d);
  {
    enkai::NoGradGuard no_grad;  // inference: no graph, so nothing to run backward through
    CHECK(!enkai::is_grad_enabled());
    auto out = (w1 * 2.0).sum();
    EnkaiErrorCode code = E_OK;
    try {
      out.backward();
    } catch (const enkai::Error& e) {
      code = e.code();
    }
    CHECK(code == E_AUTOGRAD);
  }
  CHECK(enkai::is_grad_enabled());
}

int main() {
  const enkai::LiveCounts base = enkai::live();
  {
    enkai::Device cpu("cpu");
    semantics(cpu);
    train(cpu);
  }
  CHECK(enkai::live() == base);
  std::printf("capi-cpp: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
