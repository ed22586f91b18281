// Out-of-core NumPy products (out_of_core.hpp): the plan of blocks and running it.
//
// The model. A block call c[I, J] (+)= a[I, P] @ b[P, J] moves its a block and its b block to the
// device and its c block back; the device's matmul_host keeps nothing between calls. Over a plan
// of gm x gn blocks of c and gk pieces of k that is, in elements,
//     gn * M * K  +  gm * K * N  +  gk * M * N
// (a is sent once per column of blocks, b once per row of blocks, c comes back once per piece of
// k), plus, with gk > 1, the host adding each later piece into c (read the piece, read and write
// c: 2 * (gk - 1) * M * N, counted at the link's weight; it runs at host memory speed, which is
// rarely faster). Each call also pays a start-up and a drain: its first chunk crosses before its
// first kernel, its last chunk's kernel and download come after its last upload, and the call
// sets itself up (~0.1 ms): about two 16 MiB chunks, kCallBytes. Big blocks therefore win twice:
// fewer passes over a and b, fewer start-ups. The planner tries each number of block columns gn
// (1..64, then growing by a quarter) and each k split, takes the tallest block that fits, and
// keeps the cheapest plan; ties go to fewer block columns (whole rows of c are contiguous, and
// a's row chunks stream as they do in one call). Example, the H200 figure: n = 32768 float32
// (4 GiB per matrix) under an 8 GiB cap: 3 calls of 10923 rows (a third of a, all of b, a third
// of c each), 20 GiB moved against 12 GiB in one call, while the product computes for ~1.4 s:
// the link (~50 GB/s) has time to spare.
//
// k is split only where not even a thin block (kThin rows and columns) with all of k fits: then
// c's blocks get their first piece in place and the later pieces through a host buffer, added
// on the host (float32 / float64 in their type, the integer products wrapping).
#include "core/out_of_core.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/batch.hpp"
#include "core/layout.hpp"

namespace portmat::core {

namespace {

constexpr std::int64_t kThin = 128;       // a thin block: the pipelines' row-chunk unit
constexpr std::int64_t kMinSide = 32;     // no block thinner than this in m, n or k (tiny calls)
constexpr std::int64_t kRound = 128;      // block sides rounded up to this where the count stays
constexpr double kCallBytes = 40.0 * (1 << 20);  // a call's start-up and drain, in link bytes

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The largest x in [lo, hi] with ok(x), ok being true up to some point; 0 when not even ok(lo).
template <class Ok>
std::int64_t largest(std::int64_t lo, std::int64_t hi, const Ok& ok) {
  if (lo > hi || !ok(lo)) return 0;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (ok(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// c += p, p dense rows x cols (row-major), in c's dtype (the integer products wrap).
template <class T>
void add_into(const MatrixView& c, const T* p) {
  for (std::int64_t i = 0; i < c.rows; ++i) {
    T* row = static_cast<T*>(c.data) + i * c.row_stride;
    const T* src = p + i * c.cols;
    for (std::int64_t j = 0; j < c.cols; ++j) row[j] += src[j];
  }
}
void accumulate(const MatrixView& c, const void* p) {
  switch (c.dtype) {
    case DType::f32: return add_into(c, static_cast<const float*>(p));
    case DType::f64: return add_into(c, static_cast<const double*>(p));
    case DType::u32: case DType::i32: return add_into(c, static_cast<const std::uint32_t*>(p));
    case DType::u64: case DType::i64: return add_into(c, static_cast<const std::uint64_t*>(p));
    default:
      throw std::logic_error(std::string("out-of-core: no host accumulation for ") + dtype_name(c.dtype));
  }
}

void call_host(Device& dev, const HostMatrix& a, const HostMatrix& b, const MatrixView& c) {
  dev.usage.host_calls.fetch_add(1);
  dev.usage.flops.fetch_add(static_cast<std::uint64_t>(2.0 * static_cast<double>(a.rows) *
                                                       static_cast<double>(b.cols) * static_cast<double>(a.cols)));
  dev.matmul_host(a, b, c);
}

}  // namespace

std::optional<BlockPlan> plan_blocks(std::int64_t M, std::int64_t N, std::int64_t K, std::size_t es,
                                     std::uint64_t budget, std::uint64_t max_buffer,
                                     const std::function<std::uint64_t(std::int64_t, std::int64_t, std::int64_t)>& needs) {
  const double e = static_cast<double>(es), cap = static_cast<double>(max_buffer);
  auto fits = [&](std::int64_t bm, std::int64_t bn, std::int64_t bk) {
    if (e * bm * bk > cap || e * bk * bn > cap || e * bm * bn > cap) return false;
    return needs(bm, bn, bk) <= budget;
  };
  const std::int64_t tm = std::min(M, kThin), tn = std::min(N, kThin);
  const std::int64_t sm = std::min(M, kMinSide), sn = std::min(N, kMinSide), sk = std::min(K, kMinSide);

  // The pieces of k to try: all of k where a thin block holds it, else the fewest pieces a thin
  // block (or failing that, the smallest block) holds, and a few more.
  std::vector<std::int64_t> gks;
  if (fits(tm, tn, K)) {
    gks.push_back(1);
  } else {
    std::int64_t deepest = largest(sk, K, [&](std::int64_t x) { return fits(tm, tn, x); });
    if (!deepest) deepest = largest(sk, K, [&](std::int64_t x) { return fits(sm, sn, x); });
    if (!deepest) return std::nullopt;
    const std::int64_t g0 = ceil_div(K, deepest), most = ceil_div(K, sk);
    for (std::int64_t f : {1, 2, 4, 8, 16})
      if (g0 * f <= most || f == 1) gks.push_back(std::min(g0 * f, most));
    gks.erase(std::unique(gks.begin(), gks.end()), gks.end());
  }

  std::optional<BlockPlan> best;
  for (const std::int64_t gk_try : gks) {
    const std::int64_t bk = ceil_div(K, gk_try), gk = ceil_div(K, bk);
    for (std::int64_t gn_try = 1; gn_try <= N;
         gn_try = gn_try < 64 ? gn_try + 1 : std::max(gn_try + 1, gn_try + gn_try / 4)) {
      std::int64_t bn = ceil_div(N, gn_try);
      if (bn < sn) break;
      const std::int64_t gn_blocks = ceil_div(N, bn);
      if (best && gn_blocks == best->gn && bk == best->bk) continue;  // the same plan again
      std::int64_t bm_max = largest(sm, M, [&](std::int64_t x) { return fits(x, bn, bk); });
      if (!bm_max) continue;
      const std::int64_t gm = ceil_div(M, bm_max);
      std::int64_t bm = ceil_div(M, gm);  // equal blocks
      if (const std::int64_t r = ceil_div(bm, kRound) * kRound; bm > kRound && r <= bm_max && ceil_div(M, r) == gm)
        bm = r;
      if (const std::int64_t r = ceil_div(bn, kRound) * kRound;
          bn > kRound && r <= N && ceil_div(N, r) == gn_blocks && fits(bm, r, bk))
        bn = r;
      const std::int64_t gn = ceil_div(N, bn);
      const double moved = e * (static_cast<double>(gn) * M * K + static_cast<double>(gm) * K * N +
                                static_cast<double>(gk) * M * N + 2.0 * static_cast<double>(gk - 1) * M * N);
      const double cost = moved + static_cast<double>(gm * gn * gk) * kCallBytes;
      if (!best || cost < best->cost_bytes) best = BlockPlan{bm, bn, bk, gm, gn, gk, cost};
    }
  }
  return best;
}

namespace {

// Whether one call needing `needs` bytes of device memory, its largest buffer `biggest` bytes, fits
// on dev now. Small beside the device (an eighth of it) and under the cap: no query
// (memory_for_products takes the device's lock, and a driver call).
bool fits_now(Device& dev, double needs, double biggest) {
  if (biggest > static_cast<double>(dev.max_buffer_bytes())) return false;
  const auto cap = device_memory_limit();
  if (needs <= static_cast<double>(dev.info().memory_bytes / 8) &&
      (!cap || needs <= static_cast<double>(room(*cap, dev.memory.in_use()))))
    return true;
  return needs <= static_cast<double>(dev.memory_for_products());
}

}  // namespace

bool fits_on_device(Device& dev, std::int64_t m, std::int64_t n, std::int64_t k, DType t) {
  const std::uint64_t needs = dev.host_product_bytes(m, n, k, t);
  if (needs == 0) return true;
  const double es = static_cast<double>(dtype_size(t));
  return fits_now(dev, static_cast<double>(needs),
                  es * std::max({static_cast<double>(m) * k, static_cast<double>(k) * n, static_cast<double>(m) * n}));
}

void host_product(Device& dev, const HostMatrix& a, const HostMatrix& b, const MatrixView& c) {
  const DType t = c.dtype;
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  if (fits_on_device(dev, M, N, K, t)) return call_host(dev, a, b, c);

  const std::size_t es = dtype_size(t);
  const std::uint64_t budget = dev.memory_for_products(), max_buffer = dev.max_buffer_bytes();
  auto needs = [&](std::int64_t bm, std::int64_t bn, std::int64_t bk) { return dev.host_product_bytes(bm, bn, bk, t); };
  const auto plan = plan_blocks(M, N, K, es, budget, max_buffer, needs);
  if (!plan) {
    const auto cap = device_memory_limit();
    throw OutOfDeviceMemory(
        "matmul: " + dev.info().id() + " (" + dev.info().name + "): not even one block of the " + dtype_name(t) +
        " product (" + std::to_string(M) + "x" + std::to_string(K) + ") @ (" + std::to_string(K) + "x" +
        std::to_string(N) + ") fits in the " + std::to_string(budget) + " bytes of device memory portmat may use "
        "there now (the smallest block needs " +
        std::to_string(needs(std::min(M, kMinSide), std::min(N, kMinSide), std::min(K, kMinSide))) + " bytes; " +
        (cap ? "limit " + std::to_string(*cap) + " bytes by set_device_memory_limit / $PORTMAT_DEVICE_MEMORY"
             : std::string("no limit set: the device's free memory")) +
        ")");
  }
  dev.usage.tiled_products.fetch_add(1);
  // A block that meets OutOfDeviceMemory (the pool held buffers of other sizes, or another thread
  // took memory since the plan) is tried once more after the pool gave its buffers back: every
  // call rewrites all of its result, so a failed one leaves nothing behind.
  auto run = [&](const HostMatrix& ab, const HostMatrix& bb, const MatrixView& cb) {
    try {
      call_host(dev, ab, bb, cb);
    } catch (const OutOfDeviceMemory&) {
      dev.release_cached_memory();
      call_host(dev, ab, bb, cb);
    }
  };
  std::vector<unsigned char> piece;  // later pieces of k, added on the host
  if (plan->gk > 1) piece.resize(static_cast<std::size_t>(plan->bm * plan->bn) * es);
  for (std::int64_t i0 = 0; i0 < M; i0 += plan->bm) {
    const std::int64_t rows = std::min(plan->bm, M - i0);
    for (std::int64_t j0 = 0; j0 < N; j0 += plan->bn) {
      const std::int64_t cols = std::min(plan->bn, N - j0);
      const MatrixView cb = block_of(c, i0, rows, j0, cols);
      for (std::int64_t k0 = 0; k0 < K; k0 += plan->bk) {
        const std::int64_t depth = std::min(plan->bk, K - k0);
        const HostMatrix ab = block_of(a, i0, rows, k0, depth), bb = block_of(b, k0, depth, j0, cols);
        if (k0 == 0) {
          run(ab, bb, cb);
        } else {
          const MatrixView pb{piece.data(), rows, cols, cols, 1, t};
          run(ab, bb, pb);
          accumulate(cb, piece.data());
        }
      }
    }
  }
}

void host_batch(Device& dev, const HostMatrix& a, std::int64_t a_step, const HostMatrix& b, std::int64_t b_step,
                const MatrixView& c, std::int64_t c_step, std::int64_t count) {
  const DType t = c.dtype;
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  const std::uint64_t one = dev.host_product_bytes(M, N, K, t);
  bool whole = one == 0;
  if (!whole) {
    // The stack's device buffers, as the backends' stack paths hold them: every distinct matrix.
    const double es = static_cast<double>(dtype_size(t));
    const double extra = es * (static_cast<double>(a_step ? count - 1 : 0) * M * K +
                               static_cast<double>(b_step ? count - 1 : 0) * K * N + static_cast<double>(count - 1) * M * N);
    const double biggest = es * std::max({static_cast<double>(a_step ? count : 1) * M * K,
                                          static_cast<double>(b_step ? count : 1) * K * N,
                                          static_cast<double>(count) * M * N});
    whole = fits_now(dev, static_cast<double>(one) + extra, biggest);
  }
  if (whole) {
    dev.usage.host_calls.fetch_add(1);
    dev.usage.flops.fetch_add(static_cast<std::uint64_t>(2.0 * static_cast<double>(count) * M * N * K));
    return dev.matmul_batch_host(a, a_step, b, b_step, c, c_step, count);
  }
  for (std::int64_t i = 0; i < count; ++i) host_product(dev, nth(a, a_step, i), nth(b, b_step, i), nth(c, c_step, i));
}

}  // namespace portmat::core
