// Which strided views a kernel reads in place, and the packing of the rest.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/layout.hpp"

using portmat::DType;
using portmat::MatrixView;

namespace {
MatrixView view(float* p, std::int64_t r, std::int64_t c, std::int64_t rs, std::int64_t cs) {
  return MatrixView{p, r, c, rs, cs, DType::f32};
}
}  // namespace

TEST(Layout, RowMajorAndSlicesAreReadInPlace) {
  std::vector<float> buf(100);
  auto m = portmat::core::dense_in_place(view(buf.data(), 4, 5, 5, 1));
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->col_major);
  EXPECT_EQ(m->ld, 5);
  m = portmat::core::dense_in_place(view(buf.data(), 4, 5, 9, 1));  // a column slice
  ASSERT_TRUE(m);
  EXPECT_EQ(m->ld, 9);
  EXPECT_EQ(m->span(), 3u * 9 + 5);
}

TEST(Layout, TransposedViewsAreColumnMajor) {
  std::vector<float> buf(100);
  auto m = portmat::core::dense_in_place(view(buf.data(), 4, 5, 1, 6));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->col_major);
  EXPECT_EQ(m->ld, 6);
}

TEST(Layout, SingleRowsAndColumnsIgnoreTheirMeaninglessStride) {
  std::vector<float> buf(100);
  EXPECT_TRUE(portmat::core::dense_in_place(view(buf.data(), 1, 5, -77, 1)));
  EXPECT_TRUE(portmat::core::dense_in_place(view(buf.data(), 5, 1, 3, 0)));
}

TEST(Layout, NegativeZeroAndDoublyStridedViewsArePacked) {
  std::vector<float> buf(64);
  std::iota(buf.begin(), buf.end(), 0.0f);
  EXPECT_FALSE(portmat::core::dense_in_place(view(buf.data() + 56, 3, 4, -8, 1)));
  EXPECT_FALSE(portmat::core::dense_in_place(view(buf.data(), 3, 4, 0, 1)));
  EXPECT_FALSE(portmat::core::dense_in_place(view(buf.data(), 3, 4, 16, 2)));
  EXPECT_FALSE(portmat::core::dense_in_place(view(buf.data(), 3, 4, 4, 1 - 2)));

  // Rows counted backwards from row 7, every other column: element (i, j) = buf[56 - 8i + 2j].
  std::vector<unsigned char> storage;
  auto m = portmat::core::as_dense(view(buf.data() + 56, 3, 4, -8, 2), storage);
  ASSERT_FALSE(m.col_major);
  ASSERT_EQ(m.ld, 4);
  const float* p = static_cast<const float*>(m.data);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(p[i * 4 + j], 56 - 8 * i + 2 * j) << i << "," << j;
}
