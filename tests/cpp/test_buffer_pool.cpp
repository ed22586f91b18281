// The device buffer pool: reuse of fitting buffers, the waste limit, the size cap and trimming.
#include <gtest/gtest.h>

#include "core/buffer_pool.hpp"

namespace {
int live = 0;  // buffers alive now
struct FakeBuffer {
  explicit FakeBuffer(std::size_t n) : n(n) { ++live; }
  ~FakeBuffer() { --live; }
  std::size_t bytes() const { return n; }
  std::size_t n;
};
}  // namespace

TEST(BufferPool, ReusesAFittingBufferAndCreatesOtherwise) {
  portmat::core::BufferPool<FakeBuffer> pool(1 << 20);
  int created = 0;
  auto make = [&](std::size_t n) {
    return [&, n] {
      ++created;
      return std::make_unique<FakeBuffer>(n);
    };
  };
  const FakeBuffer* first = nullptr;
  {
    auto lease = pool.lease(1000, make(1000));
    first = lease.get();
  }
  EXPECT_EQ(created, 1);
  EXPECT_FALSE(pool.empty());
  {
    auto again = pool.lease(600, make(600));  // fits and wastes less than half: reused
    EXPECT_EQ(again.get(), first);
    auto other = pool.lease(600, make(600));  // the pooled one is taken: a new one
    EXPECT_NE(other.get(), first);
  }
  EXPECT_EQ(created, 2);
  auto small = pool.lease(100, make(100));  // 1000 and 600 would waste more than half
  EXPECT_EQ(created, 3);
  EXPECT_EQ(small->bytes(), 100u);
}

TEST(BufferPool, KeepsAtMostItsCapAndTrimsOnRequest) {
  live = 0;
  {
    portmat::core::BufferPool<FakeBuffer> pool(1500);
    {
      auto a = pool.lease(1000, [] { return std::make_unique<FakeBuffer>(1000); });
      auto b = pool.lease(1000, [] { return std::make_unique<FakeBuffer>(1000); });
      EXPECT_EQ(live, 2);
    }
    EXPECT_EQ(live, 1);  // the second return went over 1500 bytes: the largest was freed
    pool.trim(0);
    EXPECT_EQ(live, 0);
    EXPECT_TRUE(pool.empty());
  }
}
