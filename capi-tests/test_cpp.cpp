// The C++ header (include/enkai_tensor.hpp) as a program would use it, under
// valgrind: RAII semantics (copy = retain, move, release/adopt), errors as
// exceptions with the right code, operators, spans, an autocast guard, and a
// small MLP trained with AdamW and a GradScaler, and a safetensors round trip
// through SafetensorsFile and save_safetensors (names and metadata with
// escapes and non-ASCII text). Every handle is freed by a destructor: the
// live counters end where they started.
#include "enkai_tensor.hpp"
#include "dlpack_min.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
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

// save_safetensors, then SafetensorsFile's names, info, get and metadata read
// it back (python/tests/test_cpp_safetensors.py checks the same calls
// against the reference `safetensors` package).
// Quantized weights through the C++ wrapper: RAII frees them, the products take them.
static void quantized(const enkai::Device& cpu) {
  std::vector<float> w(64 * 32), x(3 * 32);
  for (std::size_t i = 0; i < w.size(); i++) w[i] = float(int(i * 37 % 29) - 14) / 7.0f;
  for (std::size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 11 % 17) - 8) / 4.0f;
  auto wt = enkai::Tensor::from_data(w, {64, 32}, cpu), xt = enkai::Tensor::from_data(x, {3, 32}, cpu);
  auto q = enkai::quantize_q8_0(wt), qc = enkai::quantize_per_channel(wt, 0);
  CHECK(q.dtype() == "q8_0" && qc.dtype() == "qint8");
  auto y = enkai::op("linear", {xt, q}), yc = enkai::op("linear", {xt, qc});
  auto ref = enkai::op("linear", {xt, wt});
  auto a = y[0].to_vector<float>(), b = yc[0].to_vector<float>(), r = ref[0].to_vector<float>();
  bool close = a.size() == r.size() && b.size() == r.size();
  for (std::size_t i = 0; close && i < r.size(); i++) close = std::fabs(a[i] - r[i]) < 0.5f && std::fabs(b[i] - r[i]) < 0.5f;
  CHECK(close);
  CHECK(enkai::dequantize(q).shape() == (enkai::Shape{64, 32}));
  CHECK_THROWS(q + xt, E_DTYPE);
}

static void safetensors(const enkai::Device& cpu) {
  const enkai::LiveCounts base = enkai::live();
  char tmpl[] = "/tmp/enkai_cpp_st_XXXXXX";
  CHECK(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, path = dir + "/t.safetensors";
  // JSON escapes both ways: quotes, backslashes, control characters, 2-, 3- and 4-byte UTF-8.
  const std::string odd = "h.0.\"q\"\\b\t\n\x01 \xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80";
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "a \"quoted\" \\ value\n\xc3\xbc"}};
  {
    const float w[6] = {1, 2, 3, 4, 5, -6.5f};
    auto fp32 = enkai::Tensor::from_data<float>(w, {2, 3}, cpu);
    auto ids = enkai::Tensor::from_data(std::vector<int64_t>{-1, 0, 1LL << 40}, {3}, cpu);
    auto half = fp32.transpose(0, 1).to_dtype("bf16");  // not contiguous: written contiguous
    const bool b[4] = {true, false, false, true};
    auto flags = enkai::Tensor::from_data<bool>(b, {2, 2}, cpu);
    enkai::save_safetensors(path, std::vector<std::pair<std::string, enkai::Tensor>>{
                                      {"w", fp32}, {odd, ids}, {"half", half}, {"flags", flags}},
                            meta);
  }
  CHECK(enkai::live() == base);
  {
    enkai::SafetensorsFile f(path);
    CHECK(enkai::live().safetensors == base.safetensors + 1);
    // The reference layout: largest alignment first, then by name.
    CHECK((f.names() == std::vector<std::string>{odd, "w", "half", "flags"}));
    const enkai::TensorInfo i = f.info("half");
    CHECK(i.dtype == "BF16" && (i.shape == enkai::Shape{3, 2}));
    CHECK(f.info(odd).dtype == "I64" && f.info("flags").dtype == "BOOL" && (f.info("w").shape == enkai::Shape{2, 3}));
    CHECK(f.metadata() == meta);
    auto w = f.get("w", cpu);
    CHECK(w.dtype() == "fp32" && (w.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
    CHECK((f.get(odd, cpu).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 1LL << 40}));
    CHECK((f.get("half", cpu).to_dtype("fp32").to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, -6.5f}));
    CHECK(f.get("flags", cpu).to_dtype("int64").sum().item() == 2.0);
    CHECK_THROWS(f.get("nope", cpu), E_INVALID_ARG);
    CHECK_THROWS(f.info("nope"), E_INVALID_ARG);
    {
      // All at once: the same names in the same order, the same values.
      auto all = f.all(cpu);
      CHECK(all.size() == 4 && all[0].first == odd && all[1].first == "w" && all[3].first == "flags");
      CHECK((all[0].second.to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 1LL << 40}));
      CHECK((all[1].second.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
      CHECK(enkai::live().tensors >= base.tensors + 5);
    }
    CHECK_THROWS(f.get(std::string("w\0x", 3), cpu), E_INVALID_ARG);

    // Move-only: the handle moves; a tensor outlives the file it came from.
    enkai::SafetensorsFile g = std::move(f);
    CHECK(!f && g && enkai::live().safetensors == base.safetensors + 1);
    g.reset();
    CHECK(enkai::live().safetensors == base.safetensors && w.sum().item() == 8.5);
    CHECK_THROWS(g.names(), E_HANDLE_INVALID);
  }
  CHECK_THROWS(enkai::SafetensorsFile(dir + "/missing.safetensors"), E_CKPT_MISSING);
  std::ofstream(dir + "/junk.safetensors") << "not a safetensors file";
  CHECK_THROWS(enkai::SafetensorsFile(dir + "/junk.safetensors"), E_CKPT_FORMAT);
  {
    auto t = enkai::Tensor::zeros({1}, "fp32", cpu);
    const std::string dup = dir + "/dup.safetensors";
    CHECK_THROWS(enkai::save_safetensors(dup, std::vector<std::pair<std::string, enkai::Tensor>>{{"a", t}, {"a", t}}),
                 E_INVALID_ARG);
    CHECK(!std::filesystem::exists(dup));  // atomic: nothing left behind
    std::map<std::string, enkai::Tensor> none;
    enkai::save_safetensors(dir + "/empty.safetensors", none);
    enkai::SafetensorsFile e(dir + "/empty.safetensors");
    CHECK(e.names().empty() && e.metadata().empty());
  }
  std::filesystem::remove_all(dir);
  CHECK(enkai::live() == base);
}

// SGD and Adam through the base Optimizer's methods, with an lr schedule
// applied by set_lr; refusals throw with their codes.
static void optimizers(const enkai::Device& cpu) {
  auto w = enkai::Tensor::full({3}, 2.0, "fp32", cpu).require_grad();
  auto v = enkai::Tensor::full({3}, -1.0, "fp32", cpu).require_grad();
  enkai::SGD sgd({w}, 0.1, /*momentum=*/0.9, /*dampening=*/0.0, /*weight_decay=*/0.0, /*nesterov=*/true);
  enkai::Adam adam({v}, 0.05, 0.9, 0.999, 1e-8, 0.0, /*amsgrad=*/true);
  const std::string spec = R"({"kind":"cosine","warmup_steps":2,"total_steps":20,"min_lr":0.001})";
  CHECK(enkai::lr_schedule(spec, 0, 0.1) == 0.0);
  for (int step = 0; step < 20; step++) {
    sgd.set_lr(0, enkai::lr_schedule(spec, step, 0.1));
    enkai::zero_grad({w, v});
    ((w * w).sum() + (v * v).sum()).backward();
    sgd.step();
    adam.step();
  }
  CHECK((w * w).sum().item() < 0.5 * 12.0);
  CHECK((v * v).sum().item() < 3.0);
  CHECK_THROWS(enkai::SGD({w}, -1.0), E_INVALID_ARG);
  CHECK_THROWS(enkai::SGD({w}, 0.1, 0.0, 0.0, 0.0, true), E_INVALID_ARG);
  CHECK_THROWS(enkai::Adam({v}, 0.1, 1.0), E_INVALID_ARG);
  CHECK_THROWS(enkai::lr_schedule("{}", 0, 0.1), E_INVALID_ARG);
}

// A checkpointed span (enkai::checkpoint over enkai_grad_checkpoint): the
// same gradients as without it, the lambda (and what it captures) released
// by the library, and an exception in the span rethrown to the caller.
static void grad_checkpoint(const enkai::Device& cpu) {
  auto x = enkai::Tensor::randn({4, 3}, "fp64", cpu).require_grad();
  auto w = enkai::Tensor::randn({3, 3}, "fp64", cpu).require_grad();
  auto span = [w](const enkai::Tensors& in) { return enkai::Tensors{enkai::matmul(in[0], w).tanh()}; };
  auto y = enkai::checkpoint(span, {x});
  CHECK(y.size() == 1 && y[0].requires_grad());
  (y[0] * y[0]).sum().backward();
  auto gx = x.grad(), gw = w.grad();
  x.zero_grad();
  w.zero_grad();
  auto plain = span({x})[0];
  (plain * plain).sum().backward();
  CHECK(((x.grad() - gx) * (x.grad() - gx)).sum().item() == 0.0);
  CHECK(((w.grad() - gw) * (w.grad() - gw)).sum().item() == 0.0);
  bool rethrown = false;
  try {
    enkai::checkpoint([](const enkai::Tensors&) -> enkai::Tensors { throw std::out_of_range("in the span"); }, {x});
  } catch (const std::out_of_range&) {
    rethrown = true;
  }
  CHECK(rethrown);
}

// ONNX export through the C++ wrapper: a traced linear + relu is written; an
// op with no lowering throws E_UNSUPPORTED and leaves no file.
static void onnx_export(const enkai::Device& cpu) {
  char tmpl[] = "/tmp/enkai_cpp_onnx_XXXXXX";
  CHECK(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, path = dir + "/m.onnx";
  std::vector<float> w(12, 0.5f), x(8, 1.0f);
  auto wt = enkai::Tensor::from_data(w, {3, 4}, cpu), xt = enkai::Tensor::from_data(x, {2, 4}, cpu);
  enkai::Tensors ys;
  {
    enkai::OnnxTrace trace;
    ys = enkai::op("relu", enkai::op("linear", {xt, wt}));
  }
  enkai::onnx_export(path, {xt}, ys, std::vector<std::pair<std::string, enkai::Tensor>>{{"fc.weight", wt}}, 17, true);
  CHECK(std::filesystem::file_size(path) > 100);
  std::filesystem::remove(path);
  {
    enkai::OnnxTrace trace;
    ys = enkai::op("nonzero", {xt});
  }
  CHECK_THROWS(enkai::onnx_export(path, {xt}, ys, std::vector<std::pair<std::string, enkai::Tensor>>{}), E_UNSUPPORTED);
  CHECK(!std::filesystem::exists(path));
  std::filesystem::remove(dir);
  CHECK(enkai_onnx_trace_clear() == 0);
}

int main() {
  const enkai::LiveCounts base = enkai::live();
  {
    enkai::Device cpu("cpu");
    semantics(cpu);
    train(cpu);
    optimizers(cpu);
    grad_checkpoint(cpu);
    safetensors(cpu);
    quantized(cpu);
    onnx_export(cpu);
  }
  CHECK(enkai::live() == base);
  std::printf("capi-cpp: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
