// What portmat needs to know about the process and thread it runs in: whether the process was
// forked since a driver started, and whether the calling thread has stack enough for driver work.
//
// Why: GPU and OpenCL drivers keep threads and locks that do not exist in a child made by fork(),
// so a child that uses a driver its parent started hangs or crashes; and drivers (PoCL's LLVM, the
// CUDA driver) need more stack than a Python thread started with threading.stack_size(64 KiB) has.
// The fork generation lets each backend refuse cleanly in such a child; on_big_stack() runs
// driver work on a thread whose stack portmat chose.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace portmat::core {

// Incremented in the child of every fork() (a pthread_atfork handler installed before portmat's
// first driver call). Work started in one generation may not be continued in another.
std::uint32_t fork_generation();

// Registers fork handlers: prepare() runs in the parent before fork(), parent() and child() after
// it, in each process. For locks that must not be inherited held: take them in prepare, release
// them in parent and child. Handlers run in reverse order of registration for prepare, in order
// for parent and child (POSIX).
void on_fork(void (*prepare)(), void (*parent)(), void (*child)());

// Runs f() on a new thread with a stack of kBigStackBytes and waits for it; exceptions cross back.
// For driver calls that may need deep stacks (probing, compiling).
constexpr std::size_t kBigStackBytes = std::size_t(16) << 20;
void on_big_stack_impl(const std::function<void()>& f);

template <class F>
auto on_big_stack(F&& f) -> std::invoke_result_t<F> {
  using R = std::invoke_result_t<F>;
  if constexpr (std::is_void_v<R>) {
    on_big_stack_impl(std::function<void()>(std::forward<F>(f)));
  } else {
    std::optional<R> out;
    on_big_stack_impl([&] { out.emplace(f()); });
    return std::move(*out);
  }
}

// Runs every task at once: tasks[0] on the calling thread, each other on a new thread with a stack
// of kBigStackBytes (one that cannot be started runs on the calling thread after tasks[0]).
// Returns once all have finished, then throws the exception of the first task (in order) that
// threw: an error on one thread never leaves another running, and never ends the process.
// For one product split across devices (multi_device.cpp).
void run_concurrently(const std::vector<std::function<void()>>& tasks);

// True when the calling thread has less than kStackNeeded bytes of stack left: a product or a
// driver call is then moved to a big-stack thread (with_enough_stack).
constexpr std::size_t kStackNeeded = std::size_t(1) << 20;
bool stack_is_short();

template <class F>
auto with_enough_stack(F&& f) -> std::invoke_result_t<F> {
  if (stack_is_short()) return on_big_stack(std::forward<F>(f));
  return f();
}

}  // namespace portmat::core
