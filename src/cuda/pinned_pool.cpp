// The pinned result pool (core::HostBlockPool with registered blocks) and HostPins (operands
// pinned in place); see pinned_pool.hpp.
#include "cuda/pinned_pool.hpp"

#include <cstdlib>

namespace portmat::cuda {

namespace {

// cuMemHostRegister / cuMemHostUnregister with `ctx` current on the calling thread (which may be
// a Python thread dropping an array, with no context of its own); the thread's own is restored.
CUresult registered(const CuApi& cu, CUcontext ctx, void* p, std::size_t bytes, unsigned flags) {
  CUcontext prev = nullptr;
  cu.CtxPushCurrent(ctx);
  const CUresult r = cu.MemHostRegister(p, bytes, flags);
  cu.CtxPopCurrent(&prev);
  return r;
}
void unregistered(const CuApi& cu, CUcontext ctx, void* p) {
  CUcontext prev = nullptr;
  cu.CtxPushCurrent(ctx);
  cu.MemHostUnregister(p);
  cu.CtxPopCurrent(&prev);
}

}  // namespace

std::shared_ptr<core::HostBlockPool> make_pinned_pool(const CuApi& cu, CUcontext ctx, std::size_t keep,
                                                      std::size_t max_live, FaultIn fault_in) {
  auto allocate = [&cu, ctx, fault_in = std::move(fault_in)](std::size_t bytes) -> void* {
    void* p = core::allocate_huge_aligned(bytes);
    if (!p) return nullptr;
    fault_in(p, bytes);
    if (registered(cu, ctx, p, bytes, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
      std::free(p);
      return nullptr;
    }
    return p;
  };
  auto release = [&cu, ctx](void* p) {
    unregistered(cu, ctx, p);
    std::free(p);
  };
  return std::make_shared<core::HostBlockPool>(keep, max_live, std::move(allocate), std::move(release));
}

std::shared_ptr<void> HostPins::pin(const void* p, std::size_t bytes) {
  if (generation_ != core::fork_generation()) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_ + bytes > max_bytes_) return nullptr;
  }
  if (registered(cu_, ctx_, const_cast<void*>(p), bytes, 0) != CUDA_SUCCESS) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.emplace(reinterpret_cast<std::uintptr_t>(p), bytes);
    bytes_ += bytes;
  }
  auto self = shared_from_this();
  return std::shared_ptr<void>(const_cast<void*>(p), [self](void* q) { self->unpin(q); });
}

void HostPins::unpin(void* p) {
  if (generation_ != core::fork_generation()) return;  // a forked child: see the header
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pinned_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == pinned_.end()) return;
    bytes_ -= it->second;
    pinned_.erase(it);
  }
  unregistered(cu_, ctx_, p);
}

bool HostPins::contains(const void* p, std::size_t bytes) const {
  if (generation_ != core::fork_generation()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return core::range_inside(pinned_, p, bytes);
}

}  // namespace portmat::cuda
