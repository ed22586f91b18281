// The blocking, packing and threading around the micro-kernels (see gemm_driver.hpp).
//
// Portable C++ compiled without ISA flags: everything here is memory movement and loop control;
// all arithmetic that matters happens inside the micro-kernel chosen by kernel_table.cpp.
#include "cpu/gemm_driver.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "cpu/thread_pool.hpp"

#ifdef __linux__
#include <sys/mman.h>
#endif
#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace portmat::cpu {

namespace {

// What the driver does with an element as a number: the packers' zero padding, split_k's sums
// of partial results, and the flops of one multiply-add (the plan's thread count). The complex
// elements (ukernel.hpp) are pairs of reals: everything else treats them as opaque bytes.
template <class T>
struct ElementOps {
  static constexpr double flops_per_madd = 2;
  static T zero() { return T(0); }
  static void add_to(T& x, const T& y) { x += y; }
};
template <class C, class R>
struct ComplexOps {
  static constexpr double flops_per_madd = 8;  // four real multiplies and four additions
  static C zero() { return C{R(0), R(0)}; }
  static void add_to(C& x, const C& y) { x.re += y.re, x.im += y.im; }
};
template <>
struct ElementOps<Complex64> : ComplexOps<Complex64, float> {};
template <>
struct ElementOps<Complex128> : ComplexOps<Complex128, double> {};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// The calling thread's scratch for single-threaded plans (gemm on one thread, split_k's parts).
Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// How one call is cut up: block sizes fitted to the shape, and the work items of each step.
//
// Two loop orders (GemmConfig::a_outer), mirror images of each other. One operand is "outer":
// its block is packed once and shared by several steps, the other "inner" one is packed per step.
//   B outer (BLIS's order): steps (jc, pc, ic); B block kc x nc (L3) per (jc, pc), A block
//     mc x kc (L2) per step; compute items: one B micro-panel x a run of A micro-panels, so the
//     kernel keeps its B panel and streams A panels from L2.
//   A outer: steps (ic, pc, jc); A block mc x kc (L3) per (ic, pc), B block kc x nc (L2) per step;
//     compute items: one A micro-panel x a run of B micro-panels, so the A micro-panel stays in L1
//     and the B panels stream from L2 (for a row-major C this is BLIS's order for C^T = B^T A^T).
//
// Each step packs its inner block (items: micro-panels) into one of two buffers, and the first
// step of each outer block packs that (items: micro-panels); then the step's micro-tiles are
// computed (items: one outer micro-panel times a run of inner micro-panels). Threads claim items
// from per-step atomic counters, so the work goes to whichever threads are running: a thread the
// OS has descheduled (a busy machine, another library's spinning workers) slows the call down by
// at most one item, and the caller finishes alone if no worker shows up at all. Ordering is by
// completion counts:
//   compute(s)   waits for inner(s) and the step's outer block to be packed;
//   inner(s)     waits for compute(s-2), the last user of its buffer (double buffering lets the
//                first threads done with step s-1 pack ahead while others finish);
//   outer block  waits for every compute step of the previous outer block.
// The last rule also orders the pc blocks of each C tile: every step of an outer block (pc) is
// computed before the next one (pc + 1), which accumulates onto it, is even packed.
// Every wait is for items already claimed, and a claimed item never waits: no deadlock.
struct Plan {
  std::int64_t m, n, k;
  std::int64_t mc, kc, nc;          // actual block sizes (<= the table's)
  std::int64_t jc_blocks, pc_blocks, ic_blocks;
  std::int64_t chunks;              // compute items per outer micro-panel
  int threads;
  bool a_outer;
  bool group_a = false, group_b = false;  // pack that operand in groups of panels (pack_group)
  bool pipeline = false;  // two outer buffers, one thread packing ahead (make_plan)
  bool direct_a = false;  // A outer, read in place by the direct-A kernel (make_plan)
  std::int64_t steps() const { return jc_blocks * pc_blocks * ic_blocks; }
  std::int64_t inner_blocks() const { return a_outer ? jc_blocks : ic_blocks; }  // per outer
  std::int64_t outer_blocks() const { return steps() / inner_blocks(); }
};

constexpr std::int64_t kPipelineBytes = 16 << 20;
// PORTMAT_CPU_PIPELINE=0 turns Plan::pipeline off (for A/B measurements; read once per process).
bool pipeline_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_PIPELINE");
  return on;
}

// Single-threaded plans prefetch the next B block's source up to this size (run_thread): the
// parts of split_k (64 x 16384 @ 16384 x 256: 256 x 256 blocks) and of split_n; a block bigger
// than L2 would only evict the blocks in use. 2-core machine, 12-20 alternating rounds of 15
// calls, paired medians: 64 x 16384 @ 16384 x 256 1.12x (quartiles 1.00-1.19) as fast, 64 x 64
// @ 64 x 65536 (split_n) 1.09x (1.00-1.12). PORTMAT_CPU_PREFETCH_B=0 turns it off (for A/B
// measurements, read once per process).
constexpr std::int64_t kPrefetchBBytes = 256 << 10;
// Whether a single-threaded plan prefetches a B block of kc x nc elements of `elem` bytes.
constexpr bool prefetches_b_block(std::int64_t kc, std::int64_t nc, std::size_t elem) {
  return kc * nc * static_cast<std::int64_t>(elem) <= kPrefetchBBytes;
}
bool prefetch_b_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_PREFETCH_B");
  return on;
}
// Where the kernel has a prefetching form (GemmConfig::ukernel_pf), it issues those lines itself,
// one a k step among its multiply-adds; before, a burst of them before each micro-tile (~100 lines
// at 64 x 16384 @ 16384 x 256) outran the misses a core keeps in flight and the thread waited:
// 2-core Xeon, GFLOP/s, the kernel's / bursts / no prefetch: 64 x 16384 @ 16384 x 256 202.8 /
// 193.4 / 199.3, 64 x 65536 @ 65536 x 64 195.4 / 184.2 / 189.6 (docs/cpu.md, "Prefetching the next
// B block"). PORTMAT_CPU_KERNEL_PF=0 goes back to the bursts (A/B measurements; read once per
// process).
bool kernel_pf_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_KERNEL_PF");
  return on;
}

// Direct A (GemmConfig::ukernel_direct_a): with A outer, a row-major a's full micro-panels are
// read in place by the kernel instead of packed (an edge panel of fewer than mr rows still is).
// Packing an A block costs about what the kernel spends on it against 1.5 B blocks; the direct
// kernel runs about 3.5% slower (14 rows streamed from a's rows rather than one contiguous panel).
// So it pays while each A block meets at most kDirectAMaxUses B blocks. 2-core Xeon, one thread,
// 512^3 (two B blocks), GFLOP/s in one loop, packed A + packed B / direct A + packed B / kernel
// alone: 151-156 / 158-162 / 166-176, the same at a's leading dimensions 512-4096 (the 14 rows'
// lines in one L1 set at 4 KiB multiples cost nothing measurable: each line serves 16 k steps).
// Only plans on one thread (a call on one thread, and the parts of split_n, split_m and split_k):
// a multi-threaded plan shares the packing of its A block between the threads, and with a read
// in place it lost (1024^3 on two threads: 255 against 296 GFLOP/s, medians of 5 rounds).
// Splitting few-step products (squares of 384-1024) into column chunks read this way is on the
// branch exp/split-n-wide: docs/cpu.md, "Direct A".
// PORTMAT_CPU_DIRECT_A=0 turns it off (for A/B measurements; read once per process).
constexpr std::int64_t kDirectAMaxUses = 4;
bool direct_a_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_DIRECT_A");
  return on;
}
// Whether cfg's kernel can read this a in place (the loop order, a direct-A form, a row-major a).
template <class T>
bool reads_a_in_place(const GemmConfig<T>& cfg, const core::HostMatrix& a) {
  return cfg.a_outer && cfg.ukernel_direct_a && !a.col_major && direct_a_enabled();
}

// The direct-A kernel reads mr rows of a at once, each row's line in the L1 set its address
// gives. Where a's rows are a multiple of 4 KiB apart (a row of 1024 floats, or of 16384) they all
// fall in one set, and on an 8-way L1 the kernel's loads missed it: 2-core Zen 4 (32 KiB, 8 ways,
// 64 sets), one process each, alternating rounds, GFLOP/s, a read in place / a's rows copied a
// line apart / NumPy: 1024^3 (split_cols) 129 / 193 / 189, (64 x 16384) @ (16384 x 256)
// (split_k's parts) 107 / 139 (there packed) / 133, (64 x 65536) @ (65536 x 64) 99 / 129 / 107;
// 512^3, 7 rows a set, 203 / 208 / 196. On the Xeon (48 KiB, 12 ways) 14 rows a set cost nothing
// measurable (512^3 on one thread, a's rows 512-4096 floats apart: above). So the rows crowd the
// L1 where more of the mr rows share a set than its ways and two; the geometry is the C library's
// (sysconf), 64 sets of 8 ways of 64 bytes where it says nothing. Crowded, single-thread plans
// pack A and split_cols reads a copy. PORTMAT_CPU_L1_ROWS=0 ignores the crowding (A/B
// measurements; read once per process).
L1Geometry detected_l1() {
  L1Geometry l1{64, 64, 8};
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL1_DCACHE_ASSOC) && defined(_SC_LEVEL1_DCACHE_LINESIZE)
  const long size = sysconf(_SC_LEVEL1_DCACHE_SIZE), ways = sysconf(_SC_LEVEL1_DCACHE_ASSOC),
             line = sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
  if (size > 0 && ways > 0 && ways <= 64 && line > 0 && size % (ways * line) == 0)
    l1 = L1Geometry{line, size / (ways * line), static_cast<int>(ways)};
#endif
  return l1;
}
std::atomic<std::int64_t> l1_set_line{0}, l1_set_sets{0};  // set_l1_geometry's (tests)
std::atomic<int> l1_set_ways{0};
bool l1_rows_check_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_L1_ROWS");
  return on;
}
// The most of `rows` rows, `stride_bytes` apart, whose first bytes share an L1 set.
int rows_per_l1_set(std::int64_t stride_bytes, int rows, const L1Geometry& l1) {
  int most = 0;
  for (int r = 0; r < rows; ++r) {
    int same = 0;
    for (int q = 0; q < rows; ++q)
      same += (r * stride_bytes / l1.line - q * stride_bytes / l1.line) % l1.sets == 0;
    most = std::max(most, same);
  }
  return most;
}

constexpr std::int64_t kMaxBlockGrowth = 16;
constexpr std::int64_t kMaxTinyMBBytes = 8 << 20;
constexpr std::int64_t kTinyMPanels = 8;
constexpr double kMinResultBytesPerThread = 256 << 10;  // make_plan's threads, by c's bytes

// The plan for c = a @ b.
template <class T>
Plan make_plan(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
               int max_threads, double min_flops_per_thread, bool widen_tiny_m = true) {
  const std::int64_t m = a.rows, n = b.cols, k = a.cols;
  Plan p{};
  p.m = m, p.n = n, p.k = k;
  p.a_outer = cfg.a_outer;
  p.group_a = a.col_major, p.group_b = !b.col_major;  // stored along the panels
  // Equal blocks rather than full ones plus a runt: a K of 400 with kc 384 becomes 2 x 200.
  p.pc_blocks = ceil_div(k, cfg.kc);
  p.kc = ceil_div(k, p.pc_blocks);
  // The cache budgets are the blocks' bytes (mc x kc and kc x nc elements): a K shorter than kc
  // leaves them partly unused, so mc and nc grow in proportion (up to kMaxBlockGrowth times).
  // Fewer, larger steps: 16 x 16 @ 16 x 65536 took 256 steps of 16 x 16 x 256 on the H200's
  // host (nc 256), each a wait for every thread.
  const std::int64_t grow = std::clamp<std::int64_t>(cfg.kc / p.kc, 1, kMaxBlockGrowth);
  // An A block of a few micro-panels (at most kTinyMPanels: few rows of c) uses each B block only
  // that often, so B blocks need not fit a cache: as wide as kMaxTinyMBBytes allow. On the H200's
  // host (A outer, nc 256) 8 x 4096 @ 4096 x 4096 took 128 steps of a 512 x 256 B block, each a
  // wait for 16 threads: 0.39x NumPy; with B blocks of 4096 columns 1.08x (16 rows 0.41x -> 0.60x).
  const std::int64_t tiny_m_nc = kMaxTinyMBBytes / (p.kc * static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t nc_max = widen_tiny_m && ceil_div(m, cfg.mr) <= kTinyMPanels
                                  ? std::max(cfg.nc * grow, std::min(cfg.nc * kMaxBlockGrowth, tiny_m_nc))
                                  : cfg.nc * grow;
  p.jc_blocks = ceil_div(n, nc_max);
  p.nc = round_up(ceil_div(n, p.jc_blocks), cfg.nr);
  p.jc_blocks = ceil_div(n, p.nc);
  p.ic_blocks = ceil_div(m, cfg.mc * grow);
  p.mc = round_up(ceil_div(m, p.ic_blocks), cfg.mr);
  p.ic_blocks = ceil_div(m, p.mc);
  const double flops = ElementOps<T>::flops_per_madd * m * n * k;
  p.threads = max_threads;
  // Threads: enough multiply-adds for each (min_flops_per_thread), or enough of c to write
  // (kMinResultBytesPerThread). A short K writes a large c with few multiply-adds an element: c's
  // stores set its time, and one core's stores do not reach the memory's speed. 2-core machine,
  // float32, a process each, 3 alternating rounds of medians of 9 x 3-12 calls (us), threads by
  // flops alone / now: (1024 x 2) @ (2 x 1024) 251-254 / 115-119, (384 x 16) @ (16 x 384) 42 /
  // 23-33, (512 x 4) @ (4 x 512) 50-51 / 32-48. On the H200's 16-core host (2048 x 1) @ (1 x 2048)
  // ran on 2 threads (611 us, against the GPU's 364 with the transfers; session 28): its 16 MiB of
  // c now get all 16. (256 x 8) @ (8 x 256), 256 KiB of c, tied on two threads (11.2-15.3 against
  // 9.6-12.5 us), hence twice the skinny streams' 128 KiB a thread.
  if (min_flops_per_thread > 0) {
    const double c_bytes = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(sizeof(T));
    p.threads = static_cast<int>(std::min<double>(
        p.threads, std::max(flops / min_flops_per_thread, c_bytes / kMinResultBytesPerThread)));
  }
  p.threads = std::max(p.threads, 1);
  // Enough compute items per step to balance (4 per thread), but no smaller than needed: each
  // item re-reads its outer micro-panel, and a long run of inner panels amortises the claim.
  const std::int64_t n_panels = ceil_div(p.nc, cfg.nr), m_panels = ceil_div(p.mc, cfg.mr);
  const std::int64_t outer = p.a_outer ? m_panels : n_panels;
  const std::int64_t inner = p.a_outer ? n_panels : m_panels;
  p.chunks = std::min(inner, std::max<std::int64_t>(1, ceil_div(4 * p.threads, outer)));
  // With one step per outer block (a single inner block: M <= mc for B outer, few rows, short K
  // over a wide b), packing and computing take turns: every thread packs an outer block from
  // memory (at the memory's speed, no multiply-adds), then every thread computes on it (the memory
  // idle). 16 x 4096 @ 4096 x 4096 on the 2-core machine: 42% of the time in the B packer, 41% in
  // the kernel (perf). The outer block is then double-buffered and one thread packs the next block
  // while the others compute on this one, joining them when it is done: the pack's memory time
  // and the multiply-adds overlap. (A thread packs at most ~11 GB/s on that machine, so the gain
  // is bounded: the thread-time of packing and of computing stays the same; docs/cpu.md.)
  // Only where two outer blocks fit kPipelineBytes (half the 2-core machine's L3), so that both
  // stay in L3, and the inner operand is a few micro-panels (few rows of c for B outer): a step
  // then computes at most kTinyMPanels tiles per outer micro-panel, so packing takes about as long
  // as computing. With more (64 x 64 @ 64 x 65536: 11 A panels) the compute dominates and the lone
  // packer's memory traffic slowed the others: 4.3-4.9 against 4.2-4.6 ms.
  const std::int64_t inner_tiles = p.a_outer ? ceil_div(n, cfg.nr) : ceil_div(m, cfg.mr);
  const std::int64_t outer_bytes =
      (p.a_outer ? round_up(p.mc, cfg.mr) * p.kc : p.kc * round_up(p.nc, cfg.nr)) * static_cast<std::int64_t>(sizeof(T));
  p.pipeline = pipeline_enabled() && p.threads > 1 && p.inner_blocks() == 1 && p.outer_blocks() >= 2 &&
               2 * outer_bytes <= kPipelineBytes && inner_tiles <= kTinyMPanels;
  p.direct_a = p.threads == 1 && p.jc_blocks <= kDirectAMaxUses && reads_a_in_place(cfg, a) &&
               !a_rows_crowd_l1(a.ld, sizeof(T), cfg.mr);
  return p;
}

// Where step s works and how many items each of its phases has.
struct Step {
  std::int64_t bi, ii;            // outer block index, inner block index within it
  std::int64_t jc, pc, ic;        // the block's origin
  std::int64_t nc, kc, mc;        // its size
  std::int64_t n_panels, m_panels;
  std::int64_t outer_panels, inner_panels;  // the same two, by role
  std::int64_t chunks, chunk_panels;  // compute items per outer micro-panel, inner panels per item
  std::int64_t outer_group, inner_group;  // micro-panels per packing item (pack_group)
  std::int64_t outer_in_place;  // leading outer micro-panels not packed (Plan::direct_a: full A panels)
  std::int64_t items() const { return outer_panels * chunks; }
  std::int64_t outer_items() const { return (outer_panels - outer_in_place + outer_group - 1) / outer_group; }
  std::int64_t inner_items() const { return (inner_panels + inner_group - 1) / inner_group; }
};

// Micro-panels per packing item of an operand stored along the panels (a column-major a, a
// row-major b: pack_a_panels' column-major case, which reads along its long side): enough that
// the packer reads 4 KiB of each row (or column) at a time, which the prefetchers follow, and few
// enough to give each thread two items. One panel an item for the other layout (the packer then
// reads a few rows along k, streams the prefetchers follow anyway), which balances best.
constexpr std::int64_t kPackStretchBytes = 4096;
std::int64_t pack_group(bool grouped, std::int64_t panels, int panel_width, std::size_t elem, int threads) {
  if (!grouped) return 1;
  const std::int64_t stretch = std::max<std::int64_t>(1, kPackStretchBytes / (panel_width * static_cast<std::int64_t>(elem)));
  return std::max<std::int64_t>(1, std::min(stretch, ceil_div(panels, 2 * threads)));
}

Step step_of(const Plan& p, int mr, int nr, std::size_t elem, std::int64_t s) {
  Step t;
  t.bi = s / p.inner_blocks(), t.ii = s % p.inner_blocks();
  const std::int64_t pcb = t.bi % p.pc_blocks, ob = t.bi / p.pc_blocks;  // ob: outer jc or ic
  t.pc = pcb * p.kc;
  t.jc = (p.a_outer ? t.ii : ob) * p.nc, t.ic = (p.a_outer ? ob : t.ii) * p.mc;
  t.nc = std::min(p.nc, p.n - t.jc), t.kc = std::min(p.kc, p.k - t.pc);
  t.mc = std::min(p.mc, p.m - t.ic);
  t.n_panels = ceil_div(t.nc, nr), t.m_panels = ceil_div(t.mc, mr);
  t.outer_panels = p.a_outer ? t.m_panels : t.n_panels;
  t.inner_panels = p.a_outer ? t.n_panels : t.m_panels;
  t.chunks = std::min(p.chunks, t.inner_panels);  // fewer when this inner block is a short runt
  t.chunk_panels = ceil_div(t.inner_panels, t.chunks);
  t.chunks = ceil_div(t.inner_panels, t.chunk_panels);  // no empty chunk at the end
  t.outer_group = pack_group(p.a_outer ? p.group_a : p.group_b, t.outer_panels, p.a_outer ? mr : nr, elem, p.threads);
  t.inner_group = pack_group(p.a_outer ? p.group_b : p.group_a, t.inner_panels, p.a_outer ? nr : mr, elem, p.threads);
  t.outer_in_place = p.direct_a ? t.mc / mr : 0;
  return t;
}

// The counters of one phase (packing a block, or computing a step): items are split into one
// contiguous home range per thread, claimed through next[thread]; done counts finished items.
// Home ranges keep a thread on the same outer micro-panels in every step, so the part of the
// outer block it packed and uses stays in its own cache; when a thread's range runs out it takes
// items from the others' ranges, so a thread that is late or absent holds no one up.
struct Phase {
  alignas(64) std::atomic<std::int64_t> done{0};
  std::atomic<std::int64_t>* next = nullptr;  // [threads], offsets into each home range
};

template <class F>
void claim_all(Phase& ph, std::int64_t total, int tid, int threads, WaitWord& progress,
               F&& do_item) {
  for (int v = 0; v < threads; ++v) {
    const int owner = (tid + v) % threads;
    std::int64_t begin, end;
    share(total, threads, owner, begin, end);
    for (;;) {
      const std::int64_t i = ph.next[owner].fetch_add(1, std::memory_order_relaxed);
      if (i >= end - begin) break;
      do_item(begin + i);
      if (ph.done.fetch_add(1, std::memory_order_acq_rel) + 1 == total) progress.notify_all();
    }
  }
}

template <class T>
struct Job {
  const GemmConfig<T>* cfg;
  const core::HostMatrix* a;
  const core::HostMatrix* b;
  T* c;
  std::int64_t ldc;
  Plan plan;
  T* outer_pack[2];     // the outer block: B kc x round_up(nc, nr), or A round_up(mc, mr) x kc; [1]
                        // only with Plan::pipeline, for the odd outer blocks
  T* inner_pack[2];     // the inner blocks, one per step parity
  Phase* outer_phase;   // [outer_blocks]
  Phase* inner_phase;   // [steps]
  Phase* c_phase;       // [steps]
  WaitWord* progress;   // notified whenever a phase completes
  bool accumulate;      // c += a @ b (split_k's partial sums) rather than c = a @ b
};

bool complete(const Phase& ph, std::int64_t total) {
  return ph.done.load(std::memory_order_acquire) == total;
}

// A thread waiting for a phase another thread is finishing spins this long before sleeping:
// items are tens of microseconds, so most waits end within it.
constexpr int kPhaseSpinUs = 100;

template <class T>
void run_thread(void* ctx, int tid) {
  const Job<T>& job = *static_cast<const Job<T>*>(ctx);
  const GemmConfig<T>& cfg = *job.cfg;
  const Plan& p = job.plan;
  const int mr = cfg.mr, nr = cfg.nr;
  WaitWord& progress = *job.progress;
  const bool a_outer = p.a_outer;
  // Plan::direct_a: a row-major a's rows, read in place by the direct-A kernel.
  const T* const a_in_place = static_cast<const T*>(job.a->data) + job.a->offset;

  auto computed = [&](std::int64_t s) {
    return complete(job.c_phase[s], step_of(p, mr, nr, sizeof(T), s).items());
  };
  // With Plan::pipeline, the last thread packs each next outer block (Step t, into buffer t.bi % 2)
  // before it computes this step; the others pack what it has not claimed yet when they get there.
  const bool packs_ahead = p.pipeline && tid == p.threads - 1;
  auto pack_next = [&](const Step& t, std::int64_t s) {
    progress.wait_until([&] { return s < 2 || computed(s - 2); }, kPhaseSpinUs);  // its buffer's last user
    T* dst = job.outer_pack[t.bi % 2];
    const std::int64_t g = t.outer_group;
    claim_all(job.outer_phase[t.bi], t.outer_items(), tid, p.threads, progress, [&](std::int64_t x) {
      if (a_outer) {
        const std::int64_t r = x * g;
        cfg.pack_a(*job.a, t.ic + r * mr, std::min<std::int64_t>(g * mr, t.mc - r * mr), t.pc, t.kc,
                   dst + r * mr * t.kc);
      } else {
        const std::int64_t q = x * g;
        cfg.pack_b(*job.b, t.pc, t.kc, t.jc + q * nr, std::min<std::int64_t>(g * nr, t.nc - q * nr),
                   dst + q * nr * t.kc);
      }
    });
  };
  for (std::int64_t s = 0; s < p.steps(); ++s) {
    const Step st = step_of(p, mr, nr, sizeof(T), s);
    const std::int64_t jc = st.jc, pc = st.pc, ic = st.ic, nc = st.nc, kc = st.kc, mc = st.mc;
    // Packing item x: A micro-panels [x * g, x * g + g) / B micro-panels likewise (g: the
    // operand's group, by role) of this step's blocks, into the block at dst.
    const std::int64_t a_group = a_outer ? st.outer_group : st.inner_group;
    const std::int64_t b_group = a_outer ? st.inner_group : st.outer_group;
    // (With Plan::direct_a the outer A block holds only the panels past those read in place.)
    const std::int64_t a_skip = a_outer ? st.outer_in_place : 0;
    auto pack_a = [&](std::int64_t x, T* dst) {
      const std::int64_t r = a_skip + x * a_group;
      cfg.pack_a(*job.a, ic + r * mr, std::min<std::int64_t>(a_group * mr, mc - r * mr), pc, kc,
                 dst + (r - a_skip) * mr * kc);
    };
    auto pack_b = [&](std::int64_t x, T* dst) {
      const std::int64_t q = x * b_group;
      cfg.pack_b(*job.b, pc, kc, jc + q * nr, std::min<std::int64_t>(b_group * nr, nc - q * nr),
                 dst + q * nr * kc);
    };
    // The outer block of this step (with Plan::pipeline, two buffers taking turns).
    T* outer_pack = job.outer_pack[p.pipeline ? st.bi % 2 : 0];

    if (st.ii == 0) {  // the first step of an outer block packs it, once the previous one is done
      // (with Plan::pipeline, the one before that: the last user of its buffer)
      const std::int64_t lo = std::max<std::int64_t>(0, s - (p.pipeline ? 2 : p.inner_blocks()));
      const std::int64_t hi = p.pipeline ? s - 1 : s;
      progress.wait_until(
          [&] {
            for (std::int64_t t = lo; t < hi; ++t)
              if (!computed(t)) return false;
            return true;
          },
          kPhaseSpinUs);
      claim_all(job.outer_phase[st.bi], st.outer_items(), tid, p.threads, progress,
                [&](std::int64_t x) {
                  a_outer ? pack_a(x, outer_pack) : pack_b(x, outer_pack);
                });
    }

    T* inner_pack = job.inner_pack[s % 2];
    if (s >= 2) progress.wait_until([&] { return computed(s - 2); }, kPhaseSpinUs);
    claim_all(job.inner_phase[s], st.inner_items(), tid, p.threads, progress,
              [&](std::int64_t x) { a_outer ? pack_b(x, inner_pack) : pack_a(x, inner_pack); });

    if (packs_ahead && s + 1 < p.steps()) pack_next(step_of(p, mr, nr, sizeof(T), s + 1), s + 1);

    progress.wait_until(
        [&] {
          // With two outer buffers, step s - 1 may still be computing onto the same C tiles.
          return complete(job.outer_phase[st.bi], st.outer_items()) &&
                 complete(job.inner_phase[s], st.inner_items()) && (!p.pipeline || s == 0 || computed(s - 1));
        },
        kPhaseSpinUs);
    const T* a_block = a_outer ? outer_pack : inner_pack;
    const T* b_block = a_outer ? inner_pack : outer_pack;
    // A plan on one thread (split_k's and split_n's parts) reads the source of the next step's
    // B block into its cache while it computes this step, a share before each micro-tile, so that
    // packing it reads cache, not memory: packing and multiply-adds overlap on the thread. Only
    // a block of at most kPrefetchBBytes, which fits L2 beside the packed blocks in use.
    const T* pf_row = nullptr;  // the row (column) of the next line to prefetch, and that line
    std::int64_t pf_next = 0, pf_total = 0, pf_line_count = 1, pf_per_tile = 0, pf_line = 0;
    if (p.threads == 1 && s + 1 < p.steps() && prefetch_b_enabled()) {
      const Step nx = step_of(p, mr, nr, sizeof(T), s + 1);
      if ((a_outer || nx.ii == 0) && prefetches_b_block(nx.kc, nx.nc, sizeof(T))) {
        constexpr std::int64_t line = 64 / sizeof(T);
        const core::HostMatrix& b = *job.b;
        // Its rows (columns for a column-major b), each a stretch of whole lines.
        pf_row = static_cast<const T*>(b.data) + b.offset + (b.col_major ? nx.jc * b.ld + nx.pc : nx.pc * b.ld + nx.jc);
        pf_line_count = ceil_div(b.col_major ? nx.kc : nx.nc, line) + 1;
        pf_total = (b.col_major ? nx.nc : nx.kc) * pf_line_count;
        pf_per_tile = ceil_div(pf_total, std::max<std::int64_t>(1, st.outer_panels * st.inner_panels));
      }
    }
    // Line by line, row after row: no division a line (a 64-bit idiv each took 12% of (64 x 16384)
    // @ (16384 x 256) on a 2-core Xeon).
    auto prefetch_lines = [&](std::int64_t count) {
      for (const std::int64_t end = pf_next + count; pf_next < end; ++pf_next) {
        __builtin_prefetch(pf_row + pf_line * static_cast<std::int64_t>(64 / sizeof(T)), 0, 2);
        if (++pf_line == pf_line_count) pf_line = 0, pf_row += job.b->ld;
      }
    };
    claim_all(job.c_phase[s], st.items(), tid, p.threads, progress, [&](std::int64_t item) {
      const std::int64_t o = item / st.chunks, i0 = (item % st.chunks) * st.chunk_panels;
      const std::int64_t i1 = std::min(st.inner_panels, i0 + st.chunk_panels);
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t r = a_outer ? o : i, q = a_outer ? i : o;  // A panel, B panel
        const int m_tile = static_cast<int>(std::min<std::int64_t>(mr, mc - r * mr));
        const int n_tile = static_cast<int>(std::min<std::int64_t>(nr, nc - q * nr));
        T* c_tile = job.c + (ic + r * mr) * job.ldc + jc + q * nr;
        const std::int64_t pf_now = std::min(pf_total - pf_next, pf_per_tile);
        // The tile through the direct-A kernel (A read in place) or the packed one, either form
        // (`pf`: the prefetching forms' PrefetchLines*, or nothing).
        const bool acc = pc > 0 || job.accumulate;
        auto tile = [&](auto direct_a, auto packed, auto... pf) {
          if (r < a_skip)
            direct_a(kc, a_in_place + (ic + r * mr) * job.a->ld + pc, job.a->ld, b_block + q * nr * kc, c_tile,
                     job.ldc, n_tile, acc, pf...);
          else
            packed(kc, a_block + (r - a_skip) * mr * kc, b_block + q * nr * kc, c_tile, job.ldc, m_tile, n_tile,
                   acc, pf...);
        };
        if (pf_now > 0 && cfg.ukernel_pf && cfg.ukernel_direct_a_pf && kernel_pf_enabled()) {
          // The kernel asks for the lines one a k step, among its multiply-adds.
          PrefetchLines pl{reinterpret_cast<const char*>(pf_row), static_cast<std::int64_t>(job.b->ld * sizeof(T)),
                           pf_line, pf_line_count, pf_now};
          tile(cfg.ukernel_direct_a_pf, cfg.ukernel_pf, &pl);
          pf_next += pf_now - pl.left;  // what the tile's k steps were too few for: below, at once
          pf_row = reinterpret_cast<const T*>(pl.row), pf_line = pl.line;
          prefetch_lines(pl.left);
          continue;
        }
        prefetch_lines(pf_now);
        tile(cfg.ukernel_direct_a, cfg.ukernel);
      }
    });
  }
}

template <class T>
void run_plan(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
              T* c, std::int64_t ldc, const Plan& plan, Scratch& scratch, ThreadPool* pool,
              bool accumulate = false) {
  // Packed blocks start on 64-byte boundaries (the panels' own sizes need not be multiples).
  const std::int64_t line = 64 / sizeof(T);
  const std::int64_t b_elems = round_up(plan.kc * round_up(plan.nc, cfg.nr), line);
  // (Plan::direct_a packs an edge panel of A at most.)
  const std::int64_t a_elems = round_up((plan.direct_a ? cfg.mr : round_up(plan.mc, cfg.mr)) * plan.kc, line);
  const std::int64_t outer_elems = plan.a_outer ? a_elems : b_elems;
  const std::int64_t inner_elems = plan.a_outer ? b_elems : a_elems;
  const std::int64_t outer_buffers = plan.pipeline ? 2 : 1;
  T* base = static_cast<T*>(scratch.get((outer_buffers * outer_elems + 2 * inner_elems) * sizeof(T)));
  T* inner_base = base + outer_buffers * outer_elems;
  const std::int64_t n_phases = plan.outer_blocks() + 2 * plan.steps();
  std::unique_ptr<Phase[]> phases(new Phase[n_phases]);
  std::unique_ptr<std::atomic<std::int64_t>[]> next(
      new std::atomic<std::int64_t>[n_phases * plan.threads]());  // zeroed
  for (std::int64_t i = 0; i < n_phases; ++i) phases[i].next = next.get() + i * plan.threads;
  WaitWord progress;
  Job<T> job{&cfg, &a, &b, c, ldc, plan, {base, base + outer_elems},
             {inner_base, inner_base + inner_elems},
             phases.get(), phases.get() + plan.outer_blocks(),
             phases.get() + plan.outer_blocks() + plan.steps(), &progress, accumulate};
  if (pool)
    pool->run(plan.threads, &run_thread<T>, &job);
  else
    run_thread<T>(&job, 0);
}

// Whether a multi-threaded plan runs better as split_k: one block of C (M <= mc, N <= nc) and a
// long K. The blocked plan would then step through K one block at a time, every thread at every
// step: a handful of micro-tiles between two waits for each other (64 x 16384 @ 16384 x 256:
// 64 steps of 8 Mflop), and each B block packed by all threads, then computed by all. Split
// along K, each thread runs a single-threaded plan on its own stretches of K, packing and
// computing at its own pace (one streams memory while another computes), into a partial sum of
// its own; the partial sums, M x N each, are added at the end. Only for a small C (at most
// kSplitKBytes, so that each partial sum stays in L2 while it accumulates): 2-core machine,
// float32, one process each, blocked / split (ms): 64 x 16384 @ 16384 x 256 5.0-5.4 / 4.4-4.9,
// 64 x 65536 @ 65536 x 64 6.2-6.9 / 5.0-5.5; with a wide C no better or worse: 16 x 4096 @
// 4096 x 4096 7.6-8.1 / 8.8-10.7, 64 x 4096 @ 4096 x 4096 16.1-17.3 / 17.5-18.7.
constexpr std::int64_t kSplitKBytes = 64 << 10;
bool split_k_wins(const Plan& p, std::size_t elem) {
  return p.threads > 1 && p.ic_blocks == 1 && p.jc_blocks == 1 && p.pc_blocks >= 2 * p.threads &&
         p.m * p.n * static_cast<std::int64_t>(elem) <= kSplitKBytes;
}

template <class T>
struct SplitK {
  const GemmConfig<T>* cfg;
  const core::HostMatrix* a;
  const core::HostMatrix* b;
  std::int64_t m, n, k, chunk, chunks;
  T* partial;                    // [threads][m * n], thread t's sum over the chunks it took
  std::atomic<bool>* used;       // [threads], whether thread t took a chunk
  std::atomic<std::int64_t> next{0};
};

template <class T>
void split_k_thread(void* ctx, int tid) {
  auto& j = *static_cast<SplitK<T>*>(ctx);
  T* part = j.partial + tid * j.m * j.n;
  bool used = false;
  Scratch& scratch = thread_scratch();
  for (std::int64_t x; (x = j.next.fetch_add(1, std::memory_order_relaxed)) < j.chunks;) {
    const std::int64_t k0 = x * j.chunk, k = std::min(j.chunk, j.k - k0);
    core::HostMatrix a = *j.a, b = *j.b;  // columns [k0, k0 + k) of a, rows of b
    a.cols = k, b.rows = k;
    a.offset += static_cast<std::size_t>(a.col_major ? k0 * a.ld : k0);
    b.offset += static_cast<std::size_t>(b.col_major ? k0 : k0 * b.ld);
    run_plan(*j.cfg, a, b, part, j.n, make_plan(*j.cfg, a, b, 1, 0.0), scratch, nullptr, used);
    used = true;
  }
  j.used[tid].store(used, std::memory_order_release);
}

// split_k's parts are single-threaded plans, which prefetch the source of their next B block
// while they compute (run_thread) where it is at most kPrefetchBBytes. Their kc is halved where
// that brings a B block (kc x N) within it: packing then reads cache. 2-core machine (Zen 4),
// float32, (64 x 16384) @ (16384 x 256), alternating processes, GFLOP/s: kc 512 (a 512 KiB block,
// no prefetch) 136, kc 256 152, kc 384 123 (NumPy 155).
template <class T>
GemmConfig<T> split_k_part_config(const GemmConfig<T>& cfg, std::int64_t n) {
  GemmConfig<T> part = cfg;  // split_k: all of N is one block
  if (!prefetches_b_block(cfg.kc, n, sizeof(T)) && prefetches_b_block(cfg.kc / 2, n, sizeof(T))) part.kc = cfg.kc / 2;
  return part;
}

template <class T>
void split_k(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
             std::int64_t ldc, int threads, ThreadPool& pool) {
  const std::int64_t m = a.rows, n = b.cols, k = a.cols;
  static Scratch partials;  // guarded by the pool's lock, as gemm's shared scratch
  const GemmConfig<T> part_cfg = split_k_part_config(cfg, n);
  SplitK<T> job{&part_cfg, &a, &b, m, n, k, 0, 0,
                static_cast<T*>(partials.get(static_cast<std::size_t>(threads * m * n) * sizeof(T))), nullptr};
  // Chunks of whole kc blocks, about four a thread (a late thread holds the others up by one).
  job.chunk = round_up(ceil_div(k, 4 * threads), cfg.kc);
  job.chunks = ceil_div(k, job.chunk);
  std::unique_ptr<std::atomic<bool>[]> used(new std::atomic<bool>[threads]());
  job.used = used.get();
  pool.run(threads, &split_k_thread<T>, &job);
  // c = the sum of the partial sums, rows shared out the same way.
  struct Sum {
    const SplitK<T>* job;
    int threads;
    T* c;
    std::int64_t ldc, rows_per;
    std::atomic<std::int64_t> next{0};
  } sum{&job, threads, c, ldc, std::max<std::int64_t>(1, ceil_div(m, 4 * threads))};
  pool.run(threads, [](void* ctx, int) {
    auto& s = *static_cast<Sum*>(ctx);
    const SplitK<T>& j = *s.job;
    for (std::int64_t x; (x = s.next.fetch_add(1, std::memory_order_relaxed)) * s.rows_per < j.m;) {
      for (std::int64_t i = x * s.rows_per; i < std::min(j.m, (x + 1) * s.rows_per); ++i) {
        T* row = s.c + i * s.ldc;
        bool first = true;
        for (int t = 0; t < s.threads; ++t) {
          if (!j.used[t].load(std::memory_order_acquire)) continue;
          const T* p = j.partial + (t * j.m + i) * j.n;
          if (first)
            std::memcpy(row, p, static_cast<std::size_t>(j.n) * sizeof(T));
          else
            for (std::int64_t x2 = 0; x2 < j.n; ++x2) ElementOps<T>::add_to(row[x2], p[x2]);
          first = false;
        }
      }
    }
  }, &sum);
}

}  // namespace

L1Geometry l1_geometry() {
  if (const int ways = l1_set_ways.load(std::memory_order_acquire); ways > 0)
    return L1Geometry{l1_set_line.load(std::memory_order_relaxed), l1_set_sets.load(std::memory_order_relaxed), ways};
  static const L1Geometry detected = detected_l1();
  return detected;
}

void set_l1_geometry(const L1Geometry& l1) {
  const bool valid = l1.line > 0 && l1.sets > 0 && l1.ways > 0;
  l1_set_line.store(valid ? l1.line : 0, std::memory_order_relaxed);
  l1_set_sets.store(valid ? l1.sets : 0, std::memory_order_relaxed);
  l1_set_ways.store(valid ? l1.ways : 0, std::memory_order_release);
}

bool a_rows_crowd_l1(std::int64_t ld, std::size_t elem, int mr) {
  if (!l1_rows_check_enabled()) return false;
  const L1Geometry l1 = l1_geometry();
  return rows_per_l1_set(ld * static_cast<std::int64_t>(elem), mr, l1) > l1.ways + 2;
}

// Columns of a column-major a (rows of a row-major b) pack_a_panels copies into every panel
// before the next run: each panel then takes a kPackColumnsRun * MR-element stretch (1 KiB for
// float32's 32-column B panels and float64's 16) at a time. 2-core machine (Zen 4), one process a
// variant, alternating rounds, GFLOP/s, runs of 1 / 2 / 4 / 8 / 16 columns: float32 1024^3 178 /
// 191 / 191 / 194 / 195 (NumPy 172), (64 x 16384) @ (16384 x 256) 123 / 122 / 126 / 131 / 130
// (NumPy 134), float64 1024^3 100 / 103 / 103 / 102 / 102 (103); float32 2048^3 212 -> 217 and
// 512^3 218 -> 220 with 8.
constexpr std::int64_t kPackColumnsRun = 8;

template <class T, int MR>
void pack_a_panels(const core::HostMatrix& a, std::int64_t i0, std::int64_t m, std::int64_t p0,
                   std::int64_t k, T* dst) {
  const T* src = static_cast<const T*>(a.data) + a.offset;
  if (a.col_major) {
    // Column p of each panel is contiguous: a copy per panel and k step. The k steps go outside,
    // in runs of kPackColumnsRun, so that memory is read along a's columns, all the panels'
    // stretch of a run of them before the next: panel by panel, a 6-row panel of a column-major
    // 4096-row a (or a 16-column panel of a row-major b, the same case) read one cache line per
    // column, 16 KiB apart, which the prefetchers do not follow, and packing took half the time of
    // an 8 x 4096 @ 4096 x 4096 product. Runs rather than single columns: a column at a time
    // wrote its 128 bytes into every panel, the panels k * MR elements apart (64 KiB for a float32
    // B block of kc 512 and 32 columns), all in the same L1 sets, and the stores stalled.
    for (std::int64_t p1 = 0; p1 < k; p1 += kPackColumnsRun) {
      const std::int64_t p2 = std::min(k, p1 + kPackColumnsRun);
      for (std::int64_t r = 0; r < m; r += MR) {
        const int rows = static_cast<int>(std::min<std::int64_t>(MR, m - r));
        for (std::int64_t p = p1; p < p2; ++p) {
          const T* col = src + (p0 + p) * a.ld + i0;
          T* d = dst + r * k + p * MR;
          if (rows == MR) {
            std::memcpy(d, col + r, MR * sizeof(T));
          } else {
            for (int ii = 0; ii < rows; ++ii) d[ii] = col[r + ii];
            for (int ii = rows; ii < MR; ++ii) d[ii] = ElementOps<T>::zero();
          }
        }
      }
    }
    return;
  }
  for (std::int64_t r = 0; r < m; r += MR, dst += MR * k) {
    const int rows = static_cast<int>(std::min<std::int64_t>(MR, m - r));
    const std::int64_t i = i0 + r;
    if (rows == MR) {  // a transpose: MR row streams, written MR apart
      const T* row0 = src + i * a.ld + p0;
      for (std::int64_t p = 0; p < k; ++p)
        for (int ii = 0; ii < MR; ++ii) dst[p * MR + ii] = row0[ii * a.ld + p];
    } else {
      const T* row0 = src + i * a.ld + p0;
      for (std::int64_t p = 0; p < k; ++p) {
        for (int ii = 0; ii < rows; ++ii) dst[p * MR + ii] = row0[ii * a.ld + p];
        for (int ii = rows; ii < MR; ++ii) dst[p * MR + ii] = ElementOps<T>::zero();
      }
    }
  }
}

// B's panels are A's panels of B transposed: panel rows are B's columns, the k index its rows.
template <class T, int NR>
void pack_b_panels(const core::HostMatrix& b, std::int64_t p0, std::int64_t k, std::int64_t j0,
                   std::int64_t n, T* dst) {
  core::HostMatrix bt = b;
  bt.rows = b.cols, bt.cols = b.rows, bt.col_major = !b.col_major;
  pack_a_panels<T, NR>(bt, j0, n, p0, k, dst);
}

// Element (p, j) of B'' is a part of z = b[p / 2][j / 2]: on even rows (re z, im z), on odd rows
// (-im z, re z), for even and odd j.
template <class T, int NR>
void pack_b_complex_panels(const core::HostMatrix& b, std::int64_t p0, std::int64_t k, std::int64_t j0,
                           std::int64_t n, T* dst) {
  const T* src = static_cast<const T*>(b.data) + 2 * b.offset;  // parts: 2 reals a complex element
  if (!b.col_major && j0 % 2 == 0 && n % 2 == 0) {
    // A row of B'' is a stretch of b's row; read along it, every panel's part (pack_a_panels' why).
    for (std::int64_t p = 0; p < k; ++p) {
      const std::int64_t row = p0 + p;
      const T* z = src + 2 * ((row >> 1) * b.ld + (j0 >> 1));
      for (std::int64_t r = 0; r < n; r += NR) {
        const int cols = static_cast<int>(std::min<std::int64_t>(NR, n - r));
        T* d = dst + r * k + p * NR;
        if (row & 1) {
          for (int q = 0; q < cols; q += 2) d[q] = -z[r + q + 1], d[q + 1] = z[r + q];
        } else {
          for (int q = 0; q < cols; ++q) d[q] = z[r + q];
        }
        for (int q = cols; q < NR; ++q) d[q] = T(0);
      }
    }
    return;
  }
  // A column-major b, or panels that end inside a complex column.
  for (std::int64_t r = 0; r < n; r += NR, dst += NR * k) {
    const int cols = static_cast<int>(std::min<std::int64_t>(NR, n - r));
    const std::int64_t j = j0 + r;
    for (std::int64_t p = 0; p < k; ++p) {
      const std::int64_t row = p0 + p;
      T* d = dst + p * NR;
      for (int q = 0; q < cols; ++q) {
        const std::int64_t col = j + q;
        const T* z = src + 2 * (b.col_major ? (col >> 1) * b.ld + (row >> 1) : (row >> 1) * b.ld + (col >> 1));
        d[q] = (row & 1) == 0 ? z[col & 1] : (col & 1) == 0 ? -z[1] : z[0];
      }
      for (int q = cols; q < NR; ++q) d[q] = T(0);
    }
  }
}

template <class T>
PackFn<T> complex_b_packer(int nr) {
  switch (nr) {
    case 4: return pack_b_complex_panels<T, 4>;
    case 6: return pack_b_complex_panels<T, 6>;
    case 8: return pack_b_complex_panels<T, 8>;
    case 12: return pack_b_complex_panels<T, 12>;
    case 16: return pack_b_complex_panels<T, 16>;
    case 32: return pack_b_complex_panels<T, 32>;
    default: return nullptr;
  }
}
template PackFn<float> complex_b_packer<float>(int);
template PackFn<double> complex_b_packer<double>(int);

// Whether a multi-threaded plan runs better as split_n: few rows of c (one A block of at most
// kSplitNMaxPanels micro-panels), a short K (one kc block) and a wide b. The blocked plan packs
// B blocks of up to nc x 16 columns (4 MiB at 64 x 64 @ 64 x 65536), every thread at once, into
// L3, then every thread computes on them: the memory idle while they compute, the cores' FMAs
// while they pack (25% of that product in the B packer, perf). Split along N, each thread runs
// a single-threaded plan on column chunks of its own, A outer with B blocks of kSplitNBlockBytes
// that stay in its L2: one thread packs while the other computes, and the kernel reads B from
// L2, not L3. The cost model: a B block computed by at most kSplitNMaxPanels A micro-panels
// takes about as long to pack as to compute, so overlapping the two is worth a thread's waits.
constexpr std::int64_t kSplitNMaxPanels = 16;
constexpr std::int64_t kSplitNBlockBytes = 256 << 10;
// PORTMAT_CPU_SPLIT_N=0 turns split_n off (for A/B measurements; read once per process).
bool split_n_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_SPLIT_N");
  return on;
}
template <class T>
bool split_n_wins(const GemmConfig<T>& cfg, const Plan& p) {
  if (!split_n_enabled() || p.threads < 2 || p.pc_blocks != 1 || p.ic_blocks != 1) return false;
  if (ceil_div(p.m, cfg.mr) > kSplitNMaxPanels) return false;
  // At least four L2 blocks a thread, so that the threads' chunks balance.
  const std::int64_t block_cols = kSplitNBlockBytes / (p.kc * static_cast<std::int64_t>(sizeof(T)));
  return p.n >= 4 * p.threads * block_cols;
}

template <class T>
void split_n(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
             std::int64_t ldc, const Plan& plan, ThreadPool& pool) {
  // A outer: the A block (every row, one kc block) packed once per chunk and each A micro-panel
  // kept in L1 while the kernel walks a B block in L2, writing c along its rows.
  GemmConfig<T> part_cfg = cfg;  // A outer, blocks for one thread's L2
  part_cfg.a_outer = true;
  part_cfg.mc = round_up(plan.m, cfg.mr);
  part_cfg.kc = plan.kc;
  part_cfg.nc = std::max<std::int64_t>(
      cfg.nr, kSplitNBlockBytes / (plan.kc * static_cast<std::int64_t>(sizeof(T))) / cfg.nr * cfg.nr);
  // Chunks of whole blocks, about four a thread (a late thread holds the others up by one).
  const std::int64_t chunk = round_up(ceil_div(plan.n, 4 * plan.threads), part_cfg.nc);
  run_parts_locked(pool, ceil_div(plan.n, chunk), plan.threads, [&](std::int64_t x) {
    const std::int64_t j0 = x * chunk, n = std::min(chunk, plan.n - j0);
    core::HostMatrix cols = b;  // columns [j0, j0 + n) of b and c
    cols.cols = n;
    cols.offset += static_cast<std::size_t>(b.col_major ? j0 * b.ld : j0);
    // Its own block sizes: not widened for few rows (make_plan), which would leave L2.
    run_plan(part_cfg, a, cols, c + j0, ldc, make_plan(part_cfg, a, cols, 1, 0.0, false), thread_scratch(), nullptr);
  });
}

// Whether a multi-threaded plan runs better as split_m: a product of one step (a single block of
// each operand: squares up to n = 256 with AVX-512's blocks) with at least two A micro-panels a
// thread and enough rows (below). The blocked plan's one step has every thread pack part of A and
// part of B, wait for all of both, then compute, each thread reading the B panels the others
// packed from their caches. Split along M, each thread runs a single-threaded plan on its own
// rows: it packs its A rows and all of B itself, and waits for no other thread before its
// multiply-adds. 2-core machine (Sapphire Rapids), float32, one process alternating 7-15 rounds,
// medians (us): 256^3 138.5 -> 124.1 (MKL 110.2); 192^3, 256 x 64 @ 64 x 256, 65536 x 16 @ 16 x
// 16, 2048 x 64 @ 64 x 2048, 256 x 256 @ 256 x 16 unchanged within 3%. Past one step (the same
// split, each thread's plan stepping through B blocks of its own) it did not pay: 384^3 392 ->
// 380, 512^3 906 -> 924, 768^3 2896 -> 2876.
// The cost of the split: every thread packs all of B, (T - 1) / T of it more than in the blocked
// plan, against (M / T) x K x N multiply-adds of its own: (T - 1) / M packed elements per
// multiply-add. It is taken up to the ratio that paid at 256^3 on two threads, 1 / 256: M at least
// kSplitMRowsPerExtraThread x (T - 1) (16 threads: M >= 3840).
constexpr std::int64_t kSplitMRowsPerExtraThread = 256;
bool split_m_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_SPLIT_M");  // =0: off, for A/B measurements
  return on;
}
template <class T>
bool split_m_wins(const GemmConfig<T>& cfg, const Plan& p) {
  return split_m_enabled() && p.threads >= 2 && p.pc_blocks == 1 && p.ic_blocks == 1 && p.jc_blocks == 1 &&
         ceil_div(p.m, cfg.mr) >= 2 * p.threads && p.m >= kSplitMRowsPerExtraThread * (p.threads - 1);
}

// Rows of c in `threads` equal parts of whole micro-panels, claimed (a thread that never shows up
// leaves its part to the others), each a single-threaded plan that packs its own A rows and B.
template <class T>
void split_m(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
             std::int64_t ldc, const Plan& plan, ThreadPool& pool) {
  const std::int64_t panels = ceil_div(plan.m, cfg.mr);
  run_parts_locked(pool, plan.threads, plan.threads, [&](std::int64_t x) {
    std::int64_t p0, p1;
    share(panels, plan.threads, static_cast<int>(x), p0, p1);
    const std::int64_t r0 = p0 * cfg.mr, r1 = std::min(plan.m, p1 * cfg.mr);
    if (r1 <= r0) return;
    core::HostMatrix rows = a;
    rows.rows = r1 - r0;
    rows.offset += static_cast<std::size_t>(a.col_major ? r0 : r0 * a.ld);
    run_plan(cfg, rows, b, c + r0 * ldc, ldc, make_plan(cfg, rows, b, 1, 0.0, false), thread_scratch(), nullptr);
  });
}

// Squares of a few steps (squares of 384-1024 with AVX-512's float32 blocks) as column blocks
// claimed one at a time, a read in place. The blocked plan's steps have every thread pack part of
// each B block, wait for the others, then read their parts from the other core's cache (and pack
// A, shared, first). Here a thread takes a column block of c (the plan's nc columns, all of K),
// packs its B block alone (all K, kc at a time) into the shared scratch, and then claims groups of
// rows of it (items: kSplitColsItemsPerBlock a block, all of K each, the direct-A kernel reading
// a's rows in place); a thread with no block left of its own takes the others' items, or a block
// nobody has started. So nobody waits on a barrier, and a descheduled thread holds up at most the
// block it is packing. Each thread starts on its own share of the blocks: at least one each.
constexpr std::int64_t kSplitColsMaxSteps = 8;
constexpr std::int64_t kSplitColsItemsPerBlock = 8;
bool split_cols_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_SPLIT_COLS");  // =0: off, for A/B measurements
  return on;
}
template <class T>
bool split_cols_wins(const GemmConfig<T>& cfg, const core::HostMatrix& a, const Plan& p) {
  // (Not for a few rows of c, whose B blocks make_plan widens to megabytes: packed whole they
  // would not stay in any cache; the blocked plan pipelines them.)
  return split_cols_enabled() && p.threads >= 2 && p.ic_blocks == 1 && p.steps() >= 2 &&
         p.steps() <= kSplitColsMaxSteps && p.jc_blocks >= p.threads && ceil_div(p.m, cfg.mr) > kTinyMPanels &&
         reads_a_in_place(cfg, a);
}

template <class T>
void split_cols(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
                std::int64_t ldc, const Plan& plan, Scratch& scratch, ThreadPool& pool) {
  const int mr = cfg.mr, nr = cfg.nr, threads = plan.threads;
  const std::int64_t blocks = plan.jc_blocks, kc = plan.kc, pcs = plan.pc_blocks;
  const std::int64_t panel_cols = round_up(plan.nc, nr);
  const std::int64_t block_elems = round_up(plan.k * panel_cols, 64 / static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t full_panels = plan.m / mr;  // read in place; a last partial one is packed
  const std::int64_t panels = ceil_div(plan.m, mr);
  const std::int64_t group = ceil_div(panels, kSplitColsItemsPerBlock), items = ceil_div(panels, group);
  // Where a's rows crowd an L1 set (a_rows_crowd_l1), the kernel reads a copy of its full panels'
  // rows instead, a line longer where that spreads them: the first item of each group of rows
  // copies them (all of K), and an item that finds that copy under way reads a itself.
  const std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
  std::int64_t ld_copy = 0;
  if (a_rows_crowd_l1(a.ld, sizeof(T), mr)) {
    ld_copy = round_up(plan.k, line);
    for (int tries = 0; tries < 64 && a_rows_crowd_l1(ld_copy, sizeof(T), mr); ++tries) ld_copy += line;
  }
  const std::int64_t copy_elems = ld_copy * full_panels * mr;
  T* packed = static_cast<T*>(scratch.get((blocks * block_elems + copy_elems) * sizeof(T)));
  T* a_copy = packed + blocks * block_elems;
  std::unique_ptr<std::atomic<int>[]> copied(new std::atomic<int>[ld_copy ? items : 0]());  // 0, 1 copying, 2 done
  struct alignas(64) Block {
    std::atomic<int> claimed{0};     // a thread packs it
    std::atomic<int> packed{0};      // its B block is ready
    std::atomic<std::int64_t> next{0};  // its next item
  };
  std::unique_ptr<Block[]> state(new Block[blocks]);
  WaitWord progress;  // notified when a block is packed
  const T* a_rows = static_cast<const T*>(a.data) + a.offset;

  auto pack = [&](std::int64_t j) {
    const std::int64_t j0 = j * plan.nc, n = std::min(plan.nc, plan.n - j0);
    T* dst = packed + j * block_elems;
    for (std::int64_t pc = 0; pc < pcs; ++pc) {
      const std::int64_t p0 = pc * kc;
      cfg.pack_b(b, p0, std::min(kc, plan.k - p0), j0, n, dst + p0 * panel_cols);
    }
    state[j].packed.store(1, std::memory_order_release);
    progress.notify_all();
  };
  // Rows [x * group, ...) of micro-panels against block j, all of K.
  auto item = [&](std::int64_t j, std::int64_t x) {
    const std::int64_t j0 = j * plan.nc, n = std::min(plan.nc, plan.n - j0), q_count = ceil_div(n, nr);
    const T* bj = packed + j * block_elems;
    const std::int64_t r_end = std::min(panels, (x + 1) * group);
    const T* rows_src = a_rows;  // the rows the direct-A kernel reads: a's, or their copy
    std::int64_t rows_ld = a.ld;
    if (ld_copy) {
      int state = copied[x].load(std::memory_order_acquire);
      if (state == 0 && copied[x].compare_exchange_strong(state, 1, std::memory_order_acq_rel)) {
        for (std::int64_t i = x * group * mr; i < std::min(r_end, full_panels) * mr; ++i)
          std::memcpy(a_copy + i * ld_copy, a_rows + i * a.ld, static_cast<std::size_t>(plan.k) * sizeof(T));
        copied[x].store(2, std::memory_order_release);
        state = 2;
      }
      if (state == 2) rows_src = a_copy, rows_ld = ld_copy;
    }
    for (std::int64_t pc = 0; pc < pcs; ++pc) {
      const std::int64_t p0 = pc * kc, k = std::min(kc, plan.k - p0);
      for (std::int64_t r = x * group; r < r_end; ++r) {
        const T* a_panel = nullptr;
        int m_tile = mr;
        if (r >= full_panels) {  // the last rows: fewer than mr, packed
          m_tile = static_cast<int>(plan.m - r * mr);
          T* edge = static_cast<T*>(thread_scratch().get(mr * kc * sizeof(T)));
          cfg.pack_a(a, r * mr, m_tile, p0, k, edge);
          a_panel = edge;
        }
        for (std::int64_t q = 0; q < q_count; ++q) {
          const T* b_panel = bj + p0 * panel_cols + q * nr * k;
          T* c_tile = c + r * mr * ldc + j0 + q * nr;
          const int n_tile = static_cast<int>(std::min<std::int64_t>(nr, n - q * nr));
          if (a_panel)
            cfg.ukernel(k, a_panel, b_panel, c_tile, ldc, m_tile, n_tile, pc > 0);
          else
            cfg.ukernel_direct_a(k, rows_src + r * mr * rows_ld + p0, rows_ld, b_panel, c_tile, ldc, n_tile, pc > 0);
        }
      }
    }
  };
  auto work_items = [&](std::int64_t j) {
    for (std::int64_t x; (x = state[j].next.fetch_add(1, std::memory_order_relaxed)) < items;) item(j, x);
  };
  // Part t: thread t's own blocks in order, then the others' (a block nobody has claimed is
  // packed here; one being packed is waited for), so every item is taken once.
  run_parts_locked(pool, threads, threads, [&](std::int64_t t) {
    std::int64_t begin, end;
    share(blocks, threads, static_cast<int>(t), begin, end);
    for (std::int64_t v = 0; v < blocks; ++v) {
      const std::int64_t j = (begin + v) % blocks;
      int expected = 0;
      if (state[j].claimed.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
        pack(j);
      else if (state[j].next.load(std::memory_order_relaxed) >= items)
        continue;
      else
        progress.wait_until([&] { return state[j].packed.load(std::memory_order_acquire) != 0; }, kPhaseSpinUs);
      work_items(j);
    }
  });
}

template <class T>
void gemm(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
          std::int64_t ldc, int threads, double min_flops_per_thread) {
  const Plan plan = make_plan(cfg, a, b, threads, min_flops_per_thread);
  if (plan.threads == 1) {  // on the caller's thread, concurrently with other callers
    run_plan(cfg, a, b, c, ldc, plan, thread_scratch(), nullptr);
    return;
  }
  ThreadPool& pool = ThreadPool::instance();
  static Scratch shared;  // guarded by the pool's lock
  std::lock_guard<std::mutex> lock(pool.lock());
  if (split_k_wins(plan, sizeof(T))) return split_k(cfg, a, b, c, ldc, plan.threads, pool);
  if (split_n_wins(cfg, plan)) return split_n(cfg, a, b, c, ldc, plan, pool);
  if (split_m_wins(cfg, plan)) return split_m(cfg, a, b, c, ldc, plan, pool);
  if (split_cols_wins(cfg, a, plan)) return split_cols(cfg, a, b, c, ldc, plan, shared, pool);
  run_plan(cfg, a, b, c, ldc, plan, shared, &pool);
}

template <class T>
std::string gemm_plan(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
                      int threads, double min_flops_per_thread) {
  const Plan plan = make_plan(cfg, a, b, threads, min_flops_per_thread);
  return plan.threads > 1 && split_k_wins(plan, sizeof(T)) ? "split_k"
         : plan.threads > 1 && split_n_wins(cfg, plan)    ? "split_n"
         : plan.threads > 1 && split_m_wins(cfg, plan)    ? "split_m"
         : plan.threads > 1 && split_cols_wins(cfg, a, plan) ? "split_cols"
                                                          : "blocked";
}
template std::string gemm_plan<float>(const GemmConfig<float>&, const core::HostMatrix&, const core::HostMatrix&,
                                      int, double);
template std::string gemm_plan<double>(const GemmConfig<double>&, const core::HostMatrix&,
                                       const core::HostMatrix&, int, double);

template void gemm<float>(const GemmConfig<float>&, const core::HostMatrix&,
                          const core::HostMatrix&, float*, std::int64_t, int, double);
template void gemm<double>(const GemmConfig<double>&, const core::HostMatrix&,
                           const core::HostMatrix&, double*, std::int64_t, int, double);
template void gemm<std::uint32_t>(const GemmConfig<std::uint32_t>&, const core::HostMatrix&,
                                  const core::HostMatrix&, std::uint32_t*, std::int64_t, int, double);
template void gemm<std::uint64_t>(const GemmConfig<std::uint64_t>&, const core::HostMatrix&,
                                  const core::HostMatrix&, std::uint64_t*, std::int64_t, int, double);
template void gemm<Complex64>(const GemmConfig<Complex64>&, const core::HostMatrix&,
                              const core::HostMatrix&, Complex64*, std::int64_t, int, double);
template void gemm<Complex128>(const GemmConfig<Complex128>&, const core::HostMatrix&,
                               const core::HostMatrix&, Complex128*, std::int64_t, int, double);

// The packers of the tile shapes in kernel_table.cpp.
template void pack_a_panels<float, 14>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, float*);
template void pack_a_panels<double, 14>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                        std::int64_t, std::int64_t, double*);
template void pack_a_panels<float, 6>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t, float*);
template void pack_a_panels<double, 6>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, double*);
template void pack_a_panels<float, 4>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t, float*);
template void pack_a_panels<double, 4>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, double*);
template void pack_b_panels<float, 32>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, float*);
template void pack_b_panels<double, 16>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                        std::int64_t, std::int64_t, double*);
template void pack_b_panels<float, 16>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, float*);
template void pack_b_panels<double, 8>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, double*);
template void pack_b_panels<float, 8>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t, float*);
template void pack_b_panels<double, 4>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, double*);
template void pack_a_panels<float, 8>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t, float*);
template void pack_a_panels<double, 8>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, double*);
template void pack_b_panels<float, 12>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, float*);
template void pack_b_panels<double, 6>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, double*);
// The integer products' (u32 as f32's shapes, u64 as f64's).
template void pack_a_panels<std::uint32_t, 14>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::uint32_t*);
template void pack_b_panels<std::uint32_t, 32>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::uint32_t*);
template void pack_a_panels<std::uint64_t, 14>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::uint64_t*);
template void pack_b_panels<std::uint64_t, 16>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::uint64_t*);
template void pack_a_panels<std::uint32_t, 6>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint32_t*);
template void pack_b_panels<std::uint32_t, 16>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::uint32_t*);
template void pack_a_panels<std::uint64_t, 6>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint64_t*);
template void pack_b_panels<std::uint64_t, 8>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint64_t*);
template void pack_a_panels<std::uint32_t, 4>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint32_t*);
template void pack_b_panels<std::uint32_t, 8>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint32_t*);
template void pack_a_panels<std::uint64_t, 4>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint64_t*);
template void pack_b_panels<std::uint64_t, 4>(const core::HostMatrix&, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::uint64_t*);

// The complex kernels' packers (complex elements moved whole), for the tiles their tunables may
// pick (kernel_table.cpp, complex_config).
#define PM_COMPLEX_PACKERS(C)                                                                       \
  template void pack_a_panels<C, 2>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_a_panels<C, 3>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_a_panels<C, 4>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_a_panels<C, 7>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_b_panels<C, 4>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_b_panels<C, 6>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_b_panels<C, 8>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                    std::int64_t, C*);                                              \
  template void pack_b_panels<C, 12>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                     std::int64_t, C*);                                             \
  template void pack_b_panels<C, 16>(const core::HostMatrix&, std::int64_t, std::int64_t, std::int64_t, \
                                     std::int64_t, C*);
PM_COMPLEX_PACKERS(Complex64)
PM_COMPLEX_PACKERS(Complex128)
#undef PM_COMPLEX_PACKERS

Scratch::~Scratch() { std::free(p_); }

void* Scratch::get(std::size_t bytes) {
  if (bytes <= bytes_) return p_;
  std::free(p_);
  p_ = nullptr, bytes_ = 0;
  const std::size_t align = bytes >= (std::size_t(4) << 20) ? (std::size_t(2) << 20) : 64;
  bytes = static_cast<std::size_t>(round_up(static_cast<std::int64_t>(bytes), align));
  p_ = std::aligned_alloc(align, bytes);
  if (!p_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (align > 64) madvise(p_, bytes, MADV_HUGEPAGE);
#endif
  bytes_ = bytes;
  return p_;
}

bool switched_off(const char* name) {
  const char* e = std::getenv(name);
  return e && e[0] == '0';
}

}  // namespace portmat::cpu
