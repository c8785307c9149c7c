// c10d's NCCL process group for CUDA tensors, in a translation unit of its
// own: it needs the CUDA and NCCL headers (from the pip packages nvidia-nccl,
// nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-cuda-cccl), which the Gloo
// side does not. build.rs compiles it, and defines ENKAI_WITH_NCCL for
// dist_shim.cpp, only where those headers are installed.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>

namespace enkai {

// A NCCL group over `store` (keys already prefixed by the caller). Throws as
// c10d does; dist_shim.cpp catches.
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                            std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
}

}  // namespace enkai
