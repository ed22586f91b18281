// portmat::DeviceArray on every device: products that stay on the device (stacks with broadcast
// batch axes, 1-D operands, awkward and empty shapes, K = 0) against the float64 reference, the
// integers exactly (wrapping as NumPy's do), strided host views copied in and out, a chain and a
// reused out= on the device, and the errors a caller gets. Device arrays take their own route
// (device_arrays.cpp: byte-offset views, merged batches, K = 0 by upload) that the host-view tests
// never reach, so it is checked here on its own, on fresh random inputs each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backend.hpp"
#include "core/reference.hpp"
#include "portmat/portmat.hpp"
#include "test_util.hpp"

using portmat::ArrayView;
using portmat::DeviceArray;
using portmat::DType;
using portmat::MatrixView;

namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t elements(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Shape c_strides(const Shape& s) {
  Shape st(s.size());
  std::int64_t step = 1;
  for (std::size_t i = s.size(); i-- > 0;) st[i] = step, step *= std::max<std::int64_t>(s[i], 1);
  return st;
}

std::string text(const Shape& s) { return ArrayView{nullptr, DType::f32, s, {}}.shape_str(); }

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::i64;
  if constexpr (std::is_same_v<T, std::uint32_t>) return DType::u32;
  return DType::u64;
}

// Floats uniform in [-1, 1); integers over their whole range, so that every product overflows.
template <class T>
std::vector<T> random_values(std::int64_t n, std::mt19937_64& rng) {
  std::vector<T> v(static_cast<std::size_t>(n));
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (auto& x : v) x = static_cast<T>(u(rng));
  } else {
    for (auto& x : v) x = static_cast<T>(rng());
  }
  return v;
}

template <class T>
ArrayView view_of(std::vector<T>& v, const Shape& s) {
  return ArrayView{v.data(), dtype_of<T>(), s, c_strides(s)};
}

bool integer_arrays(const std::string& dev) { return portmat::core::open_device(dev)->computes(DType::u32); }

// Checks got = a @ b (all C-contiguous host copies, np.matmul's shapes) matrix by matrix, with
// the batch indexing written out here rather than taken from the library: floats within
// K * eps * (|a| @ |b|) of the float64 reference, integers equal to the wrapping product.
template <class T>
void expect_product(const std::vector<T>& a, const Shape& as, const std::vector<T>& b, const Shape& bs,
                    const std::vector<T>& got, const Shape& os, const std::string& what) {
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  const std::int64_t K = as.back(), M = a_vec ? 1 : as[as.size() - 2], N = b_vec ? 1 : bs.back();
  const std::size_t nbatch = os.size() - (a_vec ? 0 : 1) - (b_vec ? 0 : 1);
  const std::size_t na = as.size() >= 2 ? as.size() - 2 : 0, nb = bs.size() >= 2 ? bs.size() - 2 : 0;
  const Shape ast = c_strides(as), bst = c_strides(bs);
  const DType dt = dtype_of<T>();
  Shape index(nbatch, 0);
  const std::int64_t batches = elements(Shape(os.begin(), os.begin() + nbatch));
  for (std::int64_t n = 0; n < batches; ++n) {
    std::int64_t oa = 0, ob = 0;  // right-aligned batch axes; size-1 axes broadcast
    for (std::size_t i = 0; i < nbatch; ++i) {
      if (i + na >= nbatch && as[i + na - nbatch] != 1) oa += index[i] * ast[i + na - nbatch];
      if (i + nb >= nbatch && bs[i + nb - nbatch] != 1) ob += index[i] * bst[i + nb - nbatch];
    }
    const MatrixView ma{const_cast<T*>(a.data()) + oa, M, K, K, 1, dt};
    const MatrixView mb{const_cast<T*>(b.data()) + ob, K, N, N, 1, dt};
    const MatrixView mc{const_cast<T*>(got.data()) + n * M * N, M, N, N, 1, dt};
    if constexpr (std::is_floating_point_v<T>) {
      EXPECT_LE(portmat::reference::worst_error_ratio(ma, mb, mc), 1.0) << what << ", product " << n;
    } else {
      const auto want = portmat::testing::wrapping_product<T>(ma, mb);
      for (std::int64_t e = 0; e < M * N; ++e)
        ASSERT_EQ(got[n * M * N + e], want[e]) << what << ", product " << n << ", entry " << e;
    }
    for (std::size_t d = nbatch; d-- > 0;) {
      if (++index[d] < os[d]) break;
      index[d] = 0;
    }
  }
}

// a @ b for random a and b on `dev`, through matmul(a, b): the result's shape, dtype and device,
// and its values (every entry written: the host copy starts as poison).
template <class T>
void check_product(const std::string& dev, const Shape& as, const Shape& bs, const Shape& os, std::mt19937_64& rng) {
  const std::string what = std::string(portmat::dtype_name(dtype_of<T>())) + " " + text(as) + " @ " + text(bs);
  auto a = random_values<T>(elements(as), rng), b = random_values<T>(elements(bs), rng);
  const DeviceArray da = DeviceArray::from_host(view_of(a, as), dev), db = DeviceArray::from_host(view_of(b, bs), dev);
  const DeviceArray dc = portmat::matmul(da, db);
  ASSERT_TRUE(dc.valid()) << what;
  ASSERT_EQ(dc.shape(), os) << what;
  EXPECT_EQ(dc.dtype(), dtype_of<T>()) << what;
  EXPECT_EQ(dc.device().id(), dev) << what;
  EXPECT_EQ(dc.size(), elements(os)) << what;
  std::vector<T> c(static_cast<std::size_t>(elements(os)), static_cast<T>(77));
  dc.to_host(view_of(c, os));
  expect_product(a, as, b, bs, c, os, what + " on " + dev);
}

struct Case {
  Shape a, b, out;
};

// np.matmul's shapes: stacks (broadcast on either side), 1-D operands on either side, and the
// awkward sizes 1, 17, 33, 65 (not multiples of any tile).
const std::vector<Case>& shape_cases() {
  static const std::vector<Case> cases = {
      {{3, 5, 7}, {7, 4}, {3, 5, 4}},
      {{2, 1, 5, 7}, {3, 7, 4}, {2, 3, 5, 4}},
      {{5, 7}, {2, 7, 4}, {2, 5, 4}},
      {{4, 1, 3, 6}, {5, 6, 2}, {4, 5, 3, 2}},
      {{2, 3, 17, 33}, {2, 3, 33, 1}, {2, 3, 17, 1}},
      {{7}, {3, 7, 4}, {3, 4}},
      {{3, 5, 7}, {7}, {3, 5}},
      {{17}, {17, 33}, {33}},
      {{65, 33}, {33}, {65}},
      {{33}, {33}, {}},
      {{1, 1}, {1, 1}, {1, 1}},
      {{1, 65}, {65, 1}, {1, 1}},
      {{65, 1}, {1, 65}, {65, 65}},
      {{17, 33}, {33, 65}, {17, 65}},
      {{65, 17}, {17, 33}, {65, 33}},
      {{3, 1, 17}, {17, 1}, {3, 1, 1}},
  };
  return cases;
}

}  // namespace

class OnEveryDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(OnEveryDevice, Float32ShapesMatchTheReference) {
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& c : shape_cases()) check_product<float>(GetParam(), c.a, c.b, c.out, rng);
}

TEST_P(OnEveryDevice, Float64ShapesMatchTheReference) {
  const std::string dev = GetParam();
  if (!portmat::find_device(dev).supports_f64) {
    // Refused up front, naming the dtype, rather than computed in float32.
    double x = 1;
    try {
      DeviceArray::from_host({&x, DType::f64, {1}, {1}}, dev);
      ADD_FAILURE() << "float64 array accepted on " << dev << ", which lacks float64";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << dev << " has no float64";
  }
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& c : shape_cases()) check_product<double>(dev, c.a, c.b, c.out, rng);
}

TEST_P(OnEveryDevice, IntegersWrapAroundExactly) {
  const std::string dev = GetParam();
  if (!integer_arrays(dev)) GTEST_SKIP() << dev << " computes no integer products";
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<Case> cases = {{{3, 5, 7}, {7, 4}, {3, 5, 4}},
                                   {{2, 1, 5, 7}, {3, 7, 4}, {2, 3, 5, 4}},
                                   {{7}, {3, 7, 4}, {3, 4}},
                                   {{3, 5, 7}, {7}, {3, 5}},
                                   {{17, 33}, {33, 65}, {17, 65}},
                                   {{1, 1}, {1, 1}, {1, 1}}};
  for (const auto& c : cases) {
    check_product<std::int32_t>(dev, c.a, c.b, c.out, rng);
    check_product<std::uint32_t>(dev, c.a, c.b, c.out, rng);
    check_product<std::int64_t>(dev, c.a, c.b, c.out, rng);
    check_product<std::uint64_t>(dev, c.a, c.b, c.out, rng);
  }
  // A known overflow: 65536 * 65536 + 1 * 1 is 1 in int32 (and not clamped or computed in float).
  std::vector<std::int32_t> a{65536, 1}, b{65536, 1}, c{-1};
  const DeviceArray da = DeviceArray::from_host(view_of(a, {1, 2}), dev);
  const DeviceArray db = DeviceArray::from_host(view_of(b, {2, 1}), dev);
  portmat::matmul(da, db).to_host(view_of(c, {1, 1}));
  EXPECT_EQ(c[0], 1);
}

TEST_P(OnEveryDevice, KZeroGivesZeros) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // out= holds nonzero values first: the empty sum must overwrite every entry.
  for (const auto& [as, bs, os] : std::vector<Case>{{{4, 0}, {0, 3}, {4, 3}},
                                                   {{2, 3, 0}, {0, 5}, {2, 3, 5}},
                                                   {{2, 1, 4, 0}, {3, 0, 2}, {2, 3, 4, 2}},
                                                   {{0}, {0, 6}, {6}}}) {
    std::vector<float> none;
    auto junk = random_values<float>(elements(os), rng);
    const DeviceArray a = DeviceArray::from_host(view_of(none, as), dev);
    const DeviceArray b = DeviceArray::from_host(view_of(none, bs), dev);
    const DeviceArray out = DeviceArray::from_host(view_of(junk, os), dev);
    portmat::matmul(a, b, out);
    std::vector<float> got(junk.size(), 7.0f);
    out.to_host(view_of(got, os));
    for (float x : got) ASSERT_EQ(x, 0.0f) << text(as) << " @ " << text(bs) << " into out=";
    const DeviceArray fresh = portmat::matmul(a, b);
    ASSERT_EQ(fresh.shape(), os);
    std::fill(got.begin(), got.end(), 7.0f);
    fresh.to_host(view_of(got, os));
    for (float x : got) ASSERT_EQ(x, 0.0f) << text(as) << " @ " << text(bs);
  }
  if (integer_arrays(dev)) {
    std::vector<std::int64_t> none, got(6, 9);
    const DeviceArray c = portmat::matmul(DeviceArray::from_host(view_of(none, {2, 0}), dev),
                                          DeviceArray::from_host(view_of(none, {0, 3}), dev));
    c.to_host(view_of(got, {2, 3}));
    for (auto x : got) EXPECT_EQ(x, 0);
  }
}

TEST_P(OnEveryDevice, EmptyResultsHaveTheirShape) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& [as, bs, os] : std::vector<Case>{{{0, 5}, {5, 3}, {0, 3}},
                                                   {{4, 5}, {5, 0}, {4, 0}},
                                                   {{2, 0, 5, 7}, {7, 4}, {2, 0, 5, 4}},
                                                   {{1, 5, 7}, {0, 7, 4}, {0, 5, 4}},
                                                   {{5}, {5, 0}, {0}},
                                                   {{0, 0}, {0, 0}, {0, 0}}}) {
    auto a = random_values<float>(elements(as), rng), b = random_values<float>(elements(bs), rng);
    const DeviceArray da = DeviceArray::from_host(view_of(a, as), dev), db = DeviceArray::from_host(view_of(b, bs), dev);
    const DeviceArray c = portmat::matmul(da, db);
    EXPECT_EQ(c.shape(), os) << text(as) << " @ " << text(bs);
    EXPECT_EQ(c.size(), 0);
    std::vector<float> none;
    c.to_host(view_of(none, os));
    portmat::matmul(da, db, c);  // out= of the empty shape: nothing to do, no error
  }
}

TEST_P(OnEveryDevice, StridedHostViewsInAndOut) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::int64_t M = 17, K = 33, N = 9;
  // a: the transpose of a row-major (K, M) matrix; b: every other row of a (2K, N) matrix, rows
  // reversed (a negative stride).
  auto at = random_values<float>(K * M, rng), bb = random_values<float>(2 * K * N, rng);
  const ArrayView a{at.data(), DType::f32, {M, K}, {1, M}};
  const ArrayView b{bb.data() + (2 * K - 2) * N, DType::f32, {K, N}, {-2 * N, 1}};
  const DeviceArray da = DeviceArray::from_host(a, dev), db = DeviceArray::from_host(b, dev);

  // The copies in are exact and C-ordered.
  std::vector<float> a_dense(M * K), b_dense(K * N);
  da.to_host(view_of(a_dense, {M, K}));
  db.to_host(view_of(b_dense, {K, N}));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k) ASSERT_EQ(a_dense[i * K + k], at[k * M + i]) << i << "," << k;
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t j = 0; j < N; ++j) ASSERT_EQ(b_dense[k * N + j], bb[(2 * K - 2 - 2 * k) * N + j]) << k << "," << j;

  // The product copied out into every other column of a wider buffer, and into a transposed one;
  // the entries between stay as they were.
  const DeviceArray dc = portmat::matmul(da, db);
  const float poison = -12345.0f;
  std::vector<float> wide(M * (2 * N + 1), poison), tr(N * M, poison);
  const ArrayView c_wide{wide.data(), DType::f32, {M, N}, {2 * N + 1, 2}};
  const ArrayView c_tr{tr.data(), DType::f32, {M, N}, {1, M}};
  dc.to_host(c_wide);
  dc.to_host(c_tr);
  const MatrixView ma{a.data, M, K, 1, M, DType::f32}, mb{b.data, K, N, -2 * N, 1, DType::f32};
  EXPECT_LE(portmat::reference::worst_error_ratio(ma, mb, {wide.data(), M, N, 2 * N + 1, 2, DType::f32}), 1.0);
  EXPECT_LE(portmat::reference::worst_error_ratio(ma, mb, {tr.data(), M, N, 1, M, DType::f32}), 1.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 1; j <= 2 * N; j += 2)  // the odd columns, and the last (2N) past them
      ASSERT_TRUE(wide[i * (2 * N + 1) + j] == poison && wide[i * (2 * N + 1) + 2 * N] == poison)
          << "row " << i << ": wrote between columns";

  // A stack read through a transposing view: (2, K, M) storage as (2, M, K).
  auto st = random_values<float>(2 * K * M, rng);
  const ArrayView s{st.data(), DType::f32, {2, M, K}, {K * M, 1, M}};
  const DeviceArray ds = DeviceArray::from_host(s, dev);
  std::vector<float> got(2 * M * N, poison);
  portmat::matmul(ds, db).to_host(view_of(got, {2, M, N}));
  for (std::int64_t i = 0; i < 2; ++i)
    EXPECT_LE(portmat::reference::worst_error_ratio({st.data() + i * K * M, M, K, 1, M, DType::f32}, mb,
                                                    {got.data() + i * M * N, M, N, N, 1, DType::f32}),
              1.0)
        << "stack entry " << i;
}

TEST_P(OnEveryDevice, FromHostTakesACopy) {
  // The array owns its values (even where the device shares host memory): later writes to the
  // host array do not reach it. A broadcast view (stride 0) is copied out to every row.
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  auto x = random_values<float>(5 * 6, rng);
  const auto original = x;
  const DeviceArray d = DeviceArray::from_host(view_of(x, {5, 6}), dev);
  std::fill(x.begin(), x.end(), 0.0f);
  std::vector<float> got(30);
  d.to_host(view_of(got, {5, 6}));
  EXPECT_EQ(got, original);
  const DeviceArray rows = DeviceArray::from_host({const_cast<float*>(original.data()), DType::f32, {4, 6}, {0, 1}}, dev);
  std::vector<float> r(24);
  rows.to_host(view_of(r, {4, 6}));
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 6; ++j) ASSERT_EQ(r[i * 6 + j], original[j]) << i << "," << j;
}

TEST_P(OnEveryDevice, ChainStaysOnTheDevice) {
  // c = a @ (a @ b) without a host copy in between: t = a @ b against the reference, then c
  // against the reference product of a and the device's own t.
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::int64_t K = 33, N = 17;
  auto a = random_values<float>(K * K, rng), b = random_values<float>(2 * K * N, rng);
  const DeviceArray da = DeviceArray::from_host(view_of(a, {K, K}), dev);
  const DeviceArray db = DeviceArray::from_host(view_of(b, {2, K, N}), dev);
  const DeviceArray dt = portmat::matmul(da, db);
  const DeviceArray dc = portmat::matmul(da, dt);
  EXPECT_EQ(dc.device().id(), dev);
  ASSERT_EQ(dc.shape(), (Shape{2, K, N}));
  std::vector<float> t(2 * K * N), c(2 * K * N);
  dt.to_host(view_of(t, {2, K, N}));
  dc.to_host(view_of(c, {2, K, N}));
  expect_product(a, {K, K}, b, {2, K, N}, t, {2, K, N}, "t = a @ b on " + dev);
  expect_product(a, {K, K}, t, {2, K, N}, c, {2, K, N}, "c = a @ t on " + dev);
}

TEST_P(OnEveryDevice, OutIsWrittenAndReused) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const Shape as{3, 5, 7}, bs{7, 4}, os{3, 5, 4};
  const DeviceArray out = DeviceArray::empty(dev, DType::f32, os);
  const DeviceArray alias = out;  // copies share the memory
  EXPECT_EQ(alias.state(), out.state());
  for (int round = 0; round < 3; ++round) {
    auto a = random_values<float>(elements(as), rng), b = random_values<float>(elements(bs), rng);
    portmat::matmul(DeviceArray::from_host(view_of(a, as), dev), DeviceArray::from_host(view_of(b, bs), dev), out);
    std::vector<float> c(elements(os), -12345.0f);
    alias.to_host(view_of(c, os));
    expect_product(a, as, b, bs, c, os, "out= round " + std::to_string(round) + " on " + dev);
  }
  // The same out for another product of its shape: (2, 1, 5, 7) does not fit, (5, 7) @ (3, 7, 4) does.
  auto a = random_values<float>(5 * 7, rng), b = random_values<float>(3 * 7 * 4, rng);
  portmat::matmul(DeviceArray::from_host(view_of(a, {5, 7}), dev), DeviceArray::from_host(view_of(b, {3, 7, 4}), dev),
                  out);
  std::vector<float> c(elements(os));
  out.to_host(view_of(c, os));
  expect_product(a, {5, 7}, b, {3, 7, 4}, c, os, "out= broadcast a on " + dev);
}

TEST_P(OnEveryDevice, Accessors) {
  const std::string dev = GetParam();
  std::vector<std::int32_t> x(6);
  const DeviceArray a = DeviceArray::from_host(view_of(x, {2, 3}), dev);
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.size(), 6);
  EXPECT_EQ(a.dtype(), DType::i32);
  EXPECT_EQ(a.device().id(), dev);
  // An address where the memory has one a foreign library can use: none for an OpenCL buffer.
  if (a.device().backend == "opencl")
    EXPECT_EQ(a.address(), 0u);
  else
    EXPECT_NE(a.address(), 0u);
  const DeviceArray none;
  EXPECT_FALSE(none.valid());
  EXPECT_EQ(none.size(), 0);
  EXPECT_EQ(none.address(), 0u);
  EXPECT_THROW(none.shape(), std::invalid_argument);
  EXPECT_THROW(portmat::matmul(none, a), std::invalid_argument);
  EXPECT_THROW(portmat::matmul(a, none), std::invalid_argument);
  EXPECT_THROW(none.to_host(view_of(x, {2, 3})), std::invalid_argument);
}

TEST_P(OnEveryDevice, ErrorsAreInvalidArguments) {
  const std::string dev = GetParam();
  std::vector<float> x(64, 1.0f);
  auto on_dev = [&](const Shape& s) { return DeviceArray::from_host(view_of(x, s), dev); };
  auto message_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    ADD_FAILURE() << "no std::invalid_argument";
    return "";
  };
  const DeviceArray a34 = on_dev({3, 4}), b52 = on_dev({5, 2}), b42 = on_dev({4, 2});

  // Inner dimensions that differ, stacks that do not broadcast: both shapes named.
  std::string m = message_of([&] { portmat::matmul(a34, b52); });
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(5, 2)"), std::string::npos) << m;
  m = message_of([&] { portmat::matmul(on_dev({2, 3, 4}), on_dev({3, 4, 5})); });
  EXPECT_NE(m.find("(2, 3, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(3, 4, 5)"), std::string::npos) << m;
  // out of the wrong shape or dtype.
  m = message_of([&] { portmat::matmul(a34, b42, on_dev({3, 3})); });
  EXPECT_NE(m.find("(3, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("(3, 2)"), std::string::npos) << m;
  if (integer_arrays(dev)) {
    std::vector<std::int32_t> xi(8, 1);
    const DeviceArray i42 = DeviceArray::from_host(view_of(xi, {4, 2}), dev);
    const DeviceArray i32 = DeviceArray::from_host(view_of(xi, {3, 2}), dev);
    m = message_of([&] { portmat::matmul(a34, i42); });
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
    EXPECT_NE(m.find("int32"), std::string::npos) << m;
    // An out of another dtype is no error: the product is cast into it (4.0 -> 4).
    portmat::matmul(a34, b42, i32);
    std::vector<std::int32_t> got(6, -1);
    i32.to_host(view_of(got, {3, 2}));
    EXPECT_EQ(got, std::vector<std::int32_t>(6, 4));
  }
  // out the same memory as an operand (also through a copy of the handle).
  const DeviceArray sq = on_dev({4, 4}), other = on_dev({4, 4}), sq_copy = sq;
  m = message_of([&] { portmat::matmul(sq, other, sq); });
  EXPECT_NE(m.find("same array as a"), std::string::npos) << m;
  message_of([&] { portmat::matmul(other, sq, sq_copy); });
  // dtypes a device does not hold (float64 and complex128 without float64), named in the message.
  if (!portmat::find_device(dev).supports_f64)
    for (DType t : {DType::f64, DType::c128}) {
      std::vector<unsigned char> raw(64);
      m = message_of([&] { DeviceArray::from_host({raw.data(), t, {2, 2}, {2, 1}}, dev); });
      EXPECT_NE(m.find(portmat::dtype_name(t)), std::string::npos) << m;
      m = message_of([&] { DeviceArray::empty(dev, t, {2, 2}); });
      EXPECT_NE(m.find(portmat::dtype_name(t)), std::string::npos) << m;
    }
  // to_host into a host array of another shape or dtype.
  std::vector<float> y(12);
  message_of([&] { a34.to_host(view_of(y, {4, 3})); });
  std::vector<double> yd(12);
  message_of([&] { a34.to_host(view_of(yd, {3, 4})); });
}

TEST_P(OnEveryDevice, MatmulOnStreamIsForCudaOnly) {
  const std::string dev = GetParam();
  std::vector<float> a(6, 1.0f), b(6, 1.0f), c(4);
  const ArrayView va{a.data(), DType::f32, {2, 3}, {3, 1}}, vb{b.data(), DType::f32, {3, 2}, {2, 1}};
  const ArrayView vc{c.data(), DType::f32, {2, 2}, {2, 1}};
  // float16 is refused whatever the device, naming it (the caller widens it first).
  try {
    portmat::matmul_on_stream({a.data(), DType::f16, {2, 3}, {3, 1}}, {b.data(), DType::f16, {3, 2}, {2, 1}},
                              {c.data(), DType::f16, {2, 2}, {2, 1}}, dev, 0);
    ADD_FAILURE() << "float16 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
  if (portmat::find_device(dev).backend == "cuda")
    GTEST_SKIP() << "products on a CUDA stream need memory another library owns: tests/python (CuPy, torch)";
  // Elsewhere the device refuses, as a DeviceError naming it, and writes nothing.
  try {
    portmat::matmul_on_stream(va, vb, vc, dev, 0);
    ADD_FAILURE() << "matmul_on_stream accepted on " << dev;
  } catch (const portmat::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(dev), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(DeviceArray, OnEveryDevice, ::testing::ValuesIn(portmat::testing::device_ids()),
                         portmat::testing::DeviceName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnEveryDevice);

TEST(DeviceArray, ArraysOnDifferentDevicesAreRefused) {
  const auto ids = portmat::testing::device_ids();
  if (ids.size() < 2) GTEST_SKIP() << "one device only";
  std::vector<float> x(4, 1.0f);
  const ArrayView v{x.data(), DType::f32, {2, 2}, {2, 1}};
  const DeviceArray a = DeviceArray::from_host(v, ids[0]), b = DeviceArray::from_host(v, ids[1]);
  for (const auto& [p, q, out] : {std::tuple{a, b, DeviceArray::empty(ids[0], DType::f32, {2, 2})},
                                  std::tuple{a, a, DeviceArray::empty(ids[1], DType::f32, {2, 2})}}) {
    try {
      portmat::matmul(p, q, out);
      ADD_FAILURE() << "arrays on " << ids[0] << " and " << ids[1] << " multiplied";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(ids[0]), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(ids[1]), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(portmat::matmul(a, b), std::invalid_argument);
}
