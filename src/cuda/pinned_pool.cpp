// PinnedPool (a size-bucketed free list of registered blocks) and HostPins (operands pinned in
// place); see pinned_pool.hpp.
#include "cuda/pinned_pool.hpp"

#include <cstdlib>
#include <vector>

#include <sys/mman.h>

namespace portmat::cuda {

namespace {

// Sizes are rounded so that results of nearly the same size share blocks: to 64 KiB below 2 MiB,
// to 2 MiB above. A free block is reused for a request up to twice smaller than itself.
std::size_t rounded(std::size_t bytes) {
  const std::size_t unit = bytes < (std::size_t(2) << 20) ? (std::size_t(64) << 10) : (std::size_t(2) << 20);
  return (bytes + unit - 1) / unit * unit;
}

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

// True when [p, p + bytes) lies inside one of `ranges` (start -> size, not overlapping).
bool inside(const std::map<std::uintptr_t, std::size_t>& ranges, const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

}  // namespace

PinnedPool::~PinnedPool() {
  // Only free blocks are left (a live block's deleter holds a reference to the pool).
  for (auto& [size, p] : free_) free_block(p);
}

void* PinnedPool::allocate(std::size_t bytes) {
  // Huge pages where the system allows them (fewer pages to fault in, pin and map): 2 MiB aligned.
  const std::size_t align = bytes % (std::size_t(2) << 20) == 0 ? (std::size_t(2) << 20) : 4096;
  void* p = std::aligned_alloc(align, bytes);
  if (!p) return nullptr;
#ifdef MADV_HUGEPAGE
  if (align > 4096) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  fault_in_(p, bytes);
  if (registered(cu_, ctx_, p, bytes, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
    std::free(p);
    return nullptr;
  }
  return p;
}

void PinnedPool::free_block(void* p) {
  unregistered(cu_, ctx_, p);
  std::free(p);
}

std::shared_ptr<void> PinnedPool::get(std::size_t bytes, bool reuse_only) {
  if (bytes == 0) return nullptr;
  const std::size_t size = rounded(bytes);
  void* p = nullptr;
  std::size_t got = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= 2 * size) {
      got = it->first, p = it->second;
      free_.erase(it);
      free_bytes_ -= got;
    } else if (reuse_only || live_bytes_ + size > max_live_) {
      return nullptr;
    }
    if (p) {
      live_.emplace(reinterpret_cast<std::uintptr_t>(p), got);
      live_bytes_ += got;
    }
  }
  if (!p) {
    p = allocate(size);
    if (!p) {  // give the free list back and retry once
      std::vector<void*> drop;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [s, q] : free_) drop.push_back(q);
        free_.clear();
        free_bytes_ = 0;
      }
      for (void* q : drop) free_block(q);
      p = allocate(size);
    }
    if (!p) return nullptr;  // ordinary memory will do
    got = size;
    std::lock_guard<std::mutex> lock(mu_);
    live_.emplace(reinterpret_cast<std::uintptr_t>(p), got);
    live_bytes_ += got;
  }
  auto self = shared_from_this();
  return std::shared_ptr<void>(p, [self, got](void* q) { self->put(q, got); });
}

void PinnedPool::put(void* p, std::size_t bytes) {
  std::vector<void*> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(reinterpret_cast<std::uintptr_t>(p));
    live_bytes_ -= bytes;
    free_.emplace(bytes, p);
    free_bytes_ += bytes;
    while (free_bytes_ > keep_ && !free_.empty()) {  // largest blocks go first
      auto last = std::prev(free_.end());
      free_bytes_ -= last->first;
      drop.push_back(last->second);
      free_.erase(last);
    }
  }
  for (void* q : drop) free_block(q);
}

bool PinnedPool::contains(const void* p, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return inside(live_, p, bytes);
}

std::shared_ptr<void> HostPins::pin(const void* p, std::size_t bytes) {
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
  std::lock_guard<std::mutex> lock(mu_);
  return inside(pinned_, p, bytes);
}

}  // namespace portmat::cuda
