// Lists a safetensors file's tensors (name, dtype, shape, sum) and metadata
// through the C++ API's SafetensorsFile, and with OUT writes every tensor
// again with save_safetensors, the metadata kept and one key added: the
// tensors read from the file are views of it (zero-copy), written straight
// back out. python/tests/test_cpp_safetensors.py checks both against the
// reference `safetensors` package.
//
//   safetensors_inspect FILE [OUT]
//   make build/examples/safetensors_inspect
#include "enkai_tensor.hpp"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char** argv) try {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: safetensors_inspect FILE [OUT]\n");
    return 2;
  }
  enkai::Device cpu("cpu");
  enkai::SafetensorsFile file(argv[1]);
  std::vector<std::pair<std::string, enkai::Tensor>> tensors;
  for (const std::string& name : file.names()) {
    const enkai::TensorInfo info = file.info(name);
    std::string shape;
    for (int64_t d : info.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    auto t = file.get(name, cpu);
    // The sum in fp64, exact for every integer dtype here.
    std::printf("%s\t%s\t[%s]\t%.17g\n", name.c_str(), info.dtype.c_str(), shape.c_str(),
                t.to_dtype("fp64").sum().item());
    tensors.emplace_back(name, std::move(t));
  }
  auto metadata = file.metadata();
  for (const auto& [key, value] : metadata) std::printf("__metadata__\t%s\t%s\n", key.c_str(), value.c_str());
  if (argc == 3) {
    metadata["written_by"] = "safetensors_inspect";
    enkai::save_safetensors(argv[2], tensors, metadata);
  }
  return 0;
} catch (const enkai::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
