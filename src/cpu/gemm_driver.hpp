// The blocking and packing framework of the CPU backend (the BLIS loop nest around a micro-kernel).
//
//   jc: columns of C in blocks of nc            B block kc x nc, packed once, shared (L3)
//    pc: the inner dimension in blocks of kc
//     ic: rows of C in blocks of mc             A block mc x kc, packed per thread group (L2)
//      jr: NR-wide micro-panels of the B block  one B micro-panel kc x NR (L1/L2)
//       ir: MR-high micro-panels of the A block the micro-kernel: an MR x NR tile of C
//
// or, with GemmConfig::a_outer, its mirror image (ic, pc, jc, ir, jr): the A block mc x kc is
// packed once and shared (L3), a B block kc x nc per step (L2), and the kernel keeps one A
// micro-panel in L1 while it walks the B micro-panels. Which one wins depends on the kernel and
// the caches; kernel_table.cpp picks per ISA and dtype.
//
// Threads claim work items (B panels to pack, A panels to pack, runs of micro-tiles) from atomic
// counters step by step, so a descheduled thread delays no one (details in gemm_driver.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/backend.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

// Packs rows [i0, i0+m) x columns [p0, p0+k) of A into ceil(m/MR) micro-panels of MR x k
// (k-major, zero-padded to MR rows), back to back. B likewise: rows [p0, p0+k) x columns
// [j0, j0+n) into ceil(n/NR) micro-panels of k x NR.
template <class T>
using PackFn = void (*)(const core::HostMatrix& src, std::int64_t r0, std::int64_t rows,
                        std::int64_t c0, std::int64_t cols, T* dst);

// One micro-kernel with the block sizes and packers that go with it: a row of the per-ISA table.
template <class T>
struct GemmConfig {
  using Element = T;
  const char* kernel = "";  // the micro-kernel's name, e.g. "gemm_avx512_f32_14x32"
  int mr = 0, nr = 0;       // its tile
  std::int64_t mc = 0, kc = 0, nc = 0;  // cache blocks (mc a multiple of mr, nc of nr)
  GemmUkernel<T> ukernel = nullptr;
  PackFn<T> pack_a = nullptr;  // A panel packer for this mr
  PackFn<T> pack_b = nullptr;  // B panel packer for this nr
  // The loop order (gemm_driver.cpp). false: B block kc x nc outer (L3), A block mc x kc per step
  // (L2), the kernel keeps a B micro-panel and streams A panels. true: A block mc x kc outer (L3),
  // B block kc x nc per step (L2), the kernel keeps an A micro-panel in L1 and streams B panels.
  bool a_outer = false;
  // The kernel's direct-A form (ukernel.hpp), or null: with A outer, the driver then reads a
  // row-major a in place instead of packing it where A's packing is not amortised (direct_a in
  // gemm_driver.cpp).
  GemmUkernelDirectA<T> ukernel_direct_a = nullptr;
  // The two kernels' forms that prefetch lines as they run (ukernel.hpp, PrefetchLines), or null.
  GemmUkernelPf<T> ukernel_pf = nullptr;
  GemmUkernelDirectAPf<T> ukernel_direct_a_pf = nullptr;
};

// The packers for a tile size, instantiated in gemm_driver.cpp for the shapes the table uses.
template <class T, int MR>
void pack_a_panels(const core::HostMatrix& a, std::int64_t i0, std::int64_t m, std::int64_t p0,
                   std::int64_t k, T* dst);
template <class T, int NR>
void pack_b_panels(const core::HostMatrix& b, std::int64_t p0, std::int64_t k, std::int64_t j0,
                   std::int64_t n, T* dst);

// B's packer for a complex b read as its real form B'' (core/batch.hpp, complex_b): b holds the
// complex K x N matrix (data, offset and ld counted in complex elements, either layout) and the
// panels are those pack_b_panels<T, NR> would make of the 2K x 2N real matrix B''. The complex
// product then runs as one real GEMM that never writes B'' out (cpu_backend.cpp).
template <class T, int NR>
void pack_b_complex_panels(const core::HostMatrix& b, std::int64_t p0, std::int64_t k, std::int64_t j0,
                           std::int64_t n, T* dst);
// pack_b_complex_panels<T, nr> for the tile widths of kernel_table.cpp; null for any other.
template <class T>
PackFn<T> complex_b_packer(int nr);

// Below this many flops per thread, another thread costs more to coordinate than it saves
// (a wake-up and a few barriers are some microseconds; 4 Mflop is ~25 us on one AVX-512 core).
constexpr double kMinFlopsPerThread = 4e6;
// ... except where a product streams its larger operand (matrix-vector products: skinny.cpp, and a
// vector times a small matrix: cpu_backend.cpp): from this many bytes of it on, a second thread
// reads its half from its own core's L2 (a 256 x 256 float32 matrix times a vector, 2-core machine:
// 0.81-0.92x NumPy on one thread, 1.16-1.24x on two).
constexpr double kMinStreamBytesPerThread = 128 << 10;

// Grow-only scratch for packed panels, reused across calls: a fresh allocation per call would
// page-fault megabytes every time. 64-byte (cache-line) aligned; large buffers are 2 MiB aligned
// and advised to use huge pages (fewer TLB misses when the kernel walks a big packed B block).
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  void* get(std::size_t bytes);  // at least `bytes`, the same block while it is large enough

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// A panel of `bytes` for one call (the short operand of skinny.cpp's rows_gemm and skinny_gemm,
// small.cpp's copy of b's strips): of a buffer kept per thread for the next call up to
// kKeptPanelBytes, else of `once` (the caller's, freed on return). One buffer serves them all: a
// thread runs one product at a time.
constexpr std::size_t kKeptPanelBytes = 4 << 20;
template <class T>
T* kept_panel(std::size_t bytes, Scratch& once) {
  thread_local Scratch kept;
  return static_cast<T*>((bytes <= kKeptPanelBytes ? kept : once).get(bytes));
}

// Whether an A/B switch of the CPU paths (PORTMAT_CPU_PIPELINE, PORTMAT_CPU_ROWS: measurements)
// is set to 0: its value starts with '0'. Callers read it once per process.
bool switched_off(const char* name);

// c = a @ b (a: M x K, b: K x N, both row- or column-major; c row-major, M, N, K > 0) on up to
// `threads` threads of the shared pool: fewer for small products, and on the calling thread
// alone (without queueing for the pool) when one is enough.
template <class T>
void gemm(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
          T* c, std::int64_t ldc, int threads, double min_flops_per_thread = kMinFlopsPerThread);

// The L1 data cache the driver plans for: lines of `line` bytes, `sets` sets of `ways` ways
// (detected once, through sysconf). The direct-A kernel's mr rows of a crowd it where more of them
// share a set than its ways and two (a_rows_crowd_l1; gemm_driver.cpp says why): a's rows are then
// packed, or copied a line apart. set_l1_geometry makes the driver plan for another CPU's (tests;
// a zero field: the detected one again).
struct L1Geometry {
  std::int64_t line, sets;
  int ways;
};
L1Geometry l1_geometry();
void set_l1_geometry(const L1Geometry& l1);
bool a_rows_crowd_l1(std::int64_t ld, std::size_t elem, int mr);

// The plan gemm() would run for these operands, for tests: "blocked", "split_k", "split_n", "split_m"
// or "split_cols".
template <class T>
std::string gemm_plan(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
                      int threads, double min_flops_per_thread = kMinFlopsPerThread);

}  // namespace portmat::cpu
