// Parallel host-side copies for the NumPy-in/NumPy-out paths of discrete GPUs (CUDA, OpenCL).
//
// One thread copies host memory into pinned staging at only ~5.6 GB/s on the H200's host (a
// 16-core Xeon VM), ~20 GB/s with 4-8 threads, while the PCIe link moves ~54 GB/s: so every copy
// between NumPy arrays and pinned staging is split over a small pool of threads. Copies use
// non-temporal stores where possible: the staging side is never read back by the CPU, and the
// result side is a fresh np.empty array (no read-for-ownership of pages nobody has read).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace portmat::core {

// A fixed set of worker threads; run() splits [0, n) over them and the calling thread and returns
// when all parts are done. One run at a time (callers hold the device's lock).
class HostPool {
 public:
  explicit HostPool(int threads);  // total threads including the caller; >= 1
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over parts of [0, n); at most threads() parts, each at least `grain` long.
  void run(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void work(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t, std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0, part_ = 0;
  int parts_ = 0, pending_ = 0;
  unsigned long generation_ = 0;
  bool stop_ = false;
};

// A 2-D copy: `lines` lines of `line_bytes`, source lines `src_stride` bytes apart, destination
// lines `dst_stride` bytes apart; split over the pool (by lines, or by bytes for one long line).
void copy_2d(HostPool& pool, void* dst, std::size_t dst_stride, const void* src,
             std::size_t src_stride, std::size_t lines, std::size_t line_bytes);

// A 3-D copy: `count` blocks of `lines` lines of `line_bytes`; line l of block i is at
// src + i * src_step + l * src_ld and goes to dst + i * dst_step + l * dst_ld (bytes). Blocks of
// whole lines become one copy_2d; the rest is split over the pool by lines.
void copy_3d(HostPool& pool, void* dst, std::size_t dst_step, std::size_t dst_ld, const void* src,
             std::size_t src_step, std::size_t src_ld, std::size_t count, std::size_t lines,
             std::size_t line_bytes);

// Non-temporal stores on or off (PORTMAT_CUDA_NT=0 turns them off; for measurements).
bool nt_stores_enabled();

}  // namespace portmat::core
