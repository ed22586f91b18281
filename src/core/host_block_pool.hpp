// HostBlockPool: recycled blocks of host memory for result arrays.
//
// Why: a fresh result array costs its first writer a page fault per page (the kernel zeroes each
// 2 MiB or 4 KiB page on first touch): on the 2-core development machine 1-3% of a float32
// product at n = 2048-4096 (docs/cpu.md, session 4). A device whose results are
// worth keeping in ready memory (the CPU: faulted-in pages; a discrete GPU: page-locked ones the
// copy engines write directly) hands out blocks from a pool: when the array that owns a block
// dies, the block goes back to a free list for the next result of a similar size, as CuPy's
// pinned memory pool does. How a block is made and unmade is the device's (allocate / release).
//
// Limits: blocks handed out and still owned by live arrays may not exceed `max_live` bytes (past
// it, get() returns null and the caller uses ordinary memory); free blocks beyond `keep` bytes are
// released.
//
// fork(): in a child, a pool made before the fork hands out nothing (get() returns null) and lets
// blocks that come back go without touching its lock (a parent thread may have held it) or the
// device's release (a GPU driver does not survive fork): the child's copies of those pages are
// freed when the child exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "core/process.hpp"

namespace portmat::core {

class HostBlockPool : public std::enable_shared_from_this<HostBlockPool> {
 public:
  // allocate(bytes): a new block of exactly `bytes`, or null; release(p): give it back. Both are
  // called without the pool's lock held (release possibly on a Python thread dropping an array).
  using Allocate = std::function<void*(std::size_t)>;
  using Release = std::function<void(void*)>;
  HostBlockPool(std::size_t keep, std::size_t max_live, Allocate allocate, Release release)
      : generation_(fork_generation()), keep_(keep), max_live_(max_live),
        allocate_(std::move(allocate)), release_(std::move(release)) {}
  ~HostBlockPool();
  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  // At least `bytes`, held until the last copy of the pointer goes; null when the live limit
  // would be passed or allocate() fails. With `reuse_only`, only a free block is handed out.
  std::shared_ptr<void> get(std::size_t bytes, bool reuse_only = false);

  // True when [p, p + bytes) lies inside one block handed out by this pool.
  bool contains(const void* p, std::size_t bytes) const;

 private:
  void put(void* p, std::size_t bytes);
  bool made_before_fork() const;

  const std::uint32_t generation_;  // core::fork_generation() when the pool was made
  const std::size_t keep_, max_live_;
  Allocate allocate_;
  Release release_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> free_;      // by size
  std::map<std::uintptr_t, std::size_t> live_;  // start -> size of blocks owned by arrays
  std::size_t free_bytes_ = 0, live_bytes_ = 0;
};

// True when [p, p + bytes) lies inside one of `ranges` (start -> size, not overlapping).
bool range_inside(const std::map<std::uintptr_t, std::size_t>& ranges, const void* p, std::size_t bytes);

// `bytes` of ordinary memory, 2 MiB aligned and advised to use huge pages when `bytes` is a
// multiple of 2 MiB (fewer pages to fault in, pin and map), else page aligned; null on failure.
// Free with std::free.
void* allocate_huge_aligned(std::size_t bytes);

}  // namespace portmat::core
