// Trains a small MLP to predict the sum of its inputs' squares, through the
// header-only C++ API (include/enkai_tensor.hpp). Copy this to start a C++
// program: handles free themselves, failures throw enkai::Error.
//
//   make example-cpp
// or by hand, from the repository root:
//   g++ -std=c++17 -Iinclude examples-cpp/train_mlp.cpp -Ltarget/release -lenkai_tensor -Wl,-rpath,$PWD/target/release
#include "enkai_tensor.hpp"

#include <cstdio>

int main() try {
  enkai::Device cpu("cpu");  // or "cuda", "auto"
  enkai::manual_seed(0);

  // Data: 256 rows of 8 features; the target is each row's sum of squares.
  auto x = enkai::Tensor::randn({256, 8}, "fp32", cpu);
  auto y = (x * x).sum(1, /*keepdim=*/true);

  // Parameters, laid out [in, out] as enkai::linear expects.
  auto w1 = (enkai::Tensor::randn({8, 32}, "fp32", cpu) * 0.3).require_grad();
  auto b1 = enkai::Tensor::zeros({32}, "fp32", cpu).require_grad();
  auto w2 = (enkai::Tensor::randn({32, 1}, "fp32", cpu) * 0.3).require_grad();
  auto b2 = enkai::Tensor::zeros({1}, "fp32", cpu).require_grad();
  const enkai::Tensors params{w1, b1, w2, b2};
  enkai::AdamW opt(params, /*lr=*/0.05);

  for (int step = 1; step <= 300; step++) {
    enkai::zero_grad(params);
    auto pred = enkai::linear(enkai::linear(x, w1, b1).relu(), w2, b2);
    auto loss = ((pred - y) * (pred - y)).mean();
    loss.backward();
    enkai::clip_grad_norm(params, 1.0);
    opt.step();
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item());
  }
  auto live = enkai::live();
  std::printf("live handles now: %lld tensors (freed at the end of main)\n", static_cast<long long>(live.tensors));
  return 0;
} catch (const enkai::Error& e) {
  std::fprintf(stderr, "enkai error %d: %s\n", static_cast<int>(e.code()), e.what());
  return 1;
}
