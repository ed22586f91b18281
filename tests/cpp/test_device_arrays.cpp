// portmat::DeviceArray on every device: products that stay on the device (stacks with broadcast
// batch axes, 1-D operands, awkward and empty shapes, K = 0) against the float64 reference, the
// integers exactly (wrapping as NumPy's do), strided host views copied in and out, a chain and a
// reused out= on the device, and the errors a caller gets. Device arrays take their own route
// (device_arrays.cpp: byte-offset views, merged batches, K = 0 by upload) that the host-view tests
// never reach, so it is checked here on its own, on fresh random inputs each run. Every dtype
// np.matmul multiplies (float16, bfloat16, complex, bool, 8/16-bit integers, mixed): astype from
// every dtype to every dtype against a reference written from core/casts.hpp's rules, products of
// each and of mixed pairs into out, cast_on_stream (CUDA; refused elsewhere) and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
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

// The message of the std::invalid_argument that call() throws (a test failure if it throws none).
std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no std::invalid_argument";
  return "";
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

// ---- every dtype np.matmul multiplies: astype, mixed-dtype products, cast_on_stream --------------
// The reference here is written from core/casts.hpp's rules, not from its code: values held
// exactly in long double, rounding to float16 / bfloat16 / float32 / float64 by one generic
// round-to-nearest-even (nearbyintl on the value scaled to its quantum), integers as their low
// bits, so that a kernel that truncates, adds 1 or rounds ties the other way fails.
namespace {

static_assert(std::numeric_limits<long double>::digits >= 64, "the cast reference holds int64 exactly");

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {DType::boolean, DType::i8,  DType::i16, DType::i32, DType::i64,
                                       DType::u8,      DType::u16, DType::u32, DType::u64, DType::f16,
                                       DType::bf16,    DType::f32, DType::f64, DType::c64, DType::c128};
  return v;
}

bool integral(DType t) {  // bool and the integers
  return t == DType::boolean || t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64 ||
         t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64;
}
bool signed_int(DType t) { return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64; }
bool complex_t(DType t) { return t == DType::c64 || t == DType::c128; }
bool wide(DType t) { return t == DType::f64 || t == DType::c128; }
bool holds(const std::string& dev, DType t) { return !wide(t) || portmat::find_device(dev).supports_f64; }
std::uint64_t low_mask(DType t) {
  const std::size_t bits = 8 * portmat::dtype_size(t);
  return bits >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << bits) - 1;
}

// A binary floating-point format: precision (bits, the implicit one included), smallest normal
// exponent, largest finite value.
struct Format {
  int p, emin;
  long double max;
};
const Format kF16{11, -14, 65504.0L}, kBF16{8, -126, std::ldexp(255.0L, 120)},
    kF32{24, -126, static_cast<long double>(std::numeric_limits<float>::max())},
    kF64{53, -1022, static_cast<long double>(std::numeric_limits<double>::max())};
Format format_of(DType t) {
  switch (t) {
    case DType::f16: return kF16;
    case DType::bf16: return kBF16;
    case DType::f32:
    case DType::c64: return kF32;
    default: return kF64;
  }
}

// x rounded to nearest even in format f (subnormals by the fixed quantum below 2^emin; past the
// largest finite value, infinity): IEEE's rounding, written without bit tricks.
long double round_to(long double x, const Format& f) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const int e = std::max(std::ilogb(x), f.emin);
  const long double q = std::ldexp(1.0L, e - f.p + 1);
  const long double r = std::nearbyint(x / q) * q;
  return std::fabs(r) > f.max ? std::copysign(HUGE_VALL, x) : r;
}

// float16 / bfloat16 bits as their value (sign, exponent, mantissa: the definition).
long double decode16(std::uint16_t h, DType t) {
  const bool f16 = t == DType::f16;
  const int mbits = f16 ? 10 : 7, ebits = f16 ? 5 : 8, bias = f16 ? 15 : 127;
  const std::uint32_t m = h & ((1u << mbits) - 1), e = (h >> mbits) & ((1u << ebits) - 1);
  const long double sign = (h >> 15) ? -1.0L : 1.0L;
  if (e == (1u << ebits) - 1) return m ? std::numeric_limits<long double>::quiet_NaN() : sign * HUGE_VALL;
  if (e == 0) return sign * std::ldexp(static_cast<long double>(m), 1 - bias - mbits);
  return sign * std::ldexp(static_cast<long double>(m + (1u << mbits)), static_cast<int>(e) - bias - mbits);
}

// One element as casts.hpp sees it: an integer (bool 0 / 1) as its bits extended by its own
// signedness, or floating point (complex: re and im), exactly.
struct Value {
  DType dtype = DType::f32;
  bool integer = false;
  std::uint64_t bits = 0;
  long double re = 0, im = 0;
  long double real() const {
    if (!integer) return re;
    return signed_int(dtype) ? static_cast<long double>(static_cast<std::int64_t>(bits))
                             : static_cast<long double>(bits);
  }
};

// Host arrays of any dtype as raw bytes.
struct HostArray {
  DType dtype;
  std::vector<unsigned char> raw;
  HostArray(DType t, std::int64_t n, unsigned char fill = 0)
      : dtype(t), raw(static_cast<std::size_t>(n) * portmat::dtype_size(t), fill) {}
  std::int64_t size() const { return static_cast<std::int64_t>(raw.size() / portmat::dtype_size(dtype)); }
  unsigned char* at(std::int64_t i) { return raw.data() + i * portmat::dtype_size(dtype); }
  const unsigned char* at(std::int64_t i) const { return raw.data() + i * portmat::dtype_size(dtype); }
  ArrayView view(const Shape& s) { return ArrayView{raw.data(), dtype, s, c_strides(s)}; }
  // The low bytes of `bits` (integers, bool, float16 / bfloat16 bit patterns).
  void put_bits(std::int64_t i, std::uint64_t bits) { std::memcpy(at(i), &bits, portmat::dtype_size(dtype)); }
  // A value as the host compiler stores it (float32 / float64 / complex; its own rounding is fine:
  // the reference reads the stored value back).
  void put_real(std::int64_t i, long double re, long double im = 0) {
    if (dtype == DType::f32 || dtype == DType::c64) {
      const float p[2] = {static_cast<float>(re), static_cast<float>(im)};
      std::memcpy(at(i), p, portmat::dtype_size(dtype));
    } else {
      const double p[2] = {static_cast<double>(re), static_cast<double>(im)};
      std::memcpy(at(i), p, portmat::dtype_size(dtype));
    }
  }
  Value get(std::int64_t i) const {
    Value v;
    v.dtype = dtype;
    const unsigned char* p = at(i);
    if (integral(dtype)) {
      std::uint64_t b = 0;
      std::memcpy(&b, p, portmat::dtype_size(dtype));  // little-endian: the low bytes
      const std::size_t bits = 8 * portmat::dtype_size(dtype);
      if (signed_int(dtype) && bits < 64 && (b >> (bits - 1)) & 1) b |= ~low_mask(dtype);  // sign-extend
      v.integer = true, v.bits = b;
    } else if (dtype == DType::f16 || dtype == DType::bf16) {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      v.re = decode16(h, dtype);
    } else if (dtype == DType::f32 || dtype == DType::c64) {
      float x[2] = {0, 0};
      std::memcpy(x, p, portmat::dtype_size(dtype));
      v.re = x[0], v.im = x[1];
    } else {
      double x[2] = {0, 0};
      std::memcpy(x, p, portmat::dtype_size(dtype));
      v.re = x[0], v.im = x[1];
    }
    return v;
  }
};

// What an element of dtype `to` must hold after a cast of v (core/casts.hpp's rules): bits for
// bool and the integers, the value (re, im) for floating point.
struct Want {
  bool integer = false;
  std::uint64_t bits = 0;
  long double re = 0, im = 0;
};

Want cast_ref(const Value& v, DType to) {
  Want w;
  if (to == DType::boolean) {  // != 0; a complex number: either part
    w.integer = true, w.bits = v.integer ? v.bits != 0 : (v.re != 0 || v.im != 0);
    return w;
  }
  if (integral(to)) {  // integers: the low bits; floating point: truncated, NaN / out of int64: INT64_MIN
    std::uint64_t b = v.bits;
    if (!v.integer)
      b = std::isnan(v.re) || !(v.re > -0x1p63L && v.re < 0x1p63L)
              ? std::uint64_t(1) << 63
              : static_cast<std::uint64_t>(static_cast<std::int64_t>(std::trunc(v.re)));
    w.integer = true, w.bits = b & low_mask(to);
    return w;
  }
  // Floating point, rounded once to nearest even; float64 and integers to float16 / bfloat16 go
  // through float32 (rounded twice: the documented exception). Complex to real: the real part.
  const Format f = format_of(to);
  const bool via_f32 = (wide(v.dtype) || v.integer) && (to == DType::f16 || to == DType::bf16);
  auto part = [&](long double x) { return round_to(via_f32 ? round_to(x, kF32) : x, f); };
  w.re = part(v.real());
  if (complex_t(to)) w.im = v.integer ? 0.0L : part(v.im);
  return w;
}

// An element of dtype t as stored: bool's byte as it is (must be 0 or 1), integers' bits, values.
Want stored(const HostArray& h, std::int64_t i) {
  Want w;
  if (h.dtype == DType::boolean) {
    w.integer = true, w.bits = *h.at(i);
  } else if (integral(h.dtype)) {
    w.integer = true, w.bits = h.get(i).bits & low_mask(h.dtype);
  } else {
    const Value v = h.get(i);
    w.re = v.re, w.im = v.im;
  }
  return w;
}

bool same_value(long double a, long double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}
bool same(const Want& got, const Want& want) {
  return got.integer ? got.bits == want.bits : same_value(got.re, want.re) && same_value(got.im, want.im);
}
std::string show(const Want& w) {
  std::ostringstream s;
  s.precision(21);
  if (w.integer)
    s << "bits 0x" << std::hex << w.bits;
  else
    s << w.re << (w.im != 0 || std::signbit(w.im) ? " + " + std::to_string(static_cast<double>(w.im)) + "i" : "");
  return s.str();
}
std::string show(const Value& v) {
  std::ostringstream s;
  s.precision(21);
  s << portmat::dtype_name(v.dtype) << " ";
  if (v.integer)
    s << v.real();
  else
    s << v.re << (complex_t(v.dtype) ? " + " + std::to_string(static_cast<double>(v.im)) + "i" : "");
  return s.str();
}

// Sources for the cast tests: every float16 and bfloat16 bit pattern; for the other dtypes the
// edges (wrap-around at every width, values that round both ways and ties in float16, bfloat16 and
// float32, overflow to infinity, NaN, out of int64's range) and random values.
HostArray cast_sources(DType t, std::mt19937_64& rng) {
  if (t == DType::f16 || t == DType::bf16) {
    HostArray h(t, 65536);
    for (std::int64_t i = 0; i < 65536; ++i) h.put_bits(i, static_cast<std::uint64_t>(i));
    return h;
  }
  if (t == DType::boolean) {
    HostArray h(t, 64);
    for (std::int64_t i = 0; i < 64; ++i) h.put_bits(i, i < 2 ? i : rng() & 1);
    return h;
  }
  if (integral(t)) {
    std::vector<std::uint64_t> v;
    for (std::int64_t x : {0LL, 1LL, 2LL, 3LL, 127LL, 128LL, 129LL, 255LL, 256LL, 257LL, 300LL, 2049LL, 2051LL,
                           2050LL, 4097LL, 32767LL, 32768LL, 65504LL, 65519LL, 65520LL, 65535LL, 65536LL,
                           (1LL << 24) + 1, (1LL << 24) + 3, (1LL << 31) - 1, 1LL << 31, (1LL << 32) - 1, 1LL << 32,
                           (1LL << 24) + (1LL << 16) + 1, (1LL << 40) + (1LL << 32) + 1, (1LL << 53) + 1,
                           (1LL << 62) + 1, 0x7fffffffffffffffLL}) {
      v.push_back(static_cast<std::uint64_t>(x));
      v.push_back(static_cast<std::uint64_t>(-x));
    }
    v.push_back(std::uint64_t(1) << 63);
    v.push_back(~std::uint64_t(0));
    for (int i = 0; i < 256; ++i) v.push_back(rng() >> (rng() % 64));  // small and large magnitudes
    for (int i = 0; i < 256; ++i) v.push_back(-(rng() >> (rng() % 64)));
    HostArray h(t, static_cast<std::int64_t>(v.size()));
    for (std::size_t i = 0; i < v.size(); ++i) h.put_bits(static_cast<std::int64_t>(i), v[i]);
    return h;
  }
  std::vector<long double> v = {
      0.0L, -0.0L, 1, -1, 0.5L, -0.5L, 0.75L, 1.5L, 2.5L, -2.5L, 0.999L, -0.999L, 127.5L, 128, -128.5L, -129.7L,
      255.9L, 256, 300.7L, -300.7L, 32767.5L, 32768.5L, -32769.2L, 65504, 65519, 65520, -65520, 65535.5L, 65536,
      1e5L, 3e9L, -3e9L, 5e9L, 1e19L, 2e19L, -1e19L, 1e20L, -1e20L, 0x1p62L, -0x1p62L, 0x1p63L, -0x1p63L,
      HUGE_VALL, -HUGE_VALL, std::numeric_limits<long double>::quiet_NaN(),
      // float16: ties to even and both sides of them, its smallest subnormal and half of it
      1 + 0x1p-11L, 1 + 3 * 0x1p-11L, 1 + 0x1p-11L + 0x1p-20L, 1 + 0x1p-11L - 0x1p-20L, -(1 + 3 * 0x1p-11L),
      2049, 2051, 0x1p-24L, 0x1p-25L, 3 * 0x1p-25L, 0x1p-25L + 0x1p-35L, 0x1p-26L, 0x1.ffcp-15L, 65519.996L,
      // bfloat16: the same
      1 + 0x1p-8L, 1 + 3 * 0x1p-8L, 1 + 0x1p-8L + 0x1p-20L, 1 + 0x1p-8L - 0x1p-20L, -(1 + 3 * 0x1p-8L),
      0x1.ff8p127L, 0x1.fe8p127L, 0x1p-120L, 257, 259};
  if (wide(t))  // float64: what float32 rounds first (the documented double rounding), its overflow
    for (long double x : {1 + 0x1p-24L, 1 + 0x1p-24L + 0x1p-50L, 1 + 3 * 0x1p-24L, 1 + 0x1p-11L + 0x1p-40L,
                          1 + 0x1p-8L + 0x1p-40L, 1e300L, -1e300L, 1e-300L, 0x1.fffffffp127L, 0x1p53L + 1})
      v.push_back(x);
  std::uniform_real_distribution<double> u(-300, 300), m(1, 2);
  for (int i = 0; i < 256; ++i) v.push_back(u(rng));
  for (int i = 0; i < 256; ++i)  // magnitudes 2^-30 .. 2^70 (no float32 subnormals, a device may flush those)
    v.push_back(std::ldexp(static_cast<long double>(m(rng)), static_cast<int>(rng() % 101) - 30) *
                (rng() & 1 ? -1 : 1));
  const std::size_t n = v.size();
  HostArray h(t, static_cast<std::int64_t>(complex_t(t) ? 2 * n + 4 : n));
  for (std::size_t i = 0; i < n; ++i) {
    if (!complex_t(t)) {
      h.put_real(static_cast<std::int64_t>(i), v[i]);
      continue;
    }
    // complex: each value as the real part (imaginary random) and as the imaginary part (real 0)
    h.put_real(static_cast<std::int64_t>(2 * i), v[i], u(rng));
    h.put_real(static_cast<std::int64_t>(2 * i + 1), 0, v[i]);
  }
  if (complex_t(t)) {
    h.put_real(2 * n, 0, 0);
    h.put_real(2 * n + 1, -0.0L, -0.0L);
    h.put_real(2 * n + 2, 0, 1e-3L);  // != 0 as bool through its imaginary part
    h.put_real(2 * n + 3, -2.5L, 0);
  }
  return h;
}

// Checks y (a host copy of the cast of src to y.dtype) element by element; at most a few reports.
void expect_cast(const HostArray& src, const HostArray& y, const std::string& what) {
  int reported = 0;
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < src.size(); ++i) {
    const Value v = src.get(i);
    const Want want = cast_ref(v, y.dtype), got = stored(y, i);
    if (same(got, want)) continue;
    ++wrong;
    if (reported++ < 4)
      ADD_FAILURE() << what << ": element " << i << " = " << show(v) << " became " << show(got) << ", want "
                    << show(want);
  }
  EXPECT_EQ(wrong, 0) << what << ": elements cast wrong";
}

// ---- products of every dtype ----
// Random operands: floats in [-1, 1) (float16 / bfloat16 as random bits of magnitude 1/16 .. 2),
// integers over their whole range (products and sums wrap), bool sparse so that some sums are
// false and some true.
HostArray random_operand(DType t, std::int64_t n, std::mt19937_64& rng) {
  HostArray h(t, n);
  std::uniform_real_distribution<double> u(-1, 1);
  for (std::int64_t i = 0; i < n; ++i) {
    if (t == DType::boolean)
      h.put_bits(i, rng() % 100 < 12);
    else if (integral(t))
      h.put_bits(i, rng());
    else if (t == DType::f16)
      h.put_bits(i, (rng() & 0x83ffu) | ((11 + rng() % 5) << 10));
    else if (t == DType::bf16)
      h.put_bits(i, (rng() & 0x807fu) | ((123 + rng() % 5) << 7));
    else
      h.put_real(i, u(rng), u(rng));
  }
  return h;
}

// c = a @ b (np.matmul's shapes) into an out of dtype r: the operands cast to r (cast_ref), then
// the product: integers as the wrapping sum of their low bits, bool as the OR of ANDs, exactly;
// float32 / float64 within K * eps * (|a| @ |b|) of the exact sum (complex: 2K, for its two real
// sums of K products each); float16 / bfloat16, accumulated in float32 and rounded once, must be
// the rounding of a value within K * 2^-23 * (|a| @ |b|) of the exact sum: round(exact - d) <=
// c <= round(exact + d), which a truncating or twice-rounding kernel misses.
void check_typed_product(const std::string& dev, DType ta, const Shape& as, DType tb, const Shape& bs, DType r,
                         std::mt19937_64& rng) {
  const std::string what = std::string(portmat::dtype_name(ta)) + " " + text(as) + " @ " +
                           portmat::dtype_name(tb) + " " + text(bs) + " into " + portmat::dtype_name(r) + " on " + dev;
  HostArray a = random_operand(ta, elements(as), rng), b = random_operand(tb, elements(bs), rng);
  const Shape os = portmat::matmul_shape(as, bs);
  HostArray c(r, elements(os), 0xA5);  // poison: neither 0 nor 1 as bool
  const DeviceArray da = DeviceArray::from_host(a.view(as), dev), db = DeviceArray::from_host(b.view(bs), dev);
  const DeviceArray dc = DeviceArray::from_host(c.view(os), dev);
  portmat::matmul(da, db, dc);
  dc.to_host(c.view(os));

  std::vector<Want> ar(a.raw.size() / portmat::dtype_size(ta)), br(b.raw.size() / portmat::dtype_size(tb));
  for (std::size_t i = 0; i < ar.size(); ++i) ar[i] = cast_ref(a.get(static_cast<std::int64_t>(i)), r);
  for (std::size_t i = 0; i < br.size(); ++i) br[i] = cast_ref(b.get(static_cast<std::int64_t>(i)), r);

  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  const std::int64_t K = as.back(), M = a_vec ? 1 : as[as.size() - 2], N = b_vec ? 1 : bs.back();
  const std::size_t nbatch = os.size() - (a_vec ? 0 : 1) - (b_vec ? 0 : 1);
  const std::size_t na = as.size() >= 2 ? as.size() - 2 : 0, nb = bs.size() >= 2 ? bs.size() - 2 : 0;
  const Shape ast = c_strides(as), bst = c_strides(bs);
  const std::int64_t batches = elements(Shape(os.begin(), os.begin() + nbatch));
  const Format f = format_of(r);
  const long double eps = std::ldexp(1.0L, 1 - f.p);
  Shape index(nbatch, 0);
  for (std::int64_t n = 0; n < batches; ++n) {
    std::int64_t oa = 0, ob = 0;  // right-aligned batch axes; size-1 axes broadcast
    for (std::size_t i = 0; i < nbatch; ++i) {
      if (i + na >= nbatch && as[i + na - nbatch] != 1) oa += index[i] * ast[i + na - nbatch];
      if (i + nb >= nbatch && bs[i + nb - nbatch] != 1) ob += index[i] * bst[i + nb - nbatch];
    }
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        const std::int64_t e = n * M * N + i * N + j;
        const Want got = stored(c, e);
        std::uint64_t sum = 0;
        bool any = false;
        long double re = 0, im = 0, mag = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const Want& x = ar[static_cast<std::size_t>(oa + i * K + k)];
          const Want& y = br[static_cast<std::size_t>(ob + k * N + j)];
          sum += x.bits * y.bits, any = any || (x.bits && y.bits);
          re += x.re * y.re - x.im * y.im, im += x.re * y.im + x.im * y.re;
          mag += std::hypot(x.re, x.im) * std::hypot(y.re, y.im);
        }
        bool ok;
        std::string want;
        if (r == DType::boolean) {
          ok = got.bits == static_cast<std::uint64_t>(any), want = any ? "True" : "False";
        } else if (integral(r)) {
          ok = got.bits == (sum & low_mask(r)), want = show(Want{true, sum & low_mask(r), 0, 0});
        } else if (r == DType::f16 || r == DType::bf16) {
          const long double d = K * 0x1p-23L * mag, lo = round_to(re - d, f), hi = round_to(re + d, f);
          ok = lo <= got.re && got.re <= hi;
          std::ostringstream s;
          s.precision(12);
          s << "in [" << lo << ", " << hi << "] (exact " << re << ")";
          want = s.str();
        } else {
          const long double bound = (complex_t(r) ? 2 : 1) * K * eps * mag;
          ok = std::fabs(got.re - re) <= bound && std::fabs(got.im - im) <= bound;
          std::ostringstream s;
          s.precision(17);
          s << re << " + " << im << "i within " << bound;
          want = s.str();
        }
        if (!ok) {
          ADD_FAILURE() << what << ": product " << n << ", entry " << i << "," << j << " is " << show(got)
                        << ", want " << want;
          return;
        }
      }
    for (std::size_t d = nbatch; d-- > 0;) {
      if (++index[d] < os[d]) break;
      index[d] = 0;
    }
  }
}

// Awkward sizes (1, 7, 33, 65: no tile's multiple), 1-D operands on either side, a stack with a
// broadcast batch axis on each side, and K = 0 (zeros, through the cast into out).
const std::vector<std::pair<Shape, Shape>>& typed_shapes() {
  static const std::vector<std::pair<Shape, Shape>> cases = {
      {{1, 1}, {1, 1}},       {{7, 33}, {33, 65}},   {{65, 1}, {1, 7}},           {{33}, {33, 7}},
      {{3, 7, 65}, {65}},     {{65}, {65}},          {{2, 1, 7, 33}, {3, 33, 7}}, {{2, 0}, {0, 3}},
  };
  return cases;
}

}  // namespace

// astype from every dtype to every dtype (those the device holds), element by element against
// cast_ref: every float16 / bfloat16 bit pattern, integer edges at every width, ties.
TEST_P(OnEveryDevice, AstypeFollowsTheCastRules) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (DType s : all_dtypes()) {
    if (!holds(dev, s)) continue;
    HostArray src = cast_sources(s, rng);
    const Shape shape{src.size()};
    const DeviceArray x = DeviceArray::from_host(src.view(shape), dev);
    for (DType t : all_dtypes()) {
      if (!holds(dev, t)) continue;
      const std::string what = std::string("astype ") + portmat::dtype_name(s) + " -> " + portmat::dtype_name(t) +
                               " on " + dev;
      const DeviceArray y = x.astype(t);
      ASSERT_EQ(y.dtype(), t) << what;
      ASSERT_EQ(y.shape(), shape) << what;
      EXPECT_EQ(y.device().id(), dev) << what;
      if (s == t) {
        EXPECT_EQ(y.state(), x.state()) << what << ": not the array itself";
      } else {
        EXPECT_NE(y.state(), x.state()) << what << ": not a new array";
      }
      HostArray got(t, src.size(), 0xA5);
      y.to_host(got.view(shape));
      expect_cast(src, got, what);
    }
  }
}

TEST_P(OnEveryDevice, AstypeKeepsShapesAndTheSource) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // A stack keeps its shape and C order; the source is unchanged; an empty array casts to an empty one.
  HostArray a = random_operand(DType::f32, 2 * 3 * 5, rng);
  const DeviceArray x = DeviceArray::from_host(a.view({2, 3, 5}), dev);
  const DeviceArray y = x.astype(DType::f16);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  HostArray h(DType::f16, 30), back(DType::f32, 30);
  y.to_host(h.view({2, 3, 5}));
  expect_cast(a, h, "astype float32 (2, 3, 5) -> float16 on " + dev);
  x.to_host(back.view({2, 3, 5}));
  EXPECT_EQ(back.raw, a.raw) << "astype changed its source";
  const DeviceArray e = DeviceArray::empty(dev, DType::i8, {2, 0, 3}).astype(DType::bf16);
  EXPECT_EQ(e.shape(), (Shape{2, 0, 3}));
  EXPECT_EQ(e.dtype(), DType::bf16);
  EXPECT_EQ(e.size(), 0);
  EXPECT_THROW(DeviceArray().astype(DType::f32), std::invalid_argument);
  if (!portmat::find_device(dev).supports_f64) {
    const std::string m = message_of([&] { x.astype(DType::c128); });
    EXPECT_NE(m.find("complex128"), std::string::npos) << m;
  }
}

// Products of each new dtype with itself, on every shape, against the reference.
TEST_P(OnEveryDevice, EveryDtypeMultiplies) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (DType t : {DType::f16, DType::bf16, DType::c64, DType::c128, DType::boolean, DType::i8, DType::i16, DType::u8,
                  DType::u16}) {
    if (!holds(dev, t)) continue;
    for (const auto& [as, bs] : typed_shapes()) check_typed_product(dev, t, as, t, bs, t, rng);
    // DeviceArray matmul(a, b) of one dtype: a new array of that dtype.
    HostArray a = random_operand(t, 7 * 33, rng), b = random_operand(t, 33 * 5, rng);
    const DeviceArray c = portmat::matmul(DeviceArray::from_host(a.view({7, 33}), dev),
                                          DeviceArray::from_host(b.view({33, 5}), dev));
    EXPECT_EQ(c.dtype(), t);
    EXPECT_EQ(c.shape(), (Shape{7, 5}));
  }
  // bool is the logical product, not a count: 256 (and 2^16) true pairs are True, not a wrapped 0.
  for (std::int64_t K : {256, 65536}) {
    HostArray ones(DType::boolean, K, 1);
    HostArray c(DType::boolean, 1, 0xA5);
    const DeviceArray dc = DeviceArray::from_host(c.view({1, 1}), dev);
    portmat::matmul(DeviceArray::from_host(ones.view({1, K}), dev), DeviceArray::from_host(ones.view({K, 1}), dev),
                    dc);
    dc.to_host(c.view({1, 1}));
    EXPECT_EQ(c.raw[0], 1) << "bool, K = " << K;
  }
}

// Mixed operand dtypes into an out of NumPy's result dtype (np.result_type; bfloat16 as ml_dtypes
// promotes it): each operand cast to out's dtype, then the product.
TEST_P(OnEveryDevice, MixedDtypesIntoTheResultDtype) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<std::array<DType, 3>> pairs = {
      {DType::i8, DType::u8, DType::i16},      {DType::boolean, DType::i16, DType::i16},
      {DType::u16, DType::i8, DType::i32},     {DType::i8, DType::f32, DType::f32},
      {DType::f16, DType::f32, DType::f32},    {DType::f16, DType::i8, DType::f16},
      {DType::boolean, DType::f16, DType::f16}, {DType::u8, DType::bf16, DType::bf16},
      {DType::bf16, DType::f16, DType::f32},   {DType::f32, DType::c64, DType::c64},
      {DType::i16, DType::c128, DType::c128},  {DType::u64, DType::i64, DType::f64},
      {DType::f16, DType::c64, DType::c64},    {DType::u8, DType::u16, DType::u16},
  };
  for (const auto& [ta, tb, r] : pairs) {
    if (!holds(dev, ta) || !holds(dev, tb) || !holds(dev, r)) continue;
    for (const auto& [as, bs] : typed_shapes()) {
      check_typed_product(dev, ta, as, tb, bs, r, rng);
      check_typed_product(dev, tb, bs.size() == 1 ? bs : Shape{bs.back(), as.back()}, ta,
                          as.size() == 1 ? as : Shape{as.back(), 7}, r, rng);  // the other way round
    }
  }
}

// An out of a dtype narrower than the operands' (as dtype= in NumPy): the header's rule is that
// a and b are cast to out's dtype first. bool: 1 * 1 + 1 * (-1) is True (True AND True), not the
// int32 sum 0; float32 0.5 * 0.5 into bool is True, not 0.5 truncated to int 0; float32 into
// float16: the operands rounded to float16 before the product.
TEST_P(OnEveryDevice, OperandsAreCastToOutsDtypeFirst) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<std::int8_t> a8{1, 1}, b8{1, -1};
  HostArray out(DType::boolean, 1, 0xA5);
  const DeviceArray c = DeviceArray::from_host(out.view({1, 1}), dev);
  portmat::matmul(DeviceArray::from_host({a8.data(), DType::i8, {1, 2}, {2, 1}}, dev),
                  DeviceArray::from_host({b8.data(), DType::i8, {2, 1}, {1, 1}}, dev), c);
  c.to_host(out.view({1, 1}));
  EXPECT_EQ(out.raw[0], 1) << "int8 [1, 1] @ [1, -1] into bool";
  std::vector<float> half{0.5f};
  portmat::matmul(DeviceArray::from_host({half.data(), DType::f32, {1, 1}, {1, 1}}, dev),
                  DeviceArray::from_host({half.data(), DType::f32, {1, 1}, {1, 1}}, dev), c);
  c.to_host(out.view({1, 1}));
  EXPECT_EQ(out.raw[0], 1) << "float32 0.5 @ 0.5 into bool";
  for (const auto& [ta, tb, r] : std::vector<std::array<DType, 3>>{{DType::f32, DType::f32, DType::f16},
                                                                  {DType::f32, DType::f32, DType::bf16},
                                                                  {DType::i8, DType::i8, DType::boolean},
                                                                  {DType::f32, DType::i16, DType::boolean},
                                                                  {DType::i32, DType::u16, DType::u8}})
    for (const auto& [as, bs] : typed_shapes()) check_typed_product(dev, ta, as, tb, bs, r, rng);
}

TEST_P(OnEveryDevice, TypedProductErrorsNameTheProblem) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  auto on_dev = [&](DType t, const Shape& s) {
    HostArray h = random_operand(t, elements(s), rng);
    return DeviceArray::from_host(h.view(s), dev);
  };
  // Mixed dtypes without out: the caller must pick the result's dtype.
  std::string m = message_of([&] { portmat::matmul(on_dev(DType::f16, {3, 4}), on_dev(DType::f32, {4, 2})); });
  EXPECT_NE(m.find("float16"), std::string::npos) << m;
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  EXPECT_NE(m.find("out"), std::string::npos) << m;
  m = message_of([&] { portmat::matmul(on_dev(DType::i8, {3, 4}), on_dev(DType::boolean, {4, 2})); });
  EXPECT_NE(m.find("int8"), std::string::npos) << m;
  EXPECT_NE(m.find("bool"), std::string::npos) << m;
  // out of the wrong shape, whatever its dtype: both shapes named, out untouched.
  for (DType r : {DType::f16, DType::bf16, DType::boolean, DType::c64, DType::i16}) {
    HostArray o(r, 6, 0x5A);
    const DeviceArray out = DeviceArray::from_host(o.view({2, 3}), dev);
    m = message_of([&] { portmat::matmul(on_dev(DType::i8, {3, 4}), on_dev(DType::f16, {4, 2}), out); });
    EXPECT_NE(m.find("(2, 3)"), std::string::npos) << portmat::dtype_name(r) << ": " << m;
    EXPECT_NE(m.find("(3, 2)"), std::string::npos) << portmat::dtype_name(r) << ": " << m;
    HostArray after(r, 6);
    out.to_host(after.view({2, 3}));
    EXPECT_EQ(after.raw, o.raw) << "a refused product wrote into out";
  }
  // Shapes that do not multiply, in a mixed product.
  m = message_of([&] {
    portmat::matmul(on_dev(DType::u8, {3, 4}), on_dev(DType::c64, {5, 2}), DeviceArray::empty(dev, DType::c64, {3, 2}));
  });
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(5, 2)"), std::string::npos) << m;
  // out the same memory as an operand of another dtype.
  const DeviceArray sq = on_dev(DType::c64, {4, 4});
  m = message_of([&] { portmat::matmul(sq, on_dev(DType::f32, {4, 4}), sq); });
  EXPECT_NE(m.find("same array as a"), std::string::npos) << m;
  // An out of a dtype the device cannot hold cannot be made, naming the dtype.
  if (!portmat::find_device(dev).supports_f64)
    for (DType t : {DType::f64, DType::c128}) {
      m = message_of([&] { DeviceArray::empty(dev, t, {2, 2}); });
      EXPECT_NE(m.find(portmat::dtype_name(t)), std::string::npos) << m;
    }
}

// cast_on_stream works on memory another library owns on a CUDA GPU. On CUDA devices: casts of a
// few dtype pairs on the legacy default stream (0), against the reference once that stream is
// done. Elsewhere (the CPU backend's host memory, OpenCL) there is no such memory or stream: the
// device refuses with a DeviceError naming it and writes nothing.
TEST_P(OnEveryDevice, CastOnStream) {
  const std::string dev = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<float> src{1.5f, -2.5f, 300.7f};
  std::vector<std::int32_t> dst(3, 7);
  const auto s = reinterpret_cast<std::uintptr_t>(src.data()), d = reinterpret_cast<std::uintptr_t>(dst.data());
  EXPECT_THROW(portmat::cast_on_stream(s, DType::f32, d, DType::i32, -1, dev, 0), std::invalid_argument);
  if (portmat::find_device(dev).backend != "cuda") {
    try {
      portmat::cast_on_stream(s, DType::f32, d, DType::i32, 3, dev, 0);
      ADD_FAILURE() << "cast_on_stream accepted on " << dev;
    } catch (const portmat::DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(dev), std::string::npos) << e.what();
    }
    EXPECT_EQ(dst, std::vector<std::int32_t>(3, 7)) << "a refused cast wrote";
    return;
  }
  // CUDA: device arrays' addresses stand for another library's memory.
  for (const auto& [from, to] : std::vector<std::pair<DType, DType>>{{DType::f32, DType::f16},
                                                                    {DType::f32, DType::bf16},
                                                                    {DType::f64, DType::f16},
                                                                    {DType::f16, DType::f32},
                                                                    {DType::bf16, DType::f16},
                                                                    {DType::i64, DType::i8},
                                                                    {DType::i32, DType::bf16},
                                                                    {DType::u8, DType::f32},
                                                                    {DType::c64, DType::boolean},
                                                                    {DType::c128, DType::c64},
                                                                    {DType::f32, DType::u16}}) {
    if (!holds(dev, from) || !holds(dev, to)) continue;
    HostArray h = cast_sources(from, rng);
    const Shape shape{h.size()};
    const DeviceArray x = DeviceArray::from_host(h.view(shape), dev);
    HostArray got(to, h.size(), 0xA5);
    const DeviceArray y = DeviceArray::from_host(got.view(shape), dev);
    portmat::cast_on_stream(x.address(), from, y.address(), to, h.size(), dev, 0);
    portmat::core::open_device(dev)->wait_for_stream(0);
    y.to_host(got.view(shape));
    expect_cast(h, got, std::string("cast_on_stream ") + portmat::dtype_name(from) + " -> " +
                            portmat::dtype_name(to) + " on " + dev);
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
