// The per-ISA table of micro-kernels and block sizes, and run-time ISA detection.
//
// Block sizes (elements), sized for the caches of the CPUs each ISA appears on:
//   kc: B micro-panel kc x nr streamed through L1 per micro-tile; kc also amortises loading and
//       storing the C tile over kc rank-1 updates.
//   mc: the A block mc x kc lives in L2 and is reused across all B micro-panels of the B block.
//   nc: the B block kc x nc lives in L3 (or L2 on big-L2 parts) and is reused across A blocks.
// AVX-512 numbers were tuned on a 2-core Sapphire Rapids Xeon VM (48 KiB L1d, 2 MiB L2 per core).
// float32 uses the A-outer loop order (gemm_driver.cpp), where the roles of mc and nc swap: the
// 14 x kc A micro-panel (28 KiB at kc 512) stays in L1 while the kernel streams the B block's
// micro-panels from L2, and the A block mc x kc is the one shared from L3. Against NumPy/OpenBLAS
// on 2 threads, one process, alternating blocks (ratio > 1: portmat faster), n = 4096 / 2048:
//   B-outer, mc 336 kc 512 nc 4096 (before):    0.91-0.92 / 0.94-0.95
//   A-outer, mc 1344 kc 512 nc 512:              0.93      / 0.97
//   A-outer, mc 4200 kc 512 nc 512:              0.93-0.98 / 1.01-1.02
//   A-outer, mc 4200 kc 512 nc 256 / 320 / 384:  0.99-1.01 / 1.03-1.05  (with the early C
//     prefetch of gemm_avx512.cpp; without it 1-3% less)
//   A-outer, mc 4200 kc 384 nc 384-512:          0.97-0.98 / 1.01-1.04
// So: kc 512, nc 256 (a 512 KiB B block per step: both cores read all of it, each from its own
// L2; 256 rather than 320 because it divides the power-of-two sizes: 320 leaves a 128-wide runt
// block at n = 2048, and in the same runs against Debian's OpenBLAS nc 256 gave 1.01-1.02 /
// 1.01-1.05 / 1.00-1.03 at n = 1024 / 2048 / 4096 where 320 gave 0.98-1.00 / 1.00-1.05 / 1.00),
// mc 4200 (14 x 300): all rows up to 4200 in one A block, 8 MiB at kc 512, so B is packed
// once per (jc, pc); a smaller mc re-packs B once per A block (mc 1344: 2-5% slower at 2048-4096).
// Splitting each step's B panels between the threads (half the B block per L2, every A panel read
// by both) measured 2-5% slower than splitting the A panels. The A micro-panel is reused over
// only nc / 32 = 8 kernel calls, but it is 28 KiB read once per 8 x 7k cycles: no strain on L3.
// On the H200's 16-core host (a noisy VM) the A-outer order measured 1.38x / 1.43x / 1.46x / 1.50x
// NumPy (OpenBLAS 0.3.34) at n = 512 / 1024 / 2048 / 4096 in one run, and 0.84x / 1.01x / 1.28x /
// 1.41x with nc 320 in another; B-outer had 1.25x / 1.20x / 1.22x / 1.32x in an earlier session.
// float64 uses the same A-outer order with the same footprints: kc 256 makes the A micro-panel
// 28 KiB and nc 256 the B block 512 KiB. Against the B-outer order it had before (mc 112, kc 768,
// nc 2048), 2 threads, `bench/diagnostics/cpu_env_ab.py` (a process per variant, alternating rounds), GFLOP/s:
//   n = 1024: 139-145 against 131-140;  n = 2048: 138-146 against 125-139 (NumPy 133-147);
//   n = 4096: 140-152 against 134-142;  n = 256 / 512: the same within 1%.
// kc 320-384 or nc 128 / 384 were no better at n = 2048.
// AVX2 and scalar sizes are the usual Haswell-class ones. The complex kernels' tiles and blocks
// are the tunables at the top of their files (kernels/gemm_complex_<isa>.cpp), measured there.
// NEON sizes are not tuned on hardware yet; they are sized for the smaller caches common on ARM
// cores (Cortex-A72/A76/A78, Neoverse N1/V1: 32-64 KiB L1d, 256 KiB-1 MiB L2, 0-4 MiB L3 or SLC
// shared): kc 256 (float32) / 192 (float64) keeps the B micro-panel at 12 / 9 KiB, so it stays in
// a 32 KiB L1d beside the A micro-panel streaming past it (8 / 12 KiB); mc 128 / 96 makes the A
// block 128 / 144 KiB, about half of a 256 KiB L2; nc 1536 makes the B block 1.5 / 2.25 MiB.
#include "cpu/kernel_table.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu/kernels/gemm_ref.hpp"

namespace portmat::cpu {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
// PackFn adapter for the AVX-512 A packer, which takes one micro-panel as plain pointers (so that
// no header type is compiled with AVX-512 flags). Replaces pack_a_panels<float, 14>'s scalar
// transpose: measured 1.3% of a 2-thread n = 4096 product before.
void pack_a_avx512_f32(const core::HostMatrix& a, std::int64_t i0, std::int64_t m,
                       std::int64_t p0, std::int64_t k, float* dst) {
  const float* src = static_cast<const float*>(a.data) + a.offset;
  for (std::int64_t r = 0; r < m; r += 14, dst += 14 * k) {
    const std::int64_t i = i0 + r;
    const float* origin = a.col_major ? src + p0 * a.ld + i : src + i * a.ld + p0;
    const int rows = static_cast<int>(std::min<std::int64_t>(14, m - r));
    pack_a_avx512_f32_14(origin, a.ld, a.col_major, rows, k, dst);
  }
}
// PackFn for the AVX2 6-row float32 panels: whole panels of a row-major a through the AVX2
// transposing packer, a column-major a and a partial last panel through the portable one.
void pack_a_avx2_f32(const core::HostMatrix& a, std::int64_t i0, std::int64_t m, std::int64_t p0,
                     std::int64_t k, float* dst) {
  if (a.col_major) return pack_a_panels<float, 6>(a, i0, m, p0, k, dst);
  const float* src = static_cast<const float*>(a.data) + a.offset;
  for (std::int64_t r = 0; r < m; r += 6, dst += 6 * k) {
    if (m - r >= 6)
      pack_a_avx2_f32_6(src + (i0 + r) * a.ld + p0, a.ld, k, dst);
    else
      pack_a_panels<float, 6>(a, i0 + r, m - r, p0, k, dst);
  }
}
// The same packer for uint32 panels: it only moves 32-bit lanes, whatever they hold.
void pack_a_avx512_u32(const core::HostMatrix& a, std::int64_t i0, std::int64_t m,
                       std::int64_t p0, std::int64_t k, std::uint32_t* dst) {
  pack_a_avx512_f32(a, i0, m, p0, k, reinterpret_cast<float*>(dst));
}
#endif

// PORTMAT_CPU_PACK_A=0: the portable A packer instead of an ISA's own (for A/B measurements; read
// once per process).
template <class F>
F pack_a_switch(F isa, F portable) {
  static const bool off = switched_off("PORTMAT_CPU_PACK_A");
  return off ? portable : isa;
}

// Integer products for every set: the portable scalar kernels (x86 sets replace them below).
void set_scalar_integers(KernelSet& s) {
  s.u32 = {"gemm_ref_u32_4x8", 4, 8, 4 * 32, 256, 1024, gemm_ref_u32_4x8,
           pack_a_panels<std::uint32_t, 4>, pack_b_panels<std::uint32_t, 8>};
  s.u64 = {"gemm_ref_u64_4x4", 4, 4, 4 * 32, 256, 1024, gemm_ref_u64_4x4,
           pack_a_panels<std::uint64_t, 4>, pack_b_panels<std::uint64_t, 4>};
  s.u64_narrow = s.u64;
}

// The driver's configuration of a complex kernel: its tile and blocks (the tunables of its kernel
// file) and the plain packers of that tile (gemm_driver.cpp instantiates rows 2-4 or 7 and 4, 6,
// 8, 12 or 16 columns); a tile without packers leaves the set without complex kernels.
template <class C>
GemmConfig<C> complex_config(const ComplexKernel<C>& k) {
  GemmConfig<C> g;
  g.kernel = k.name, g.mr = k.mr, g.nr = k.nr, g.mc = k.mc, g.kc = k.kc, g.nc = k.nc, g.a_outer = k.a_outer;
  switch (k.mr) {
    case 2: g.pack_a = pack_a_panels<C, 2>; break;
    case 3: g.pack_a = pack_a_panels<C, 3>; break;
    case 4: g.pack_a = pack_a_panels<C, 4>; break;
    case 7: g.pack_a = pack_a_panels<C, 7>; break;
    default: return {};
  }
  switch (k.nr) {
    case 4: g.pack_b = pack_b_panels<C, 4>; break;
    case 6: g.pack_b = pack_b_panels<C, 6>; break;
    case 8: g.pack_b = pack_b_panels<C, 8>; break;
    case 12: g.pack_b = pack_b_panels<C, 12>; break;
    case 16: g.pack_b = pack_b_panels<C, 16>; break;
    default: return {};
  }
  g.ukernel = k.ukernel;
  return g;
}

#if defined(__x86_64__) || defined(_M_X64)
// The AVX2 integer kernels, blocked as the AVX2 float ones.
void set_avx2_integers(KernelSet& s) {
  s.u32 = {"gemm_avx2_u32_6x16", 6, 16, 6 * 24, 256, 4096, gemm_avx2_u32_6x16,
           pack_a_panels<std::uint32_t, 6>, pack_b_panels<std::uint32_t, 16>};
  s.u64 = {"gemm_avx2_u64_6x8", 6, 8, 6 * 12, 256, 4096, gemm_avx2_u64_6x8,
           pack_a_panels<std::uint64_t, 6>, pack_b_panels<std::uint64_t, 8>};
  s.u64_narrow = s.u64;
  s.u64_narrow.kernel = "gemm_avx2_u64n_6x8";
  s.u64_narrow.ukernel = gemm_avx2_u64n_6x8;
}
#endif

std::vector<KernelSet> detect() {
  std::vector<KernelSet> sets;
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0).
  if (__builtin_cpu_supports("avx512f")) {
    KernelSet s;
    s.isa = "avx512";
    s.f32 = {"gemm_avx512_f32_14x32", 14, 32, 14 * 300, 512, 256, gemm_avx512_f32_14x32,
             pack_a_avx512_f32, pack_b_panels<float, 32>, /*a_outer=*/true, gemm_avx512_f32_14x32_direct_a,
             gemm_avx512_f32_14x32_pf, gemm_avx512_f32_14x32_direct_a_pf};
    s.f64 = {"gemm_avx512_f64_14x16", 14, 16, 14 * 300, 256, 256, gemm_avx512_f64_14x16,
             pack_a_panels<double, 14>, pack_b_panels<double, 16>, /*a_outer=*/true,
             gemm_avx512_f64_14x16_direct_a};
    if (__builtin_cpu_supports("avx512dq")) {  // vpmullq: gemm_avx512_int.cpp's flags
      // Blocked as the float kernels of the same widths (4- and 8-byte elements).
      s.u32 = {"gemm_avx512_u32_14x32", 14, 32, 14 * 300, 512, 256, gemm_avx512_u32_14x32,
               pack_a_avx512_u32, pack_b_panels<std::uint32_t, 32>, /*a_outer=*/true};
      s.u64 = {"gemm_avx512_u64_14x16", 14, 16, 14 * 300, 256, 256, gemm_avx512_u64_14x16,
               pack_a_panels<std::uint64_t, 14>, pack_b_panels<std::uint64_t, 16>, /*a_outer=*/true};
      s.u64_narrow = s.u64;  // vpmullq is one instruction already
    } else {
      set_avx2_integers(s);  // every AVX-512 CPU has AVX2
    }
    s.c64 = complex_config(kComplexAvx512C64);
    s.c128 = complex_config(kComplexAvx512C128);
    sets.push_back(s);
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    KernelSet s;
    s.isa = "avx2";
    s.f32 = {"gemm_avx2_f32_6x16", 6, 16, 6 * 24, 256, 4096, gemm_avx2_f32_6x16,
             pack_a_switch(pack_a_avx2_f32, pack_a_panels<float, 6>), pack_b_panels<float, 16>};
    s.f64 = {"gemm_avx2_f64_6x8", 6, 8, 6 * 12, 256, 4096, gemm_avx2_f64_6x8,
             pack_a_panels<double, 6>, pack_b_panels<double, 8>};
    set_avx2_integers(s);
    s.c64 = complex_config(kComplexAvx2C64);
    s.c128 = complex_config(kComplexAvx2C128);
    sets.push_back(s);
  }
#endif
#if defined(__aarch64__)
  {  // NEON (AdvSIMD) is mandatory on AArch64: no run-time check.
    KernelSet s;
    s.isa = "neon";
    s.f32 = {"gemm_neon_f32_8x12", 8, 12, 8 * 16, 256, 1536, gemm_neon_f32_8x12,
             pack_a_panels<float, 8>, pack_b_panels<float, 12>};
    s.f64 = {"gemm_neon_f64_8x6", 8, 6, 8 * 12, 192, 1536, gemm_neon_f64_8x6,
             pack_a_panels<double, 8>, pack_b_panels<double, 6>};
    set_scalar_integers(s);
    sets.push_back(s);
  }
#endif
  KernelSet s;
  s.isa = "scalar";
  s.f32 = {"gemm_ref_f32_4x8", 4, 8, 4 * 32, 256, 1024, gemm_ref_f32_4x8,
           pack_a_panels<float, 4>, pack_b_panels<float, 8>};
  s.f64 = {"gemm_ref_f64_4x4", 4, 4, 4 * 32, 256, 1024, gemm_ref_f64_4x4,
           pack_a_panels<double, 4>, pack_b_panels<double, 4>};
  set_scalar_integers(s);
  sets.push_back(s);
  return sets;
}

}  // namespace

const std::vector<KernelSet>& supported_kernel_sets() {
  static const std::vector<KernelSet> sets = detect();
  return sets;
}

namespace {

// PORTMAT_CPU_BLOCKS="mc,kc,nc[,a_outer]" (float32) or "f64:mc,kc,nc[,a_outer]" (likewise "c64:",
// "c128:" for the complex kernels, in complex elements): block sizes (and
// the loop order: 1 A outer, 0 B outer; gemm_driver.cpp) for tuning on a new CPU without
// rebuilding. mc and nc are rounded up to the tile; malformed or non-positive values are ignored.
template <class T>
void override_blocks(GemmConfig<T>& cfg, const char* prefix) {
  const char* e = std::getenv("PORTMAT_CPU_BLOCKS");
  if (!e || !*e || !cfg.ukernel) return;
  const std::size_t plen = std::strlen(prefix);
  if (plen) {
    if (std::strncmp(e, prefix, plen) != 0) return;
    e += plen;
  } else if (std::strchr(e, ':')) {
    return;  // meant for another dtype
  }
  long mc = 0, kc = 0, nc = 0, a_outer = -1;
  const int got = std::sscanf(e, "%ld,%ld,%ld,%ld", &mc, &kc, &nc, &a_outer);
  if (got < 3 || mc <= 0 || kc <= 0 || nc <= 0 || (got == 4 && a_outer != 0 && a_outer != 1)) return;
  cfg.mc = (mc + cfg.mr - 1) / cfg.mr * cfg.mr;
  cfg.kc = kc;
  cfg.nc = (nc + cfg.nr - 1) / cfg.nr * cfg.nr;
  if (got == 4) cfg.a_outer = a_outer == 1;
}

}  // namespace

const KernelSet& active_kernel_set() {
  static const KernelSet chosen = [] {
    const auto& sets = supported_kernel_sets();
    KernelSet s = sets.front();
    if (const char* want = std::getenv("PORTMAT_CPU_ISA"); want && *want)
      for (const auto& t : sets)
        if (std::strcmp(t.isa, want) == 0) s = t;
    override_blocks(s.f32, "");
    override_blocks(s.f64, "f64:");
    override_blocks(s.c64, "c64:");
    override_blocks(s.c128, "c128:");
    return s;
  }();
  return chosen;
}

namespace {

// The flop/s of one FMA loop on this core (fma_chains: 12 independent chains a round).
// 300000 rounds = 3.6M FMA instructions: ~0.55 ms per try at two per cycle, long enough to
// measure the clock the core sustains under AVX-512 load rather than its first burst (on the
// 2-core VM, 0.05 ms tries gave 209-242 GFLOP/s per core from one process to the next, 0.7 ms
// tries 213-218). The best of a few tries skips the first one's frequency ramp (AVX-512
// licence) and any interruption; ~3 ms once per loop and process.
[[maybe_unused]] double fma_rate(float (*loop)(long), double flops_per_round) {
  constexpr long rounds = 300000;
  volatile float sink = loop(rounds);
  double best = 0.0;
  for (int t = 0; t < 5; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + loop(rounds);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, rounds * flops_per_round / s);
  }
  return best;
}

#if defined(__x86_64__) || defined(_M_X64)
// Each measured once per process (the device's peak and wide_fma_at_half_rate share them); only
// called where the CPU has the ISA.
double avx512_fma_rate() {
  static const double r = fma_rate(fma_loop_avx512_f32, 12 * 16 * 2);
  return r;
}
double avx2_fma_rate() {
  static const double r = fma_rate(fma_loop_avx2_f32, 12 * 8 * 2);
  return r;
}
#endif

}  // namespace

double measure_core_peak(const KernelSet& set) {
#if defined(__aarch64__)
  if (std::strcmp(set.isa, "neon") == 0) return fma_rate(fma_loop_neon_f32, 12 * 4 * 2);
#elif defined(__x86_64__) || defined(_M_X64)
  if (std::strcmp(set.isa, "avx512") == 0) return avx512_fma_rate();
  if (std::strcmp(set.isa, "avx2") == 0) return avx2_fma_rate();
#endif
  (void)set;
  return 0.0;
}

bool wide_fma_at_half_rate() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool half = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
      return false;
    // A core with full-width 512-bit FMA units measures about twice AVX2's flops; one that splits
    // each 512-bit FMA in two, about the same (2-core Zen 4, 2026-12-04: 116.8 against 117.3 GFLOP/s
    // a core).
    return avx512_fma_rate() < 1.4 * avx2_fma_rate();
  }();
  return half;
#else
  return false;
#endif
}

}  // namespace portmat::cpu
