// One process-wide pool of worker threads for the CPU backend, and the waiting primitive its jobs
// use to wait for each other.
//
// Why our own pool (not OpenMP): one shared set of threads for every caller, so that many Python
// threads calling matmul at once queue for the pool instead of multiplying the thread count; no
// dependence on the compiler's OpenMP runtime (or a clash with NumPy's OpenBLAS threads); and
// low latency for small products: the caller runs part 0 itself, and waiting threads spin for a
// few tens of microseconds before they sleep.
//
// Waiting threads sleep in the kernel (a futex) rather than yield in a loop: under Linux's EEVDF
// scheduler a sched_yield loop still takes its fair share of a core, which starves whichever
// thread shares that core (seen with OpenBLAS's spinning workers in the same process).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace portmat::cpu {

// A word that threads wait on until a condition about shared state holds: waiters spin for up to
// `spin_us`, then sleep until the next notify_all(). Whoever changes the state the condition reads
// calls notify_all() afterwards (cheap when nobody sleeps).
class WaitWord {
 public:
  template <class Pred>
  void wait_until(Pred ready, int spin_us);
  void notify_all();

 private:
  void sleep(std::uint32_t seen);
  alignas(64) std::atomic<std::uint32_t> word_{0};
  std::atomic<int> sleepers_{0};
};

class ThreadPool {
 public:
  using Job = void (*)(void* ctx, int tid);

  // Runs job(ctx, 0) on the calling thread and job(ctx, tid) on up to n-1 workers, tid 1 .. n-1,
  // each of which joins only if it wakes before the caller's own part is done: the job must not
  // depend on any worker showing up (CPU-backend jobs share out work dynamically). Returns when
  // every worker that joined has finished. One job at a time: the caller holds lock() throughout.
  void run(int n, Job job, void* ctx);
  std::mutex& lock() { return run_mutex_; }

  static ThreadPool& instance();  // never destroyed: workers may be asleep at exit

 private:
  ThreadPool() = default;
  void grow(int workers);
  void worker_main(int tid);

  void keep_off_cpu_of_caller();

  std::mutex run_mutex_;
  std::vector<std::thread::native_handle_type> workers_;
  int excluded_cpu_ = -1;  // the caller CPU the workers' affinity leaves out, -1: none

  // The current job, published by bumping generation_. entry_ holds the job's generation (high 32
  // bits), a closed flag (bit 31) and how many workers joined (low bits): workers join with a CAS
  // that fails once the caller has closed the job, so none can touch a job that has returned.
  static constexpr std::uint64_t kClosed = std::uint64_t(1) << 31;
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  int job_threads_ = 0;
  alignas(64) std::atomic<std::uint32_t> generation_{0};
  alignas(64) std::atomic<std::uint64_t> entry_{0};
  alignas(64) std::atomic<int> finished_{0};
  WaitWord start_, finish_;
};

// Threads the CPU backend uses per call: set_num_threads(), else $PORTMAT_NUM_THREADS, else the
// CPUs this process may run on.
int configured_threads();

// run_parts on `pool`, whose lock the caller already holds (the GEMM driver's plans).
template <class F>
void run_parts_locked(ThreadPool& pool, std::int64_t parts, int threads, F&& f) {
  if (threads <= 1 || parts <= 1) {
    for (std::int64_t p = 0; p < parts; ++p) f(p);
    return;
  }
  struct Job {
    F& f;
    std::int64_t parts;
    std::atomic<std::int64_t> next{0};
  } job{f, parts};
  pool.run(static_cast<int>(std::min<std::int64_t>(threads, parts)), [](void* ctx, int) {
    auto& j = *static_cast<Job*>(ctx);
    for (std::int64_t p; (p = j.next.fetch_add(1, std::memory_order_relaxed)) < j.parts;) j.f(p);
  }, &job);
}

// Runs f(part) for part < parts on up to `threads` threads of the pool (parts claimed from a
// counter, so a descheduled thread delays nobody), or on this thread alone.
template <class F>
void run_parts(std::int64_t parts, int threads, F&& f) {
  if (threads <= 1 || parts <= 1) return run_parts_locked(ThreadPool::instance(), parts, threads, f);
  ThreadPool& pool = ThreadPool::instance();
  std::lock_guard<std::mutex> lock(pool.lock());
  run_parts_locked(pool, parts, threads, f);
}

// Part `i` of `n` equal shares of [0, count): the first ones get one more when n does not divide.
inline void share(std::int64_t count, int n, int i, std::int64_t& begin, std::int64_t& end) {
  const std::int64_t base = count / n, extra = count % n;
  begin = i * base + std::min<std::int64_t>(i, extra);
  end = begin + base + (i < extra ? 1 : 0);
}

// run_parts with home ranges: thread tid first claims the parts of its own contiguous share (share
// of `parts` among the threads), then what is left of the others' shares. The pool's threads keep
// their tids from call to call (the caller is tid 0, each worker its own), so in a loop of calls on
// one operand each thread reads the rows it read last time, still in its core's cache, while a
// thread that is late or absent still holds no one up. For parts that each read their own slice
// of an operand small enough to stay in the cores' caches between calls (dots_pieces).
template <class F>
void run_parts_homed(std::int64_t parts, int threads, F&& f) {
  if (threads <= 1 || parts <= 1) return run_parts(parts, 1, f);
  const int n = static_cast<int>(std::min<std::int64_t>(threads, parts));
  struct alignas(64) Home {
    std::atomic<std::int64_t> next{0};  // parts of this share claimed so far
  };
  std::unique_ptr<Home[]> homes(new Home[n]);
  struct Job {
    F& f;
    std::int64_t parts;
    int n;
    Home* homes;
  } job{f, parts, n, homes.get()};
  ThreadPool& pool = ThreadPool::instance();
  std::lock_guard<std::mutex> lock(pool.lock());
  pool.run(n, [](void* ctx, int tid) {
    auto& j = *static_cast<Job*>(ctx);
    for (int v = 0; v < j.n; ++v) {
      const int owner = (tid + v) % j.n;
      std::int64_t begin, end;
      share(j.parts, j.n, owner, begin, end);
      for (std::int64_t i; (i = j.homes[owner].next.fetch_add(1, std::memory_order_relaxed)) < end - begin;)
        j.f(begin + i);
    }
  }, &job);
}

// ---- implementation of the template ------------------------------------------------------------
void cpu_relax();
std::uint64_t now_ns();

template <class Pred>
void WaitWord::wait_until(Pred ready, int spin_us) {
  if (ready()) return;
  const std::uint64_t until = now_ns() + std::uint64_t(spin_us) * 1000;
  for (int i = 1;; ++i) {
    if (ready()) return;
    cpu_relax();
    if (i % 64 == 0 && now_ns() > until) break;  // reading the clock costs ~20 ns: not every turn
  }
  for (;;) {
    const std::uint32_t seen = word_.load(std::memory_order_seq_cst);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (!ready()) sleep(seen);  // returns at once if word_ moved on since `seen`
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (ready()) return;
  }
}

}  // namespace portmat::cpu
