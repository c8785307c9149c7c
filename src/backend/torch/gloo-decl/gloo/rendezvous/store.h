// Declaration-only stand-in for gloo's rendezvous Store: the base class of
// ProcessGroupGloo::GlooStore, which only libtorch instantiates. The
// constructor is declared and never defined, so creating a GlooStore on this
// side fails at link time instead of building a vtable that disagrees with
// libtorch's gloo.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace gloo {
namespace rendezvous {
class Store {
 public:
  Store();
  virtual ~Store();
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) = 0;
};
}  // namespace rendezvous
}  // namespace gloo
