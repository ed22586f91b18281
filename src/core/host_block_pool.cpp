// HostBlockPool: a size-bucketed free list of host blocks (host_block_pool.hpp).
#include "core/host_block_pool.hpp"

#include <cstdlib>
#include <vector>

#include <sys/mman.h>

namespace portmat::core {

namespace {

// Sizes are rounded so that results of nearly the same size share blocks: to 64 KiB below 2 MiB,
// to 2 MiB above. A free block is reused for a request up to twice smaller than itself.
std::size_t rounded(std::size_t bytes) {
  const std::size_t unit = bytes < (std::size_t(2) << 20) ? (std::size_t(64) << 10) : (std::size_t(2) << 20);
  return (bytes + unit - 1) / unit * unit;
}

}  // namespace

bool range_inside(const std::map<std::uintptr_t, std::size_t>& ranges, const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

void* allocate_huge_aligned(std::size_t bytes) {
  const std::size_t align = bytes % (std::size_t(2) << 20) == 0 ? (std::size_t(2) << 20) : 4096;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
#ifdef MADV_HUGEPAGE
  if (p && align > 4096) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

bool HostBlockPool::made_before_fork() const { return generation_ != fork_generation(); }

HostBlockPool::~HostBlockPool() {
  // Only free blocks are left (a live block's deleter holds a reference to the pool).
  for (auto& [size, p] : free_) release_(p);
}

std::shared_ptr<void> HostBlockPool::get(std::size_t bytes, bool reuse_only) {
  if (bytes == 0 || made_before_fork()) return nullptr;
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
    p = allocate_(size);
    if (!p) {  // give the free list back and retry once
      std::vector<void*> drop;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [s, q] : free_) drop.push_back(q);
        free_.clear();
        free_bytes_ = 0;
      }
      for (void* q : drop) release_(q);
      p = allocate_(size);
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

void HostBlockPool::put(void* p, std::size_t bytes) {
  if (made_before_fork()) return;  // see the header: the child neither locks nor releases
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
  for (void* q : drop) release_(q);
}

bool HostBlockPool::contains(const void* p, std::size_t bytes) const {
  if (made_before_fork()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return range_inside(live_, p, bytes);
}

}  // namespace portmat::core
