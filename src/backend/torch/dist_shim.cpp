// PyTorch's c10d process groups behind a C interface: a TCPStore or FileStore
// rendezvous, ProcessGroupGloo for CPU tensors and, where built
// (ENKAI_WITH_NCCL, see dist_nccl.cpp), ProcessGroupNCCL for CUDA tensors:
// the objects torch.distributed builds in Python. Compiled with -DUSE_C10D_GLOO against
// the wheel's c10d headers plus the declaration-only gloo headers in
// gloo-decl/ (the wheel has libtorch's gloo but not its headers); every gloo
// type stays behind a pointer here, and libtorch allocates what we create
// with sizes checked by enkai_shim_gloo_layout (see tests).
//
// Every function catches all exceptions: nothing is thrown across the C ABI.
// Errors come back as a malloc'ed message (NULL on success) that the caller
// frees; c10 messages are taken without their C++ backtrace.
#include "shim_guard.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#ifdef ENKAI_WITH_NCCL
namespace enkai {
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                            std::chrono::milliseconds timeout);
}
#endif

namespace {

using c10d::ProcessGroupGloo;

using enkai::guarded;

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<ProcessGroupGloo> gloo;
  c10::intrusive_ptr<c10d::Backend> nccl;  // null without NCCL or CUDA
  std::chrono::milliseconds timeout;

  // NCCL for CUDA tensors when there is a NCCL group, Gloo otherwise (Gloo
  // also handles CUDA tensors, through host copies).
  c10d::Backend& for_tensor(const at::Tensor& t) {
    if (nccl && t.is_cuda()) return *nccl;
    return *gloo;
  }
};

void wait(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  if (!work->wait(timeout)) TORCH_CHECK(false, "the collective was aborted");
}

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case 1: return c10d::ReduceOp::MAX;
    case 2: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM;
  }
}

// The tensors flattened into one contiguous buffer (the tensor itself when
// it is alone and contiguous), as DDP's buckets are.
at::Tensor flatten(at::Tensor* const* ts, size_t n) {
  if (n == 1 && ts[0]->is_contiguous()) return *ts[0];
  std::vector<at::Tensor> flat;
  flat.reserve(n);
  for (size_t i = 0; i < n; i++) flat.push_back(ts[i]->reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, at::Tensor* const* ts, size_t n) {
  if (n == 1 && flat.is_same(*ts[0])) return;
  int64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t k = ts[i]->numel();
    ts[i]->copy_(flat.narrow(0, off, k).view(ts[i]->sizes()));
    off += k;
  }
}

}  // namespace

extern "C" {

// Creates the store and the Gloo process group. store_kind: 0 = TCPStore at
// host:port (this process hosts it when is_server), 1 = FileStore at path.
// Keys go under prefix. The Gloo devices are one per interface in ifaces
// (GLOO_SOCKET_IFNAME), or else one bound to bind_host. On success *out is
// the group, freed with enkai_shim_pg_destroy.
char* enkai_shim_pg_create(int store_kind, const char* host, int port, int is_server, const char* path,
                           const char* prefix, int world, int rank, int64_t timeout_ms,
                           const char* const* ifaces, size_t n_ifaces, const char* bind_host, void** out) {
  return guarded([&] {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    c10::intrusive_ptr<c10d::Store> store;
    if (store_kind == 1) {
      store = c10::make_intrusive<c10d::FileStore>(path, world);
    } else {
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(port);
      o.isServer = is_server != 0;
      if (o.isServer) o.numWorkers = world;
      o.waitWorkers = false;  // the group's own rendezvous waits for every rank, bounded by timeout
      o.timeout = timeout;
      o.multiTenant = true;  // as torch.distributed's env:// rendezvous
      store = c10::make_intrusive<c10d::TCPStore>(host, o);
    }
    store->setTimeout(timeout);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
    auto options = ProcessGroupGloo::Options::create(timeout);
    for (size_t i = 0; i < n_ifaces; i++) options->devices.push_back(ProcessGroupGloo::createDeviceForInterface(ifaces[i]));
    if (n_ifaces == 0) options->devices.push_back(ProcessGroupGloo::createDeviceForHostname(bind_host));
    auto gloo = c10::make_intrusive<ProcessGroupGloo>(prefixed, rank, world, options);
    c10::intrusive_ptr<c10d::Backend> nccl;
#ifdef ENKAI_WITH_NCCL
    // Communicators are created lazily, at a group's first CUDA collective.
    if (at::hasCUDA())
      nccl = enkai::make_nccl(c10::make_intrusive<c10d::PrefixStore>("nccl/", prefixed), rank, world, timeout);
#endif
    *out = new Group{store, gloo, nccl, timeout};
  });
}

void enkai_shim_pg_destroy(void* g) {
  try {
    delete static_cast<Group*>(g);
  } catch (...) {
  }
}

// All-reduces the tensors as one flat buffer (one bucket); op 0 = sum, 1 =
// max, 2 = min. With prescale != 1 the buffer is first multiplied by it,
// which is how DDP averages (grad * 1/world, then a sum).
char* enkai_shim_pg_allreduce(void* g, at::Tensor* const* ts, size_t n, int op, double prescale) {
  return guarded([&] {
    auto* group = static_cast<Group*>(g);
    at::NoGradGuard no_grad;
    at::Tensor flat = flatten(ts, n);
    if (prescale != 1.0) flat.mul_(prescale);
    std::vector<at::Tensor> list{flat};
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    o.timeout = group->timeout;
    wait(group->for_tensor(flat).allreduce(list, o), group->timeout);
    unflatten(flat, ts, n);
  });
}

// Overwrites the tensors with root's (as one flat buffer).
char* enkai_shim_pg_broadcast(void* g, at::Tensor* const* ts, size_t n, int root) {
  return guarded([&] {
    auto* group = static_cast<Group*>(g);
    at::NoGradGuard no_grad;
    at::Tensor flat = flatten(ts, n);
    std::vector<at::Tensor> list{flat};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = group->timeout;
    wait(group->for_tensor(flat).broadcast(list, o), group->timeout);
    unflatten(flat, ts, n);
  });
}

// *out = a new tensor [world, *t.shape] holding every rank's t, in rank order.
char* enkai_shim_pg_allgather(void* g, at::Tensor* t, int world, at::Tensor** out) {
  return guarded([&] {
    auto* group = static_cast<Group*>(g);
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> in{t->contiguous()};
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int i = 0; i < world; i++) outs[0].push_back(at::empty_like(in[0]));
    c10d::AllgatherOptions o;
    o.timeout = group->timeout;
    wait(group->for_tensor(in[0]).allgather(outs, in, o), group->timeout);
    *out = new at::Tensor(at::stack(outs[0]));
  });
}

char* enkai_shim_pg_barrier(void* g) {
  return guarded([&] {
    auto* group = static_cast<Group*>(g);
    c10d::BarrierOptions o;
    o.timeout = group->timeout;
    wait(group->gloo->barrier(o), group->timeout);
  });
}

// Layout check for the declaration-only gloo headers: our sizeof of
// ProcessGroupGloo and its Options, and the usable size of the blocks
// libtorch itself allocates for them (a one-rank group split off from a
// one-rank group over a HashStore, and Options::create_default). malloc
// rounds a request n up to a usable size of ((n + 8 + 15) & ~15) - 8.
char* enkai_shim_gloo_layout(size_t* ours_pg, size_t* ours_opts, size_t* lib_pg, size_t* lib_opts) {
  return guarded([&] {
    *ours_pg = sizeof(ProcessGroupGloo);
    *ours_opts = sizeof(ProcessGroupGloo::Options);
    auto lib_options = ProcessGroupGloo::Options::create_default();
    *lib_opts = malloc_usable_size(lib_options.get());
    auto store = c10::make_intrusive<c10d::HashStore>();
    auto options = ProcessGroupGloo::Options::create();
    options->devices.push_back(ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("a", store), 0, 1, options);
    auto split = pg->split(c10::make_intrusive<c10d::PrefixStore>("b", store), {0},
                           c10::static_intrusive_pointer_cast<c10d::Backend::Options>(options));
    *lib_pg = malloc_usable_size(split.get());
  });
}

}  // extern "C"
