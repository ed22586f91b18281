// The CPU backend's thread pool (see thread_pool.hpp) and its thread-count setting.
#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <string>

#include "core/process.hpp"
#include "portmat/cpu.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#ifdef __linux__
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace portmat::cpu {

namespace {

// An idle worker spins this long after a job before it sleeps: long enough to catch the next call
// of a loop of small products (Python's overhead between calls is a few microseconds), short
// enough not to take a core from the rest of the program for long.
constexpr int kIdleSpinUs = 50;

int cpus_available() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

// More threads than CPUs only slow a compute-bound product down (each extra thread takes turns on
// a core and evicts its neighbour's cache), so requests are clamped to the CPUs this process may
// run on, by set_num_threads() and $PORTMAT_NUM_THREADS alike.
int clamped(long n) { return static_cast<int>(std::min<long>(n, cpus_available())); }

int default_threads() {
  if (const char* env = std::getenv("PORTMAT_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end && *end == '\0' && n > 0) return clamped(n);  // anything else: the default
  }
  return cpus_available();
}

std::atomic<int> g_threads{0};  // 0: not chosen yet

#ifndef __linux__
// Without futexes: one process-wide condition variable for every WaitWord (waits are rare and
// short; spurious wake-ups only re-check).
std::mutex g_sleep_mutex;
std::condition_variable g_sleep_cv;
#endif

}  // namespace

void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void WaitWord::sleep(std::uint32_t seen) {
#ifdef __linux__
  // std::atomic<uint32_t> is a plain 32-bit word here (lock-free), as the futex call needs.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, seen, nullptr,
          nullptr, 0);
#else
  std::unique_lock<std::mutex> lock(g_sleep_mutex);
  g_sleep_cv.wait(lock, [&] { return word_.load() != seen; });
#endif
}

void WaitWord::notify_all() {
  word_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
#ifdef __linux__
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, INT_MAX,
          nullptr, nullptr, 0);
#else
  std::lock_guard<std::mutex> lock(g_sleep_mutex);
  g_sleep_cv.notify_all();
#endif
}

namespace {
std::atomic<ThreadPool*> g_pool{nullptr};

// A child made by fork() has none of the workers, and may have inherited run_mutex_ held by a
// thread that was inside a product: its pool is dropped (left as it is, like the parent's pool at
// exit) and the child makes its own at its first product. The handler runs while the child has one
// thread; it is installed when the library is loaded, since one installed while another thread
// forks runs in neither process (registry.cpp says more).
const bool pool_fork_handler = [] {
  core::on_fork(nullptr, nullptr, [] { g_pool.store(nullptr, std::memory_order_relaxed); });
  return true;
}();
}  // namespace

ThreadPool& ThreadPool::instance() {
  // No function-local static: a fork() while another thread initialised one would leave its guard
  // taken in the child. Two first callers may both make a pool; one is kept, the other (no
  // workers yet) deleted.
  ThreadPool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  auto* fresh = new ThreadPool;  // leaked on purpose (see header)
  if (g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *p;
}

void ThreadPool::grow(int workers) {
  while (static_cast<int>(workers_.size()) < workers) {
    const int tid = static_cast<int>(workers_.size()) + 1;
    std::thread t([this, tid] { worker_main(tid); });
    workers_.push_back(t.native_handle());
    t.detach();
    excluded_cpu_ = -1;  // the new worker has the process's full affinity
  }
}

// Linux's wake-up placement often puts a woken worker on the waker's CPU (it looks cache-hot),
// where it shares one core with the caller until the load balancer moves it, milliseconds later:
// a 2-thread product then runs at 1-thread speed. So the workers' affinity leaves out the CPU the
// caller is on; it is updated only when the caller's CPU changes (one syscall per worker).
void ThreadPool::keep_off_cpu_of_caller() {
#ifdef __linux__
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu == excluded_cpu_) return;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || !CPU_ISSET(cpu, &set) || CPU_COUNT(&set) < 2)
    return;
  CPU_CLR(cpu, &set);
  for (auto handle : workers_) pthread_setaffinity_np(handle, sizeof set, &set);
  excluded_cpu_ = cpu;
#endif
}

void ThreadPool::run(int n, Job job, void* ctx) {
  if (n <= 1) {
    job(ctx, 0);
    return;
  }
  grow(n - 1);
  job_ = job;
  ctx_ = ctx;
  job_threads_ = n;
  finished_.store(0, std::memory_order_relaxed);
  const std::uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  entry_.store(std::uint64_t(gen) << 32, std::memory_order_relaxed);
  keep_off_cpu_of_caller();
  generation_.store(gen, std::memory_order_seq_cst);  // publishes the job
  start_.notify_all();
  job(ctx, 0);
  // Close the job; wait only for the workers that joined before that.
  const std::uint64_t joined = entry_.fetch_or(kClosed, std::memory_order_acq_rel) & (kClosed - 1);
  finish_.wait_until(
      [&] { return finished_.load(std::memory_order_acquire) == static_cast<int>(joined); }, 1000);
}

void ThreadPool::worker_main(int tid) {
  std::uint32_t seen = 0;
  for (;;) {
    start_.wait_until([&] { return generation_.load(std::memory_order_acquire) != seen; },
                      kIdleSpinUs);
    seen = generation_.load(std::memory_order_acquire);
    std::uint64_t e = entry_.load(std::memory_order_acquire);
    bool joined = false;
    while ((e >> 32) == seen && !(e & kClosed)) {
      if (entry_.compare_exchange_weak(e, e + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;  // too late (or a newer job): nothing of that job may be touched
    if (tid < job_threads_) job_(ctx_, tid);  // the pool may be larger than the job
    finished_.fetch_add(1, std::memory_order_acq_rel);
    finish_.notify_all();
  }
}

int configured_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    int expected = 0;
    g_threads.compare_exchange_strong(expected, default_threads());
    n = g_threads.load(std::memory_order_relaxed);
  }
  return n;
}

}  // namespace portmat::cpu

namespace portmat {

void set_num_threads(int n) {
  cpu::g_threads.store(n > 0 ? cpu::clamped(n) : cpu::default_threads(), std::memory_order_relaxed);
}

int num_threads() { return cpu::configured_threads(); }

}  // namespace portmat
