// portmat in the processes and threads a C++ program makes: the big-stack runner, first calls
// from threads with small stacks, and children made by fork() (the CPU backend keeps working
// there; drivers that cannot survive fork() refuse with an error naming it). ctest runs each test
// in a process of its own, so "first call" means the process's first.
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/env_knobs.hpp"
#include "core/process.hpp"
#include "core/reference.hpp"
#include "portmat/portmat.hpp"
#include "test_util.hpp"

using portmat::DType;
using portmat::MatrixView;
using portmat::testing::random_vector;

namespace {

// Worst error ratio of an (m x k) @ (k x n) float32 product on `device` (<= 1: right).
double product(const std::string& device, std::int64_t m, std::int64_t k, std::int64_t n) {
  std::mt19937 rng(static_cast<unsigned>(m * 31 + k * 7 + n));
  auto a = random_vector<float>(m * k, rng), b = random_vector<float>(k * n, rng);
  std::vector<float> c(m * n, -12345.0f);
  MatrixView va{a.data(), m, k, k, 1, DType::f32}, vb{b.data(), k, n, n, 1, DType::f32};
  MatrixView vc{c.data(), m, n, n, 1, DType::f32};
  portmat::matmul(va, vb, vc, device);
  return portmat::reference::worst_error_ratio(va, vb, vc);
}

// Runs f on a thread with a `stack_bytes` stack and waits for it.
template <class F>
void on_thread_with_stack(std::size_t stack_bytes, F f) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, &attr, [](void* p) -> void* { (*static_cast<F*>(p))(); return nullptr; }, &f), 0);
  pthread_attr_destroy(&attr);
  pthread_join(t, nullptr);
}

// Forks; the child runs body() under a 60 s alarm and exits with its return value. Returns the
// child's exit code (negative: the signal that ended it).
template <class F>
int in_forked_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace

TEST(BigStack, ReturnsValuesAndExceptions) {
  EXPECT_EQ(portmat::core::on_big_stack([] { return 42; }), 42);
  EXPECT_THROW(portmat::core::on_big_stack([]() -> int { throw std::invalid_argument("x"); }),
               std::invalid_argument);
  // Deeper than any default thread stack: 12 MiB of frames.
  std::function<int(int)> deep = [&](int d) -> int {
    volatile char pad[4096];
    pad[d % 4096] = 1;
    return d == 0 ? 0 : deep(d - 1) + pad[d % 4096];
  };
  EXPECT_EQ(portmat::core::on_big_stack([&] { return deep(3000); }), 3000);
}

TEST(BigStack, ShortStacksAreNoticed) {
  EXPECT_FALSE(portmat::core::stack_is_short());
  bool short_there = false;
  on_thread_with_stack(64 << 10, [&] { short_there = portmat::core::stack_is_short(); });
  EXPECT_TRUE(short_there);
}

class ProcessEveryDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(ProcessEveryDevice, FirstCallFromASmallStackThread) {
  double worst = -1;
  std::string error;
  on_thread_with_stack(64 << 10, [&] {
    try {
      worst = std::max(product(GetParam(), 67, 45, 38), product(GetParam(), 300, 257, 310));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  EXPECT_EQ(error, "");
  EXPECT_GE(worst, 0.0);
  EXPECT_LE(worst, 1.0);
}

TEST_P(ProcessEveryDevice, ForkedChildComputesOrRefusesClearly) {
  ASSERT_LE(product(GetParam(), 300, 257, 310), 1.0);  // the driver (if any) is started here
  const bool survives = GetParam().rfind("cpu:", 0) == 0;
  const int code = in_forked_child([&] {
    try {
      return product(GetParam(), 300, 257, 310) <= 1.0 ? 0 : 1;
    } catch (const portmat::DeviceError& e) {
      const std::string msg = e.what();
      return msg.find("fork") != std::string::npos && msg.find("spawn") != std::string::npos ? 10 : 11;
    }
  });
  EXPECT_EQ(code, survives ? 0 : 10);
  EXPECT_LE(product(GetParam(), 300, 257, 310), 1.0);  // and the parent keeps working
}

INSTANTIATE_TEST_SUITE_P(Devices, ProcessEveryDevice, ::testing::ValuesIn(portmat::testing::device_ids()),
                         portmat::testing::DeviceName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ProcessEveryDevice);

#ifdef PORTMAT_WITH_CPU
TEST(Process, ForkWhileAnotherThreadIsInsideACpuProduct) {
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) product("cpu:0", 400, 400, 400);
  });
  std::vector<int> codes;
  for (int i = 0; i < 8; ++i) {
    usleep(20000);
    codes.push_back(in_forked_child([] { return product("cpu:0", 300, 257, 310) <= 1.0 ? 0 : 1; }));
  }
  stop = true;
  busy.join();
  EXPECT_EQ(codes, std::vector<int>(8, 0));
}
#endif

// A backend's launch knobs (core/env_knobs.hpp): one pass over the environment a call, lookups
// among the prefix's variables alone, and a change noticed (the CUDA backend then plans again).
TEST(EnvKnobs, ReadsTheCallsKnobsAndNoticesChanges) {
  const char* names[] = {"PORTMAT_TESTKNOB_A", "PORTMAT_TESTKNOB_AB", "PORTMAT_TESTKNOB_BAD", "PORTMAT_TESTKNOB_EMPTY"};
  for (const char* n : names) unsetenv(n);
  portmat::core::EnvKnobs knobs("PORTMAT_TESTKNOB_");
  knobs.read();
  EXPECT_FALSE(knobs.any());
  EXPECT_FALSE(knobs.read());  // nothing changed
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_A", -7), -7);

  setenv("PORTMAT_TESTKNOB_AB", "12", 1);
  setenv("PORTMAT_TESTKNOB_BAD", "3x", 1);
  setenv("PORTMAT_TESTKNOB_EMPTY", "", 1);
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_AB", -1), -1);  // not until the next read
  EXPECT_TRUE(knobs.read());
  EXPECT_TRUE(knobs.any());
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_AB", -1), 12);
  EXPECT_EQ(knobs.text("PORTMAT_TESTKNOB_A"), nullptr);  // a name's prefix is not the name
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_A", 5), 5);
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_BAD", 4), 4);  // not a whole number: the fallback
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_EMPTY", 6), 6);
  ASSERT_NE(knobs.text("PORTMAT_TESTKNOB_EMPTY"), nullptr);
  EXPECT_STREQ(knobs.text("PORTMAT_TESTKNOB_EMPTY"), "");
  EXPECT_STREQ(knobs.text("PORTMAT_TESTKNOB_BAD"), "3x");
  EXPECT_EQ(knobs.text("PORTMAT_TESTKNOB_"), nullptr);
  EXPECT_EQ(knobs.text("HOME"), nullptr);  // outside the prefix: never looked up
  EXPECT_FALSE(knobs.read());

  setenv("PORTMAT_TESTKNOB_A", "-3", 1);
  EXPECT_TRUE(knobs.read());
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_A", 0), -3);
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_AB", 0), 12);
  setenv("PORTMAT_TESTKNOB_A", "-4", 1);  // the same names, another value
  EXPECT_TRUE(knobs.read());
  EXPECT_EQ(knobs.value("PORTMAT_TESTKNOB_A", 0), -4);

  for (const char* n : names) unsetenv(n);
  EXPECT_TRUE(knobs.read());
  EXPECT_FALSE(knobs.any());
  EXPECT_EQ(knobs.text("PORTMAT_TESTKNOB_AB"), nullptr);
}
