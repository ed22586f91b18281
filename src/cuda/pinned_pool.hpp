// Page-locked host memory for the CUDA backend's NumPy-in/NumPy-out path: PinnedPool recycles
// pinned blocks for result arrays; HostPins page-locks operand arrays in place.
//
// PinnedPool
// Why: a NumPy result in ordinary (pageable) memory costs the NumPy-in/NumPy-out path a second
// host copy (pinned staging -> result) plus the page faults of a fresh array: at n = 4096 on the
// H200's host about 2 ms of the call. A result that already lives in pinned memory is written by
// the copy engine directly. Pinning is slow, so blocks are recycled: when the array that owns a
// block dies, the block goes back to the pool's free list for the next result of a similar size,
// as CuPy's pinned memory pool does. A block is ordinary memory, asked for huge pages, faulted in
// by the caller's threads in parallel and then registered with the driver: measured on the H200's
// host for 64 MiB, cuMemHostAlloc takes 35-39 ms, faulting in on one thread 14 ms and registering
// 2.4 ms.
//
// Limits: blocks handed out and still owned by live arrays may not exceed `max_live` bytes
// (page-locked memory cannot be swapped, so a program holding many results must not lock the
// machine's memory away); past it, get() returns null and the caller uses ordinary memory. Free
// blocks beyond `keep` bytes are given back to the system.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "cuda/cuda_api.hpp"

namespace portmat::cuda {

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  // fault_in(p, bytes) touches every page of fresh memory (the device's host threads do it in
  // parallel); it is called with the device's lock held, as get() is.
  using FaultIn = std::function<void(void*, std::size_t)>;
  PinnedPool(const CuApi& cu, CUcontext ctx, std::size_t keep, std::size_t max_live, FaultIn fault_in)
      : cu_(cu), ctx_(ctx), keep_(keep), max_live_(max_live), fault_in_(std::move(fault_in)) {}
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // At least `bytes` of pinned memory, held until the last copy of the pointer goes; null when the
  // live limit would be passed or the driver refuses (the caller falls back to ordinary memory).
  // With `reuse_only`, only a free block is handed out: nothing is allocated.
  std::shared_ptr<void> get(std::size_t bytes, bool reuse_only = false);

  // True when [p, p + bytes) lies inside one block handed out by this pool.
  bool contains(const void* p, std::size_t bytes) const;

 private:
  void put(void* p, std::size_t bytes);
  void* allocate(std::size_t bytes);           // null on failure
  void free_block(void* p);                    // unregister and free

  const CuApi& cu_;
  CUcontext ctx_;
  const std::size_t keep_, max_live_;
  FaultIn fault_in_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> free_;  // by size
  std::map<std::uintptr_t, std::size_t> live_;  // start -> size of blocks owned by arrays
  std::size_t free_bytes_ = 0, live_bytes_ = 0;
};

// HostPins: operand arrays page-locked where they are (cuMemHostRegister), so the copy engines
// read them directly instead of through a host copy into staging: at n = 4096 on the H200's host
// the two 64 MiB operands take ~4-6 ms to stage (28-35 GB/s, less while the copy engines run) and
// ~2.5 ms to cross PCIe from pinned memory. Pinning costs ~3.5 ms per 64 MiB and unpinning ~1.5,
// so it pays only for arrays used again: the caller (the Python layer) pins an array on its second
// use and unpins it when the array dies. At most `max_bytes` are pinned at once.
class HostPins : public std::enable_shared_from_this<HostPins> {
 public:
  HostPins(const CuApi& cu, CUcontext ctx, std::size_t max_bytes)
      : cu_(cu), ctx_(ctx), max_bytes_(max_bytes) {}
  HostPins(const HostPins&) = delete;
  HostPins& operator=(const HostPins&) = delete;

  // Pins [p, p + bytes) until the handle goes; null if over the limit or the driver refuses (for
  // instance when the range shares a page with one pinned already).
  std::shared_ptr<void> pin(const void* p, std::size_t bytes);
  bool contains(const void* p, std::size_t bytes) const;

 private:
  void unpin(void* p);

  const CuApi& cu_;
  CUcontext ctx_;
  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> pinned_;  // start -> size
  std::size_t bytes_ = 0;
};

}  // namespace portmat::cuda
