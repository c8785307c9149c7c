// Declaration-only stand-in: ProcessGroupGloo.hpp holds these only through pointers.
#pragma once

namespace gloo {
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo
