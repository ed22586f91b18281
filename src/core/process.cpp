// See process.hpp.
#include "core/process.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "portmat/portmat.hpp"

#ifdef __unix__
#include <pthread.h>
#endif

namespace portmat::core {

namespace {
std::atomic<std::uint32_t> g_generation{0};
void next_generation() { g_generation.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

std::uint32_t fork_generation() {
#ifdef __unix__
  static const int installed = pthread_atfork(nullptr, nullptr, next_generation);
  (void)installed;
#endif
  return g_generation.load(std::memory_order_relaxed);
}

void on_fork(void (*prepare)(), void (*parent)(), void (*child)()) {
  fork_generation();  // the generation's handler first, so that it runs first in the child
#ifdef __unix__
  pthread_atfork(prepare, parent, child);
#else
  (void)prepare, (void)parent, (void)child;
#endif
}

void on_big_stack_impl(const std::function<void()>& f) {
#ifdef __unix__
  struct Call {
    const std::function<void()>* f;
    std::exception_ptr error;
  } call{&f, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kBigStackBytes);
  pthread_t thread;
  const int err = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        auto* c = static_cast<Call*>(p);
        try {
          (*c->f)();
        } catch (...) {
          c->error = std::current_exception();
        }
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    // No thread to be had (a process at its thread limit): the caller's own stack, if it is deep
    // enough, else a clear error rather than a crash.
    if (!stack_is_short()) return f();
    throw Error(std::string("portmat: cannot start a thread with a ") +
                std::to_string(kBigStackBytes >> 20) + " MiB stack for driver work: " +
                std::strerror(err) + " (the calling thread's own stack is too small to do it)");
  }
  pthread_join(thread, nullptr);
  if (call.error) std::rethrow_exception(call.error);
#else
  f();
#endif
}

void run_concurrently(const std::vector<std::function<void()>>& tasks) {
  std::vector<std::exception_ptr> errors(tasks.size());
  auto run = [&](std::size_t i) {
    try {
      tasks[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
#ifdef __unix__
  struct Start {
    decltype(run)* fn;
    std::size_t index;
  };
  std::vector<Start> starts(tasks.size());
  std::vector<pthread_t> threads;
  std::vector<std::size_t> not_started;
  for (std::size_t i = 1; i < tasks.size(); ++i) {
    starts[i] = {&run, i};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kBigStackBytes);
    pthread_t t;
    const int err = pthread_create(
        &t, &attr,
        [](void* p) -> void* {
          auto* s = static_cast<Start*>(p);
          (*s->fn)(s->index);
          return nullptr;
        },
        &starts[i]);
    pthread_attr_destroy(&attr);
    if (err == 0)
      threads.push_back(t);
    else
      not_started.push_back(i);
  }
  if (!tasks.empty()) run(0);
  for (std::size_t i : not_started) run(i);
  for (pthread_t t : threads) pthread_join(t, nullptr);
#else
  for (std::size_t i = 0; i < tasks.size(); ++i) run(i);
#endif
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

bool stack_is_short() {
#if defined(__linux__)
  // The lowest address of this thread's stack, found once per thread (for the main thread glibc
  // reads /proc/self/maps: a few microseconds, once).
  thread_local const char* lowest = [] {
    const char* lo = nullptr;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) lo = static_cast<const char*>(addr);
      pthread_attr_destroy(&attr);
    }
    return lo;
  }();
  if (!lowest) return false;
  // The frame address, not a local's: AddressSanitizer's fake stacks move locals elsewhere.
  const char* sp = static_cast<const char*>(__builtin_frame_address(0));
  return sp < lowest || static_cast<std::size_t>(sp - lowest) < kStackNeeded;
#else
  return false;
#endif
}

}  // namespace portmat::core
