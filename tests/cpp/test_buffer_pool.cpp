// The device buffer pool: reuse of fitting buffers, the waste limit, the size cap and trimming.
#include <gtest/gtest.h>

#include "core/buffer_pool.hpp"
#include "core/host_block_pool.hpp"

#include <cstdlib>
#include <memory>

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

// HostBlockPool (result blocks recycled across calls): a freed block is handed out again for a
// request of a similar size, reuse_only never allocates, the live limit refuses, free blocks past
// `keep` are released, contains() knows only live blocks.
TEST(HostBlockPool, RecyclesBlocksWithinItsLimits) {
  constexpr std::size_t MiB = std::size_t(1) << 20;
  int allocated = 0, released = 0;
  auto pool = std::make_shared<portmat::core::HostBlockPool>(
      4 * MiB, 8 * MiB,
      [&](std::size_t bytes) {
        ++allocated;
        return portmat::core::allocate_huge_aligned(bytes);
      },
      [&](void* p) {
        ++released;
        std::free(p);
      });
  EXPECT_EQ(pool->get(3 * MiB, true), nullptr) << "reuse_only with nothing free";
  EXPECT_EQ(allocated, 0);
  void *first = nullptr, *second = nullptr;
  {
    auto a = pool->get(3 * MiB);  // rounded up to 4 MiB
    ASSERT_NE(a, nullptr);
    first = a.get();
    static_cast<char*>(first)[4 * MiB - 1] = 1;  // the whole rounded size is usable
    EXPECT_TRUE(pool->contains(static_cast<char*>(first) + MiB, 3 * MiB));
    EXPECT_FALSE(pool->contains(static_cast<char*>(first) + 3 * MiB, 2 * MiB)) << "past its block";
    auto b = pool->get(4 * MiB);
    ASSERT_NE(b, nullptr);
    second = b.get();
    EXPECT_NE(second, first);
    EXPECT_EQ(pool->get(2 * MiB), nullptr) << "4 + 4 MiB live: the limit is 8";
  }
  EXPECT_EQ(allocated, 2);
  EXPECT_EQ(released, 1) << "8 MiB freed, 4 kept";
  EXPECT_FALSE(pool->contains(first, 1)) << "a free block is no one's";
  EXPECT_FALSE(pool->contains(second, 1));
  auto again = pool->get(3 * MiB + 5, true);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again.get() == first || again.get() == second) << "the kept block";
  EXPECT_EQ(allocated, 2);
  EXPECT_EQ(pool->get(MiB, true), nullptr) << "no free block left";
}
