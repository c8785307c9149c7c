// Declaration-only stand-in for gloo's Context, enough to compile
// ProcessGroupGloo.hpp against libtorch's own gloo (the PyPI wheel ships
// libtorch_cpu with gloo inside, but not gloo's headers). ProcessGroupGloo
// holds contexts only through std::shared_ptr, so their size and layout never
// matter here; the inline ProcessGroupGloo::setTimeout calls setTimeout, which
// libtorch exports. No constructor is usable: only libtorch makes contexts.
#pragma once
#include <chrono>

namespace gloo {
class Context {
 public:
  Context() = delete;
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo
