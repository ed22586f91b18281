// See host_copy.hpp.
#include "core/host_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace portmat::core {

HostPool::HostPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this, i] { work(i); });
}

HostPool::~HostPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void HostPool::run(std::size_t n, std::size_t grain,
                   const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0) return;
  const std::size_t max_parts = std::max<std::size_t>(1, n / std::max<std::size_t>(grain, 1));
  const int parts = static_cast<int>(std::min<std::size_t>(max_parts, threads()));
  if (parts == 1) {
    fn(0, n);
    return;
  }
  const std::size_t part = (n + parts - 1) / parts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    part_ = part;
    parts_ = parts;
    pending_ = parts - 1;  // parts 1.. go to workers 1..parts-1; part 0 is the caller's
    ++generation_;
  }
  wake_.notify_all();
  fn(0, std::min(part, n));
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void HostPool::work(int index) {
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(std::size_t, std::size_t)>* fn;
    std::size_t begin, end;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= parts_) continue;  // not needed this time
      fn = fn_;
      begin = std::min(n_, index * part_);
      end = std::min(n_, begin + part_);
    }
    if (begin < end) (*fn)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

bool nt_stores_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("PORTMAT_CUDA_NT");
    return !(e && e[0] == '0');
  }();
  return on;
}

namespace {
// memcpy with streaming (non-temporal) stores for the 16-byte-aligned middle of large copies.
void copy_bytes(void* dst, const void* src, std::size_t n) {
#if defined(__SSE2__)
  if (n >= 4096 && nt_stores_enabled()) {
    auto* d = static_cast<unsigned char*>(dst);
    auto* s = static_cast<const unsigned char*>(src);
    const std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
    std::memcpy(d, s, head);
    d += head, s += head, n -= head;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), x0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), x1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), x2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), x3);
    }
    std::memcpy(d + i, s + i, n - i);
    _mm_sfence();  // streaming stores are weakly ordered: make them visible before the DMA reads
    return;
  }
#endif
  std::memcpy(dst, src, n);
}
}  // namespace

void copy_2d(HostPool& pool, void* dst, std::size_t dst_stride, const void* src,
             std::size_t src_stride, std::size_t lines, std::size_t line_bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  constexpr std::size_t kGrain = 256 * 1024;  // bytes below which another thread costs more than it saves
  if (lines == 1 || (dst_stride == line_bytes && src_stride == line_bytes)) {
    const std::size_t total = lines * line_bytes;  // one contiguous run: split by bytes
    pool.run(total, kGrain, [&](std::size_t b, std::size_t e) { copy_bytes(d + b, s + b, e - b); });
    return;
  }
  const std::size_t grain_lines = std::max<std::size_t>(1, kGrain / std::max<std::size_t>(line_bytes, 1));
  pool.run(lines, grain_lines, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) copy_bytes(d + i * dst_stride, s + i * src_stride, line_bytes);
  });
}

void copy_3d(HostPool& pool, void* dst, std::size_t dst_step, std::size_t dst_ld, const void* src,
             std::size_t src_step, std::size_t src_ld, std::size_t count, std::size_t lines,
             std::size_t line_bytes) {
  if (lines == 1 || (dst_ld == line_bytes && src_ld == line_bytes))  // each block one line
    return copy_2d(pool, dst, dst_step, src, src_step, count, lines * line_bytes);
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  constexpr std::size_t kGrain = 256 * 1024;
  const std::size_t grain_lines = std::max<std::size_t>(1, kGrain / std::max<std::size_t>(line_bytes, 1));
  pool.run(count * lines, grain_lines, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      const std::size_t block = i / lines, l = i % lines;
      copy_bytes(d + block * dst_step + l * dst_ld, s + block * src_step + l * src_ld, line_bytes);
    }
  });
}

}  // namespace portmat::core
