// The partial sums of threads that split K, added into c: each thread summed its own stretch of
// K into a buffer of its own, and c is their sum, part by part in a fixed order, so a product gives
// the same bits on every run. Shared by skinny.cpp (its dot and axpy kernels' splits) and small.cpp
// (slices of a long K).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/thread_pool.hpp"

namespace portmat::cpu {

// out[x * out_stride] = the sum over p < parts of part[p * part_stride + x], for x < count, added
// in p order: the partial sums of threads that split K, one stretch of K each. A block of x at a
// time, each part's stretch of it added in a contiguous loop the compiler vectorises (element by
// element, each x was a chain of dependent scalar adds over loads a whole part apart), in the same
// order for every x: the same bits as the plain loop.
constexpr std::int64_t kAddPartsBlock = 512;
template <class T>
void add_parts(const T* part, std::int64_t part_stride, int parts, std::int64_t count, T* out,
               std::int64_t out_stride) {
  T sums[kAddPartsBlock];
  for (std::int64_t x0 = 0; x0 < count; x0 += kAddPartsBlock) {
    const std::int64_t n = std::min(kAddPartsBlock, count - x0);
    std::memcpy(sums, part + x0, static_cast<std::size_t>(n) * sizeof(T));
    for (int p = 1; p < parts; ++p) {
      const T* q = part + p * part_stride + x0;
      for (std::int64_t x = 0; x < n; ++x) sums[x] += q[x];
    }
    if (out_stride == 1)
      std::memcpy(out + x0, sums, static_cast<std::size_t>(n) * sizeof(T));
    else
      for (std::int64_t x = 0; x < n; ++x) out[(x0 + x) * out_stride] = sums[x];
  }
}

// add_parts for `rows` rows of sums (row s's parts at part + s * row_stride, its result at out +
// s * out_row), shared out over `threads` in blocks of columns: the adds read parts * rows * count
// values, which one thread of sixteen reads at a sixteenth of the memory's speed.
template <class T>
void add_parts_rows(const T* part, std::int64_t part_stride, std::int64_t row_stride, int parts, int rows,
                    std::int64_t count, T* out, std::int64_t out_stride, std::int64_t out_row, int threads) {
  const std::int64_t blocks = (count + kAddPartsBlock - 1) / kAddPartsBlock;
  // A thread's share no smaller than 32 KiB of parts to read: below that a wake-up costs more.
  const double bytes = static_cast<double>(parts) * rows * count * sizeof(T);
  const int use = static_cast<int>(std::clamp<double>(bytes / (32 << 10), 1, threads));
  run_parts(rows * blocks, use, [&](std::int64_t i) {
    const std::int64_t s = i / blocks, x0 = (i % blocks) * kAddPartsBlock;
    add_parts(part + s * row_stride + x0, part_stride, parts, std::min(kAddPartsBlock, count - x0),
              out + s * out_row + x0 * out_stride, out_stride);
  });
}

}  // namespace portmat::cpu
