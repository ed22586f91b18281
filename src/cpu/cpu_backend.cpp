// The native CPU backend: one device, "cpu:0", running our own GEMM (gemm_driver.cpp with the
// micro-kernel kernel_table.cpp picks for this CPU) on the shared thread pool.
//
// Device memory is host memory, so matmul_host works in place on the caller's arrays and the
// buffer calls (for time_gemm) are plain copies. DeviceInfo is filled at start-up: the CPU's name
// from CPUID (or /proc/cpuinfo), system RAM, the thread count, and a float32 peak measured with a
// sub-millisecond FMA loop on one core times the thread count.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/batch.hpp"
#include "core/casts.hpp"
#include "core/host_block_pool.hpp"
#include "core/layout.hpp"
#include "cpu/boolean.hpp"
#include "cpu/gemm_driver.hpp"
#include "cpu/kernel_table.hpp"
#include "cpu/skinny.hpp"
#include "cpu/small.hpp"
#include "cpu/thread_pool.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#include <unistd.h>

namespace portmat::cpu {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\n");
  const auto e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// C stdio, not iostreams (see src/opencl/gemm_params.cpp for why the library avoids them).
std::string proc_cpuinfo(const char* key) {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return {};
  std::string found;
  char buf[1024];
  while (found.empty() && std::fgets(buf, sizeof buf, f)) {
    const std::string line = buf;
    if (line.compare(0, std::strlen(key), key) == 0 && line.find(':') != std::string::npos)
      found = trim(line.substr(line.find(':') + 1));
  }
  std::fclose(f);
  return found;
}

void cpu_names(std::string& name, std::string& vendor) {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned r[4];
  if (__get_cpuid(0, &r[0], &r[1], &r[2], &r[3])) {
    char v[13] = {};
    std::memcpy(v, &r[1], 4), std::memcpy(v + 4, &r[3], 4), std::memcpy(v + 8, &r[2], 4);
    vendor = std::strcmp(v, "GenuineIntel") == 0 ? "Intel" : std::strcmp(v, "AuthenticAMD") == 0 ? "AMD" : v;
  }
  char brand[49] = {};
  if (__get_cpuid(0x80000000, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004) {
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * leaf, r, 16);
    }
    name = trim(brand);
  }
#endif
  if (name.empty()) name = proc_cpuinfo("model name");
  if (name.empty()) name = proc_cpuinfo("Hardware");
  if (name.empty()) name = "CPU";
  if (vendor.empty()) vendor = proc_cpuinfo("vendor_id");
}

class HostBuffer final : public core::Buffer {
 public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    p_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p_)
      throw OutOfDeviceMemory("cpu:0: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  ~HostBuffer() override { std::free(p_); }
  std::size_t bytes() const override { return bytes_; }
  void* data() const { return p_; }

 private:
  void* p_;
  std::size_t bytes_;
};

const void* host_of(const core::Buffer* b) { return static_cast<const HostBuffer*>(b)->data(); }

core::HostMatrix host_matrix(const core::DeviceMatrix& d) {
  return core::HostMatrix{host_of(d.data), d.offset, d.rows, d.cols, d.ld, d.col_major, d.dtype};
}
MatrixView host_view(const core::DeviceMatrix& c) {  // a row-major result
  return MatrixView{static_cast<char*>(const_cast<void*>(host_of(c.data))) + c.offset * dtype_size(c.dtype),
                    c.rows, c.cols, c.ld, 1, c.dtype};
}

class CpuDevice final : public core::Device {
 public:
  CpuDevice() : kernels_(active_kernel_set()) {
    info_.backend = "cpu";
    info_.index = 0;
    cpu_names(info_.name, info_.vendor);
    info_.driver_version = std::string("portmat native, ") + kernels_.isa + " (" +
                           kernels_.f32.kernel + ", " + kernels_.f64.kernel + ", " +
                           kernels_.u32.kernel + ", " + kernels_.u64.kernel + ")";
    info_.kind = DeviceKind::cpu;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    info_.memory_bytes = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
    info_.host_unified = true;
    info_.compute_units = configured_threads();
    info_.supports_f64 = true;
    info_.peak_gflops = measure_core_peak(kernels_) * info_.compute_units / 1e9;
    // The small path's size limit is settled here, while the registry probes this backend under
    // the lock that fork() waits for: its first call measures two FMA loops (~6 ms,
    // wide_fma_at_half_rate), and a child forked while another thread was inside that static's
    // initialisation would wait for its guard forever (Process.ForkWhileAnotherThreadIsInsideACpuProduct).
    (void)small_elements();
    result_pool_ = std::make_shared<core::HostBlockPool>(
        std::min<std::size_t>(info_.memory_bytes / 16, std::size_t(1) << 30), info_.memory_bytes / 4,
        core::allocate_huge_aligned, [](void* p) { std::free(p); });
  }

  const DeviceInfo& info() const override { return info_; }

  std::unique_ptr<core::Buffer> alloc(std::size_t bytes) override {
    // With overcommit, malloc grants far more than exists and the process dies on first touch:
    // refuse up front what the machine cannot hold.
    if (bytes > info_.memory_bytes)
      throw OutOfDeviceMemory("cpu:0: cannot allocate " + std::to_string(bytes) +
                              " bytes: the machine has " + std::to_string(info_.memory_bytes));
    return std::make_unique<HostBuffer>(bytes);
  }
  void upload(core::Buffer& dst, const void* src, std::size_t bytes) override {
    std::memcpy(static_cast<HostBuffer&>(dst).data(), src, bytes);
  }
  void download(void* dst, const core::Buffer& src, std::size_t bytes) override {
    std::memcpy(dst, host_of(&src), bytes);
  }

  std::uintptr_t address_of(const core::Buffer& b) const override {
    return reinterpret_cast<std::uintptr_t>(host_of(&b));
  }

  double gemm(const core::DeviceMatrix& a, const core::DeviceMatrix& b,
              const core::DeviceMatrix& c) override {
    const auto t0 = std::chrono::steady_clock::now();
    matmul_host(host_matrix(a), host_matrix(b), host_view(c));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // A stack in "device" buffers (host memory) runs as matmul_batch_host runs a NumPy stack, so
  // that the benchmark's kernel time is the path NumPy arrays take.
  double gemm_batch_repeated(const core::DeviceMatrix& a, std::int64_t a_step, const core::DeviceMatrix& b,
                             std::int64_t b_step, const core::DeviceMatrix& c, std::int64_t c_step,
                             std::int64_t count, int launches) override {
    if (!computes(c.dtype)) return core::Device::gemm_batch_repeated(a, a_step, b, b_step, c, c_step, count, launches);
    const auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < launches; ++l)
      matmul_batch_host(host_matrix(a), a_step, host_matrix(b), b_step, host_view(c), c_step, count);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / launches;
  }

  // Results of 1 MiB and more come from a pool of recycled blocks (core::HostBlockPool), whose
  // pages were faulted in by an earlier result: a fresh array's page faults cost 1.3-3.5% of a
  // float32 product at n = 2048-4096 on the 2-core development machine. The pool keeps at most
  // 1/16 of the memory (1 GiB at most) of free blocks; PORTMAT_CPU_RESULT_POOL=0 turns it off.
  std::shared_ptr<void> alloc_host(std::size_t bytes, bool reuse_only) override {
    const char* off = std::getenv("PORTMAT_CPU_RESULT_POOL");
    if (bytes < (std::size_t(1) << 20) || (off && std::strcmp(off, "0") == 0)) return nullptr;
    return result_pool_->get(bytes, reuse_only);
  }

  // Booleans too: their products are logic here (boolean.hpp), not counts in uint32.
  bool computes(DType t) const override {
    return t == DType::f32 || t == DType::f64 || t == DType::u32 || t == DType::u64 || t == DType::boolean;
  }

  // Device arrays here are host memory: a cast is the host loop (core/casts.cpp).
  void cast(const core::Buffer& src, DType from, const core::Buffer& dst, DType to, std::int64_t count) override {
    core::cast_elements(host_of(&src), from, const_cast<void*>(host_of(&dst)), to, count);
  }

  void matmul_host(const core::HostMatrix& a, const core::HostMatrix& b,
                   const MatrixView& c) override {
    if (c.dtype == DType::boolean)
      return cpu::boolean_gemm(a, b, static_cast<std::uint8_t*>(c.data), c.row_stride, configured_threads());
    if (c.dtype == DType::u64) {  // the packed GEMM on 32-bit multiplies where the values allow
      auto* c64 = static_cast<std::uint64_t*>(c.data);
      if (unpacked_int(a, b, c64, c.row_stride, configured_threads())) return;
      if (narrow(a) && narrow(b)) return cpu::gemm(kernels_.u64_narrow, a, b, c64, c.row_stride, configured_threads());
    }
    with_config(c.dtype, [&](const auto& cfg) {
      multiply(cfg, a, b, static_cast<typename std::decay_t<decltype(cfg)>::Element*>(c.data),
               c.row_stride, configured_threads());
    });
  }

  // Complex products big enough for the packed GEMM: where the kernel set has complex kernels
  // (kernel_table.hpp, c64 / c128), a complex GEMM of a, b and c as complex matrices. Elsewhere
  // the real product a @ B'' whose B packer builds B'''s panels from b directly
  // (pack_b_complex_panels): the core's B'' would be written out (4KN reals) and read back by the
  // packer, a pass over 1.5x b's bytes that costs several percent of a complex64 product at
  // n = 1024. Smaller ones take the core's B'', except those small_complex_on_kernels gives the
  // complex kernels.
  bool matmul_complex_b_host(const core::HostMatrix& a, const core::HostMatrix& b, const MatrixView& c) override {
    return complex_b_product(a, b, c, configured_threads());
  }

  // A stack of them: products too small to keep every thread busy run one a thread at a time, as
  // matmul_batch_host's real ones do (each was run on every thread in turn: 1000 complex64 64^3
  // products took 24 ms against NumPy's 18, one product alone 17.6 us on one thread).
  bool matmul_complex_b_batch_host(const core::HostMatrix& a, std::int64_t a_step, const core::HostMatrix& b,
                                   std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                                   std::int64_t count) override {
    const int threads = configured_threads();
    const double flops = 8.0 * c.rows * (c.cols / 2) * (a.cols / 2);
    if (threads == 1 || count < 2 || flops >= cpu::kMinFlopsPerThread * threads)
      return core::Device::matmul_complex_b_batch_host(a, a_step, b, b_step, c, c_step, count);
    auto product = [&](std::int64_t i) {
      return complex_b_product(core::nth(a, a_step, i), core::nth(b, b_step, i), core::nth(c, c_step, i), 1);
    };
    if (!product(0)) return false;  // declined: the shape decides for all
    std::atomic<bool> declined{false};
    run_products(1, count, threads, 64, [&](std::int64_t i) {
      if (!product(i)) declined = true;
    });
    if (declined) throw std::logic_error("matmul: the CPU declined a complex product of a stack it had taken");
    return true;
  }

  // Stacks of tiny 8- and 16-bit integer products (at most kTinyIntMacs multiply-adds each) in
  // their own dtype, read where they lie: the core's route widens both stacks to uint32 and narrows
  // the results, two passes and a copy that cost more than such products' multiply-adds (10000
  // int8 4^3 products 1.78 ms against NumPy's 1.0-1.3, session 38). The sums wrap in uint32 and
  // keep their low 8 or 16 bits: NumPy's, whose loop wraps in the dtype itself (the same ring).
  // Larger products keep the route (their widened copies feed the kernels).
  bool matmul_narrow_int_batch_host(const core::Batch& p) override {
    static const bool on = !cpu::switched_off("PORTMAT_CPU_NARROW_INT");  // =0: the core's route (A/B)
    if (!on || p.a.rows * p.a.cols * p.b.cols > kTinyIntMacs || p.c.col_stride != 1) return false;
    switch (p.c.dtype) {
      case DType::i8: return narrow_int_stack<std::int8_t>(p), true;
      case DType::u8: return narrow_int_stack<std::uint8_t>(p), true;
      case DType::i16: return narrow_int_stack<std::int16_t>(p), true;
      case DType::u16: return narrow_int_stack<std::uint16_t>(p), true;
      default: return false;
    }
  }

  template <class S>
  void narrow_int_stack(const core::Batch& p) {
    const std::int64_t M = p.a.rows, K = p.a.cols, N = p.b.cols;
    using U = std::make_unsigned_t<S>;
    const std::int64_t ars = p.a.row_stride, acs = p.a.col_stride, brs = p.b.row_stride, bcs = p.b.col_stride;
    // Row by row: c's row as n sums (n <= kTinyIntMacs), each row of b added in, scaled by a's
    // element; along b's rows the loop is a vector one where they are contiguous (c's always are),
    // with n a constant for the common narrow widths (a 4-wide row in one vector, not a loop).
    auto rows = [&](std::int64_t i, auto n_const) {
      constexpr std::int64_t kN = decltype(n_const)::value;
      const std::int64_t n = kN > 0 ? kN : N;
      const S* a = static_cast<const S*>(p.a.data) + i * p.a_step;
      const S* b = static_cast<const S*>(p.b.data) + i * p.b_step;
      S* c = static_cast<S*>(p.c.data) + i * p.c_step;
      std::uint32_t sums[kTinyIntMacs];
      for (std::int64_t r = 0; r < M; ++r) {
        for (std::int64_t j = 0; j < n; ++j) sums[j] = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const std::uint32_t x = static_cast<std::uint32_t>(a[r * ars + k * acs]);
          const S* row = b + k * brs;
          if (bcs == 1)
            for (std::int64_t j = 0; j < n; ++j) sums[j] += x * static_cast<std::uint32_t>(row[j]);
          else
            for (std::int64_t j = 0; j < n; ++j) sums[j] += x * static_cast<std::uint32_t>(row[j * bcs]);
        }
        S* crow = c + r * p.c.row_stride;
        for (std::int64_t j = 0; j < n; ++j) crow[j] = static_cast<S>(static_cast<U>(sums[j]));
      }
    };
    auto product = [&](std::int64_t i) {
      switch (N) {
        case 4: return rows(i, std::integral_constant<std::int64_t, 4>{});
        case 8: return rows(i, std::integral_constant<std::int64_t, 8>{});
        case 16: return rows(i, std::integral_constant<std::int64_t, 16>{});
        default: return rows(i, std::integral_constant<std::int64_t, 0>{});
      }
    };
    // Threads only for stacks whose multiply-adds are worth a wake-up each (the others' stay on the
    // caller, as NumPy's do).
    const int threads = configured_threads();
    const double flops = 2.0 * static_cast<double>(M * K * N) * static_cast<double>(p.count);
    if (threads == 1 || flops < cpu::kMinFlopsPerThread * 2) {
      for (std::int64_t i = 0; i < p.count; ++i) product(i);
      return;
    }
    run_products(0, p.count, static_cast<int>(std::min<double>(threads, flops / cpu::kMinFlopsPerThread)), 1024,
                 product);
  }

  bool complex_b_product(const core::HostMatrix& a, const core::HostMatrix& b, const MatrixView& c, int threads) {
    if (c.dtype != DType::f32 && c.dtype != DType::f64) return false;
    const bool f32 = c.dtype == DType::f32;
    // A matrix times a vector (or two columns): skinny's dots with b's two short rows a column
    // built from b itself (skinny.hpp, complex_dots).
    if (c.col_stride == 1 && (f32 ? cpu::complex_dots<float>(a, b, static_cast<float*>(c.data), c.row_stride, threads)
                                  : cpu::complex_dots<double>(a, b, static_cast<double*>(c.data), c.row_stride, threads)))
      return true;
    const bool kernels = f32 ? kernels_.c64.ukernel != nullptr : kernels_.c128.ukernel != nullptr;
    const bool packed = takes_packed_gemm(a.rows, a.cols, c.cols, dtype_size(c.dtype));
    if (!packed && !(kernels && small_complex_on_kernels(a.rows, a.cols / 2, c.cols / 2, threads))) return false;
    if (kernels && (f32 ? complex_gemm(kernels_.c64, a, b, c, threads) : complex_gemm(kernels_.c128, a, b, c, threads)))
      return true;
    if (!packed) return false;  // a small one the complex kernel declined: the core's B''
    bool done = false;
    with_config(c.dtype, [&](const auto& cfg) {
      using T = typename std::decay_t<decltype(cfg)>::Element;
      if constexpr (std::is_floating_point_v<T>) {
        auto fused = cfg;
        fused.pack_b = complex_b_packer<T>(cfg.nr);
        if (!fused.pack_b) return;
        core::HostMatrix b_real = b;  // B'''s shape; data, offset and ld stay b's (complex elements)
        b_real.rows = 2 * b.rows, b_real.cols = 2 * b.cols, b_real.dtype = c.dtype;
        cpu::gemm(fused, a, b_real, static_cast<T*>(c.data), c.row_stride, threads);
        done = true;
      }
    });
    return done;
  }

  // c = a @ b on a complex kernel: a and c as the core hands them (real matrices of interleaved
  // parts, a row-major) read as the complex matrices they are; b complex already. False where a
  // is not row-major with whole complex elements (the real product takes it).
  template <class C>
  bool complex_gemm(const GemmConfig<C>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
                    const MatrixView& c, int threads) {
    if (a.col_major || a.cols % 2 || a.ld % 2 || a.offset % 2 || c.row_stride % 2) return false;
    core::HostMatrix ac = a, bc = b;
    ac.cols = a.cols / 2, ac.ld = a.ld / 2, ac.offset = a.offset / 2;
    ac.dtype = bc.dtype = std::is_same_v<C, Complex64> ? DType::c64 : DType::c128;
    cpu::gemm(cfg, ac, bc, static_cast<C*>(c.data), c.row_stride / 2, threads);
    return true;
  }

  // A stack of products each too small to keep every thread busy (below kMinFlopsPerThread per
  // thread) runs one product per thread at a time, each on a single thread without the pool's
  // coordination, threads claiming the next product from a counter; larger ones run one after
  // another, each on every thread.
  void matmul_batch_host(const core::HostMatrix& a, std::int64_t a_step, const core::HostMatrix& b,
                         std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                         std::int64_t count) override {
    const int threads = configured_threads();
    const double flops = 2.0 * c.rows * c.cols * a.cols;
    if (threads == 1 || count < 2 || flops >= cpu::kMinFlopsPerThread * threads || c.dtype == DType::boolean)
      return core::Device::matmul_batch_host(a, a_step, b, b_step, c, c_step, count);
    with_config(c.dtype, [&](const auto& cfg) {
      using T = typename std::decay_t<decltype(cfg)>::Element;
      run_products(0, count, threads, 64, [&](std::int64_t i) {
        core::HostMatrix ai = a, bi = b;
        ai.data = static_cast<const T*>(a.data) + i * a_step;
        bi.data = static_cast<const T*>(b.data) + i * b_step;
        multiply(cfg, ai, bi, static_cast<T*>(c.data) + i * c_step, c.row_stride, 1);
      });
    });
  }

  // product(i) for first <= i < count on up to `threads` threads, each claiming runs of consecutive
  // products (up to max_run, eight runs a thread at least), so that each reads and writes long
  // stretches of memory: a 32x32 float matrix is one 4 KiB page, the hardware prefetchers stop at
  // page boundaries, and with products claimed one at a time a stack of 10000 took 10.4 ms rather
  // than 8.4 on the 2-core machine. (Prefetching the next product's operands by hand gained nothing
  // on top of the runs.)
  template <class F>
  static void run_products(std::int64_t first, std::int64_t count, int threads, std::int64_t max_run, F&& product) {
    const int use = static_cast<int>(std::clamp<std::int64_t>(count - first, 1, std::max(threads, 1)));
    const std::int64_t run = std::clamp<std::int64_t>((count - first) / (8 * use), 1, max_run);
    std::atomic<std::int64_t> next{first};
    cpu::run_parts(use, use, [&](std::int64_t) {
      for (std::int64_t i0; (i0 = next.fetch_add(run, std::memory_order_relaxed)) < count;)
        for (std::int64_t i = i0; i < std::min(i0 + run, count); ++i) product(i);
    });
  }

 private:
  // Whether a complex M x K x N product that the real path would give the small kernels (small.hpp)
  // runs on the complex kernels instead: from kSmallComplexMacs complex multiply-adds on, with more
  // than 8 columns and a k over 8. Below, or with few columns or a short k, B'' is small and the
  // small kernels' unpacked product wins. The real path writes B'' (4 K N reals) first, which the
  // small sizes pay for in full. 2-core machine (Intel Xeon, AVX-512), us, B'' / complex kernels,
  // blocks alternated in one process: complex64 48^3 15.5 / 8.3, 64^3 26.2 / 18.0, 96^3 64.7 / 49.1,
  // (100 x 37) @ (37 x 61) 23.0 / 14.8, (33 x 200) @ (200 x 17) 29.2 / 14.6; complex128 48^3 23.4 /
  // 14.2, 64^3 51.3 / 31.4, 128^3 188 / 163; but 32^3 2.7 / 3.5, (64 x 64) @ (64 x 8) 3.6 / 6.8,
  // (64 x 8) @ (8 x 64) 2.7 / 3.8.
  // On one thread (a stack's products, one a thread) the kernels win from 16^3: stacks of 10000
  // complex64 products, ms, B'' / kernels: 12^3 4.5 / 4.2, 16^3 9.4 / 5.3, 24^3 31.1 / 23.4, 32^3
  // 56.5 / 35.4 (NumPy 5.5-8.1, 7.9-12.7, 26.1-32.8, 58.7-69.4).
  static constexpr std::int64_t kSmallComplexMacs = 65536, kSmallComplexMacsOneThread = 4096;
  static bool small_complex_on_kernels(std::int64_t M, std::int64_t K, std::int64_t N, int threads) {
    return M > kSkinnyMax && N > 2 * kSkinnyMax && K > 8 &&
           M * K * N >= (threads == 1 ? kSmallComplexMacsOneThread : kSmallComplexMacs);
  }

  // Whether multiply() takes the packed GEMM for an M x K x N product of `size`-byte elements
  // whatever the layouts: neither small.hpp's nor skinny.hpp's shapes.
  static bool takes_packed_gemm(std::int64_t M, std::int64_t K, std::int64_t N, std::size_t size) {
    return M > kSkinnyMax && N > kSkinnyMax && !small_shape(M, K, N, size);
  }

  // c = a @ b: small products run unpacked (small.hpp: every matrix of a stack on its thread;
  // single products on one thread up to kSmallOneThread multiply-adds, below which a second thread
  // costs more than it saves, on `threads` past it), products with few rows or few columns stream
  // their long operand unpacked (skinny.hpp), the rest go through the packed GEMM.
  template <class T>
  static void multiply(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
                       std::int64_t ldc, int threads) {
    if constexpr (std::is_floating_point_v<T>) {
      // A vector (or two) times a matrix streams the matrix: once each of two threads has
      // kMinStreamBytesPerThread of it, they read a half each (256 @ (256 x 256): 0.82x -> 0.95-1.19x
      // NumPy, 2-core machine). Until session 43 the rule took two from half that in all, where a
      // second thread lost or tied: 2-core Xeon, GFLOP/s, two threads / one (NumPy): (1 x 128) @
      // (128 x 256) 25.3 / 32.8 (34.3), (1 x 192) @ (192 x 256) 29.8 / 32.8 (42.1), (2 x 160) @ (160
      // x 256) 44.6 / 47.4 (77.8), complex64 (1 x 128) @ (128 x 128) (two real rows against 128 KiB)
      // 44.2 / 54.5 (46.6).
      const bool one_thread = a.rows * a.cols * b.cols <= kSmallOneThread &&
                              !(a.rows <= 2 && static_cast<double>(a.cols * b.cols * std::int64_t(sizeof(T))) >=
                                                   2 * cpu::kMinStreamBytesPerThread);
      if (cpu::small_gemm<T>(a, b, c, ldc, one_thread ? 1 : threads)) return;
      if (cpu::skinny_gemm<T>(a, b, c, ldc, threads)) return;
    } else {
      if (unpacked_int(a, b, c, ldc, threads)) return;
    }
    cpu::gemm(cfg, a, b, c, ldc, threads);
  }

  // Integer products of at most this many multiply-adds skip the packed GEMM, whose panels and
  // 14 x 32 tile cost a 4 x 4 x 4 product ~150 ns: stacks of them on the 2-core machine (AVX-512,
  // 2 threads), ns a product, packed / plain loop, int32: 2^3 116 / 17, 4^3 146 / 36, 6^3 165 /
  // 86, 8^3 181 / 183, 10^3 202 / 286, 16^3 350 / 945 (int64 alike).
  static constexpr std::int64_t kTinyIntMacs = 512;

  // c = a @ b for unsigned integers (the wrap-around products of every integer dtype) off the
  // packed GEMM: tiny ones by a plain loop, few rows or columns by the skinny kernels (skinny.hpp,
  // the long operand streamed once: the packed GEMM's 14 x 32 tile padded a matrix-vector product
  // 32-fold, (2048 x 2048) @ (2048) int32 at 0.4-0.9x NumPy's plain loop). False: not taken.
  template <class T>
  static bool unpacked_int(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc,
                           int threads) {
    if (a.rows * a.cols * b.cols <= kTinyIntMacs) {
      tiny_int_gemm(a, b, c, ldc);
      return true;
    }
    return cpu::skinny_gemm<T>(a, b, c, ldc, threads);
  }

  // The tiny products' plain loop over the operands where they are.
  template <class T>
  static void tiny_int_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc) {
    const T* pa = static_cast<const T*>(a.data) + a.offset;
    const T* pb = static_cast<const T*>(b.data) + b.offset;
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;
    const std::int64_t ar = a.col_major ? 1 : a.ld, ak = a.col_major ? a.ld : 1;
    const std::int64_t bk = b.col_major ? 1 : b.ld, bn = b.col_major ? b.ld : 1;
    for (std::int64_t i = 0; i < M; ++i) {
      T* ci = c + i * ldc;
      for (std::int64_t j = 0; j < N; ++j) ci[j] = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const T x = pa[i * ar + k * ak];
        const T* bkrow = pb + k * bk;
        for (std::int64_t j = 0; j < N; ++j) ci[j] += x * bkrow[j * bn];
      }
    }
  }

  // Whether every 64-bit value of m is a sign-extended 32-bit one (kernel_table.hpp, u64_narrow):
  // one pass over the operand, against K times as many multiply-adds.
  static bool narrow(const core::HostMatrix& m) {
    const auto* p = static_cast<const std::uint64_t*>(m.data) + m.offset;
    const std::int64_t outer = m.col_major ? m.cols : m.rows, inner = m.col_major ? m.rows : m.cols;
    for (std::int64_t i = 0; i < outer; ++i)
      for (std::int64_t j = 0; j < inner; ++j) {
        const std::uint64_t v = p[i * m.ld + j];
        if (static_cast<std::int64_t>(v) != static_cast<std::int32_t>(v)) return false;
      }
    return true;
  }

  // f(config) with the kernel configuration of a computed dtype (its Element: the C++ type).
  template <class F>
  void with_config(DType t, F&& f) const {
    switch (t) {
      case DType::f32: return f(kernels_.f32);
      case DType::f64: return f(kernels_.f64);
      case DType::u32: return f(kernels_.u32);
      case DType::u64: return f(kernels_.u64);
      default: throw std::logic_error(std::string("cpu:0 does not compute ") + dtype_name(t));
    }
  }

  // The memory copy rate of the backend's threads (bytes read plus bytes written per second):
  // 32 MiB copied in 1 MiB pieces shared out over configured_threads(), best of 3 (~10 ms, once).
  double host_bytes_per_s() override {
    std::call_once(copy_rate_once_, [this] {
      constexpr std::size_t kBytes = std::size_t(32) << 20, kPiece = std::size_t(1) << 20;
      std::vector<unsigned char> src(kBytes, 1), dst(kBytes, 0);  // pages touched before timing
      struct Job {
        const unsigned char* src;
        unsigned char* dst;
        std::atomic<std::size_t> next{0};
      } job{src.data(), dst.data()};
      auto copy = [](void* ctx, int) {
        auto& j = *static_cast<Job*>(ctx);
        for (std::size_t i; (i = j.next.fetch_add(1, std::memory_order_relaxed)) < kBytes / kPiece;)
          std::memcpy(j.dst + i * kPiece, j.src + i * kPiece, kPiece);
      };
      double best = 0;
      for (int r = 0; r < 3; ++r) {
        job.next = 0;
        ThreadPool& pool = ThreadPool::instance();
        std::lock_guard<std::mutex> lock(pool.lock());
        const auto t0 = std::chrono::steady_clock::now();
        pool.run(configured_threads(), copy, &job);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * kBytes / std::max(s, 1e-9));
      }
      copy_rate_ = best;
    });
    return copy_rate_;
  }

  static constexpr std::int64_t kSmallOneThread = 64 * 64 * 64;

  const KernelSet& kernels_;
  DeviceInfo info_;
  std::shared_ptr<core::HostBlockPool> result_pool_;
  std::once_flag copy_rate_once_;
  double copy_rate_ = 0;
};

class CpuBackend final : public core::Backend {
 public:
  const char* name() const override { return "cpu"; }
  const char* label() const override { return "native CPU"; }
  // The thread pool and the result pool rebuild themselves in a forked child (thread_pool.cpp,
  // host_block_pool.cpp); the device holds nothing else a fork could break.
  bool survives_fork() const override { return true; }
  std::vector<std::shared_ptr<core::Device>> devices() override {
    return {std::make_shared<CpuDevice>()};
  }
};

}  // namespace

}  // namespace portmat::cpu

namespace portmat::core {
std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }
}  // namespace portmat::core
