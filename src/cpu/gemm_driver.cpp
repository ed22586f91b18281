// The blocking, packing and threading around the micro-kernels (see gemm_driver.hpp).
//
// Portable C++ compiled without ISA flags: everything here is memory movement and loop control;
// all arithmetic that matters happens inside the micro-kernel chosen by kernel_table.cpp.
#include "cpu/gemm_driver.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "cpu/thread_pool.hpp"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace portmat::cpu {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// Part `i` of `n` equal shares of [0, count): the first ones get one more when n does not divide.
void share(std::int64_t count, int n, int i, std::int64_t& begin, std::int64_t& end) {
  const std::int64_t base = count / n, extra = count % n;
  begin = i * base + std::min<std::int64_t>(i, extra);
  end = begin + base + (i < extra ? 1 : 0);
}

// Grow-only scratch for packed panels, reused across calls: a fresh allocation per call would
// page-fault megabytes every time. Large buffers are 2 MiB aligned and advised to use huge pages
// (fewer TLB misses when the kernel walks a big packed B block).
class Scratch {
 public:
  ~Scratch() { std::free(p_); }
  void* get(std::size_t bytes) {
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

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// How one call is cut up: block sizes fitted to the shape, and the work items of each step.
//
// The loop nest runs as a sequence of steps, one per (jc, pc, ic) block triple. Each step packs an
// A block (items: MR panels) into one of two A buffers, and the first step of each (jc, pc) packs
// the B block (items: NR panels); then the step's micro-tiles are computed (items: one B
// micro-panel times a run of A micro-panels). Threads claim items from per-step atomic counters,
// so the work goes to whichever threads are running: a thread the OS has descheduled (a busy
// machine, another library's spinning workers) slows the call down by at most one item, and the
// caller finishes alone if no worker shows up at all. Ordering is by completion counts:
//   compute(s)  waits for A(s) and the step's B block to be packed;
//   A(s)        waits for compute(s-2), the last user of its buffer (double buffering lets the
//               first threads done with step s-1 pack ahead while others finish);
//   B block     waits for every compute step of the previous B block.
// Every wait is for items already claimed, and a claimed item never waits: no deadlock.
struct Plan {
  std::int64_t m, n, k;
  std::int64_t mc, kc, nc;          // actual block sizes (<= the table's)
  std::int64_t jc_blocks, pc_blocks, ic_blocks;
  std::int64_t ir_chunks;           // compute items per B micro-panel
  int threads;
  std::int64_t steps() const { return jc_blocks * pc_blocks * ic_blocks; }
};

template <class T>
Plan make_plan(const GemmConfig<T>& cfg, std::int64_t m, std::int64_t n, std::int64_t k,
               int max_threads, double min_flops_per_thread) {
  Plan p{};
  p.m = m, p.n = n, p.k = k;
  // Equal blocks rather than full ones plus a runt: a K of 400 with kc 384 becomes 2 x 200.
  p.pc_blocks = ceil_div(k, cfg.kc);
  p.kc = ceil_div(k, p.pc_blocks);
  p.jc_blocks = ceil_div(n, cfg.nc);
  p.nc = round_up(ceil_div(n, p.jc_blocks), cfg.nr);
  p.jc_blocks = ceil_div(n, p.nc);
  p.ic_blocks = ceil_div(m, cfg.mc);
  p.mc = round_up(ceil_div(m, p.ic_blocks), cfg.mr);
  p.ic_blocks = ceil_div(m, p.mc);
  const double flops = 2.0 * m * n * k;
  p.threads = max_threads;
  if (min_flops_per_thread > 0)
    p.threads = static_cast<int>(std::min<double>(p.threads, flops / min_flops_per_thread));
  p.threads = std::max(p.threads, 1);
  // Enough compute items per step to balance (4 per thread), but no smaller than needed: each
  // item re-reads its B micro-panel, and a long run of A panels amortises the claim.
  const std::int64_t n_panels = ceil_div(p.nc, cfg.nr), m_panels = ceil_div(p.mc, cfg.mr);
  p.ir_chunks = std::min(m_panels, std::max<std::int64_t>(1, ceil_div(4 * p.threads, n_panels)));
  return p;
}

// Where step s works and how many items each of its phases has.
struct Step {
  std::int64_t bi, icb;           // B block index, A block index within it
  std::int64_t jc, pc, ic;        // the block's origin
  std::int64_t nc, kc, mc;        // its size
  std::int64_t n_panels, m_panels;
  std::int64_t chunks, chunk_panels;  // compute items per B micro-panel, A panels per item
  std::int64_t items() const { return n_panels * chunks; }
};

Step step_of(const Plan& p, int mr, int nr, std::int64_t s) {
  Step t;
  t.bi = s / p.ic_blocks, t.icb = s % p.ic_blocks;
  t.jc = (t.bi / p.pc_blocks) * p.nc, t.pc = (t.bi % p.pc_blocks) * p.kc, t.ic = t.icb * p.mc;
  t.nc = std::min(p.nc, p.n - t.jc), t.kc = std::min(p.kc, p.k - t.pc);
  t.mc = std::min(p.mc, p.m - t.ic);
  t.n_panels = ceil_div(t.nc, nr), t.m_panels = ceil_div(t.mc, mr);
  t.chunks = std::min(p.ir_chunks, t.m_panels);  // fewer when this A block is a short runt
  t.chunk_panels = ceil_div(t.m_panels, t.chunks);
  t.chunks = ceil_div(t.m_panels, t.chunk_panels);  // no empty chunk at the end
  return t;
}

// The counters of one phase (packing a block, or computing a step): items are split into one
// contiguous home range per thread, claimed through next[thread]; done counts finished items.
// Home ranges keep a thread on the same B micro-panels in every step, so the part of the B block
// it packed and uses stays in its own L2; when a thread's range runs out it takes items from the
// others' ranges, so a thread that is late or absent holds no one up.
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
  T* b_pack;           // kc x round_up(nc, nr)
  T* a_pack[2];        // round_up(mc, mr) x kc each
  Phase* b_phase;      // [jc_blocks * pc_blocks]
  Phase* a_phase;      // [steps]
  Phase* c_phase;      // [steps]
  WaitWord* progress;  // notified whenever a phase completes
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

  auto computed = [&](std::int64_t s) {
    return complete(job.c_phase[s], step_of(p, mr, nr, s).items());
  };
  for (std::int64_t s = 0; s < p.steps(); ++s) {
    const Step st = step_of(p, mr, nr, s);
    const std::int64_t jc = st.jc, pc = st.pc, ic = st.ic, nc = st.nc, kc = st.kc, mc = st.mc;
    const std::int64_t n_panels = st.n_panels, m_panels = st.m_panels;

    if (st.icb == 0) {  // the first step of a B block packs it, once the previous one is done with
      progress.wait_until(
          [&] {
            for (std::int64_t t = std::max<std::int64_t>(0, s - p.ic_blocks); t < s; ++t)
              if (!computed(t)) return false;
            return true;
          },
          kPhaseSpinUs);
      claim_all(job.b_phase[st.bi], n_panels, tid, p.threads, progress, [&](std::int64_t q) {
        cfg.pack_b(*job.b, pc, kc, jc + q * nr, std::min<std::int64_t>(nr, nc - q * nr),
                   job.b_pack + q * nr * kc);
      });
    }

    T* a_pack = job.a_pack[s % 2];
    if (s >= 2) progress.wait_until([&] { return computed(s - 2); }, kPhaseSpinUs);
    claim_all(job.a_phase[s], m_panels, tid, p.threads, progress, [&](std::int64_t r) {
      cfg.pack_a(*job.a, ic + r * mr, std::min<std::int64_t>(mr, mc - r * mr), pc, kc,
                 a_pack + r * mr * kc);
    });

    progress.wait_until(
        [&] { return complete(job.b_phase[st.bi], n_panels) && complete(job.a_phase[s], m_panels); },
        kPhaseSpinUs);
    claim_all(job.c_phase[s], st.items(), tid, p.threads, progress, [&](std::int64_t item) {
      const std::int64_t q = item / st.chunks, r0 = (item % st.chunks) * st.chunk_panels;
      const std::int64_t r1 = std::min(m_panels, r0 + st.chunk_panels);
      const T* bp = job.b_pack + q * nr * kc;
      const int n_tile = static_cast<int>(std::min<std::int64_t>(nr, nc - q * nr));
      T* c_col = job.c + jc + q * nr;
      for (std::int64_t r = r0; r < r1; ++r) {
        const int m_tile = static_cast<int>(std::min<std::int64_t>(mr, mc - r * mr));
        cfg.ukernel(kc, a_pack + r * mr * kc, bp, c_col + (ic + r * mr) * job.ldc, job.ldc, m_tile,
                    n_tile, pc > 0);
      }
    });
  }
}

template <class T>
void run_plan(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b,
              T* c, std::int64_t ldc, const Plan& plan, Scratch& scratch, ThreadPool* pool) {
  // Packed blocks start on 64-byte boundaries (the panels' own sizes need not be multiples).
  const std::int64_t line = 64 / sizeof(T);
  const std::int64_t b_elems = round_up(plan.kc * round_up(plan.nc, cfg.nr), line);
  const std::int64_t a_elems = round_up(round_up(plan.mc, cfg.mr) * plan.kc, line);
  T* base = static_cast<T*>(scratch.get((b_elems + 2 * a_elems) * sizeof(T)));
  const std::int64_t n_phases = plan.jc_blocks * plan.pc_blocks + 2 * plan.steps();
  std::unique_ptr<Phase[]> phases(new Phase[n_phases]);
  std::unique_ptr<std::atomic<std::int64_t>[]> next(
      new std::atomic<std::int64_t>[n_phases * plan.threads]());  // zeroed
  for (std::int64_t i = 0; i < n_phases; ++i) phases[i].next = next.get() + i * plan.threads;
  WaitWord progress;
  Job<T> job{&cfg, &a, &b, c, ldc, plan, base, {base + b_elems, base + b_elems + a_elems},
             phases.get(), phases.get() + plan.jc_blocks * plan.pc_blocks,
             phases.get() + plan.jc_blocks * plan.pc_blocks + plan.steps(), &progress};
  if (pool)
    pool->run(plan.threads, &run_thread<T>, &job);
  else
    run_thread<T>(&job, 0);
}

}  // namespace

template <class T, int MR>
void pack_a_panels(const core::HostMatrix& a, std::int64_t i0, std::int64_t m, std::int64_t p0,
                   std::int64_t k, T* dst) {
  const T* src = static_cast<const T*>(a.data) + a.offset;
  for (std::int64_t r = 0; r < m; r += MR, dst += MR * k) {
    const int rows = static_cast<int>(std::min<std::int64_t>(MR, m - r));
    const std::int64_t i = i0 + r;
    if (a.col_major) {  // column p of the panel is contiguous: a copy per k step
      for (std::int64_t p = 0; p < k; ++p) {
        const T* col = src + (p0 + p) * a.ld + i;
        T* d = dst + p * MR;
        for (int ii = 0; ii < rows; ++ii) d[ii] = col[ii];
        for (int ii = rows; ii < MR; ++ii) d[ii] = T(0);
      }
    } else if (rows == MR) {  // a transpose: MR row streams, written MR apart
      const T* row0 = src + i * a.ld + p0;
      for (std::int64_t p = 0; p < k; ++p)
        for (int ii = 0; ii < MR; ++ii) dst[p * MR + ii] = row0[ii * a.ld + p];
    } else {
      const T* row0 = src + i * a.ld + p0;
      for (std::int64_t p = 0; p < k; ++p) {
        for (int ii = 0; ii < rows; ++ii) dst[p * MR + ii] = row0[ii * a.ld + p];
        for (int ii = rows; ii < MR; ++ii) dst[p * MR + ii] = T(0);
      }
    }
  }
}

template <class T, int NR>
void pack_b_panels(const core::HostMatrix& b, std::int64_t p0, std::int64_t k, std::int64_t j0,
                   std::int64_t n, T* dst) {
  const T* src = static_cast<const T*>(b.data) + b.offset;
  for (std::int64_t q = 0; q < n; q += NR, dst += NR * k) {
    const int cols = static_cast<int>(std::min<std::int64_t>(NR, n - q));
    const std::int64_t j = j0 + q;
    if (!b.col_major) {  // row p of the panel is contiguous
      for (std::int64_t p = 0; p < k; ++p) {
        const T* row = src + (p0 + p) * b.ld + j;
        T* d = dst + p * NR;
        if (cols == NR) {
          std::memcpy(d, row, NR * sizeof(T));
        } else {
          for (int jj = 0; jj < cols; ++jj) d[jj] = row[jj];
          for (int jj = cols; jj < NR; ++jj) d[jj] = T(0);
        }
      }
    } else {  // a transpose: one column stream per panel column
      for (int jj = 0; jj < cols; ++jj) {
        const T* col = src + (j + jj) * b.ld + p0;
        for (std::int64_t p = 0; p < k; ++p) dst[p * NR + jj] = col[p];
      }
      for (std::int64_t p = 0; p < k; ++p)
        for (int jj = cols; jj < NR; ++jj) dst[p * NR + jj] = T(0);
    }
  }
}

template <class T>
void gemm(const GemmConfig<T>& cfg, const core::HostMatrix& a, const core::HostMatrix& b, T* c,
          std::int64_t ldc, int threads, double min_flops_per_thread) {
  const Plan plan = make_plan(cfg, a.rows, b.cols, a.cols, threads, min_flops_per_thread);
  if (plan.threads == 1) {  // on the caller's thread, concurrently with other callers
    thread_local Scratch scratch;
    run_plan(cfg, a, b, c, ldc, plan, scratch, nullptr);
    return;
  }
  ThreadPool& pool = ThreadPool::instance();
  static Scratch shared;  // guarded by the pool's lock
  std::lock_guard<std::mutex> lock(pool.lock());
  run_plan(cfg, a, b, c, ldc, plan, shared, &pool);
}

template void gemm<float>(const GemmConfig<float>&, const core::HostMatrix&,
                          const core::HostMatrix&, float*, std::int64_t, int, double);
template void gemm<double>(const GemmConfig<double>&, const core::HostMatrix&,
                           const core::HostMatrix&, double*, std::int64_t, int, double);

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

}  // namespace portmat::cpu
