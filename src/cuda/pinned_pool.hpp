// Page-locked host memory for the CUDA backend's NumPy-in/NumPy-out path: make_pinned_pool gives
// the pool of pinned blocks for result arrays; HostPins page-locks operand arrays in place.
//
// Pinned results
// Why: a NumPy result in ordinary (pageable) memory costs the NumPy-in/NumPy-out path a second
// host copy (pinned staging -> result) plus the page faults of a fresh array: at n = 4096 on the
// H200's host about 2 ms of the call. A result that already lives in pinned memory is written by
// the copy engine directly. Pinning is slow, so blocks are recycled (core::HostBlockPool). A block
// is ordinary memory, asked for huge pages, faulted in by the caller's threads in parallel and
// then registered with the driver: measured on the H200's host for 64 MiB, cuMemHostAlloc takes
// 35-39 ms, faulting in on one thread 14 ms and registering 2.4 ms. Page-locked memory cannot be
// swapped, so the pool's live limit matters: a program holding many results must not lock the
// machine's memory away.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "core/host_block_pool.hpp"
#include "cuda/cuda_api.hpp"

namespace portmat::cuda {

// fault_in(p, bytes) touches every page of fresh memory (the device's host threads do it in
// parallel); it is called with the device's lock held, as the pool's get() is.
using FaultIn = std::function<void(void*, std::size_t)>;
std::shared_ptr<core::HostBlockPool> make_pinned_pool(const CuApi& cu, CUcontext ctx, std::size_t keep,
                                                      std::size_t max_live, FaultIn fault_in);

// HostPins: operand arrays page-locked where they are (cuMemHostRegister), so the copy engines
// read them directly instead of through a host copy into staging: at n = 4096 on the H200's host
// the two 64 MiB operands take ~4-6 ms to stage (28-35 GB/s, less while the copy engines run) and
// ~2.5 ms to cross PCIe from pinned memory. Pinning costs ~3.5 ms per 64 MiB and unpinning ~1.5,
// so it pays only for arrays used again: the caller (the Python layer) pins an array on its second
// use and unpins it when the array dies. At most `max_bytes` are pinned at once. In a child made
// by fork() the parent's pins are let go untouched, as HostBlockPool's blocks are.
class HostPins : public std::enable_shared_from_this<HostPins> {
 public:
  HostPins(const CuApi& cu, CUcontext ctx, std::size_t max_bytes)
      : cu_(cu), ctx_(ctx), max_bytes_(max_bytes), generation_(core::fork_generation()) {}
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
  const std::uint32_t generation_;  // core::fork_generation() when made
  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> pinned_;  // start -> size
  std::size_t bytes_ = 0;
};

}  // namespace portmat::cuda
