// What both C++ shims share: no exception crosses the C ABI. guarded(f) runs
// f and returns NULL, or a malloc'ed message (freed by the Rust caller) for
// whatever f threw; c10 messages are taken without their C++ backtrace.
#pragma once
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace enkai {

// The first byte of a message from a c10::LinAlgError (a singular or
// non-positive-definite input): the Rust side strips it.
constexpr const char* LINALG_MARK = "\x01";

inline char* dup(const char* s) {
  size_t n = std::strlen(s) + 1;
  char* p = static_cast<char*>(std::malloc(n));
  if (p) std::memcpy(p, s, n);
  return p;
}

template <typename F>
char* guarded(F f) {
  try {
    f();
    return nullptr;
  } catch (const c10::LinAlgError& e) {
    // Marked for the Rust side, which reports it as E_LINALG (shim_error).
    std::string m = std::string(LINALG_MARK) + e.what_without_backtrace();
    return dup(m.c_str());
  } catch (const c10::Error& e) {
    return dup(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return dup(e.what());
  } catch (...) {
    return dup("unknown C++ exception");
  }
}

}  // namespace enkai
