// Out-of-core NumPy products (issue 20): c = a @ b on a device whose memory cannot hold the call's
// buffers, in blocks that can, each block through the device's own pipelined matmul_host. The
// planning is here, in the core, once for every backend (CUDA and discrete OpenCL alike); a
// backend only says what a call needs (Device::host_product_bytes) and what it has
// (memory_for_products, max_buffer_bytes). out_of_core.cpp has the cost model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "core/backend.hpp"

namespace portmat::core {

// c = a @ b (the matmul_host contract): one dev.matmul_host call when the product fits on the
// device, else blocks c[I, J] = a[I, :] @ b[:, J] (+ over pieces of k where even a thin block with
// all of k does not fit), each read in place from the host views. Throws OutOfDeviceMemory when
// not even the smallest block fits.
void host_product(Device& dev, const HostMatrix& a, const HostMatrix& b, const MatrixView& c);

// c[i] = a[i] @ b[i] (the matmul_batch_host contract): one dev.matmul_batch_host call when the
// whole stack fits on the device, else product by product through host_product.
void host_batch(Device& dev, const HostMatrix& a, std::int64_t a_step, const HostMatrix& b, std::int64_t b_step,
                const MatrixView& c, std::int64_t c_step, std::int64_t count);

// Whether one matmul_host call of this product fits on dev now (always true where it takes no
// device memory).
bool fits_on_device(Device& dev, std::int64_t m, std::int64_t n, std::int64_t k, DType t);

// A plan of blocks: c cut into gm x gn blocks of bm x bn (the last ones of a row or column
// smaller), k into gk pieces of bk; one matmul_host call per (block, piece).
struct BlockPlan {
  std::int64_t bm = 0, bn = 0, bk = 0;
  std::int64_t gm = 1, gn = 1, gk = 1;
  double cost_bytes = 0;  // the model's cost (out_of_core.cpp)
  std::int64_t calls() const { return gm * gn * gk; }
};

// The cheapest plan whose every call fits: needs(bm, bn, bk) <= budget bytes and each of its three
// buffers (es bytes per element) <= max_buffer. Nothing when not even the smallest block fits.
std::optional<BlockPlan> plan_blocks(std::int64_t M, std::int64_t N, std::int64_t K, std::size_t es,
                                     std::uint64_t budget, std::uint64_t max_buffer,
                                     const std::function<std::uint64_t(std::int64_t, std::int64_t, std::int64_t)>& needs);

}  // namespace portmat::core
