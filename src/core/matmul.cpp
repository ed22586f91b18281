// portmat::matmul for every backend: checks arguments, handles the sizes no kernel needs to see
// (empty results, K = 0) and broadcast operands (broadcast.hpp), turns strided views into matrices
// a kernel can read, then hands off to the device, on a thread with stack enough for the driver
// (process.hpp). Also dtype helpers and the benchmark's kernel-only timing.
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/backend.hpp"
#include "core/broadcast.hpp"
#include "core/layout.hpp"
#include "core/process.hpp"

namespace portmat {

std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 8; }
const char* dtype_name(DType t) { return t == DType::f32 ? "float32" : "float64"; }
const char* device_kind_name(DeviceKind k) {
  return k == DeviceKind::gpu ? "gpu" : k == DeviceKind::cpu ? "cpu" : "other";
}
std::string MatrixView::shape_str() const {
  return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}

namespace {

void check_arguments(const MatrixView& a, const MatrixView& b, const MatrixView& c) {
  if (a.cols != b.rows)
    throw std::invalid_argument("matmul: inner dimensions differ: a has shape " + a.shape_str() +
                                ", b has shape " + b.shape_str());
  if (c.rows != a.rows || c.cols != b.cols)
    throw std::invalid_argument("matmul: result has shape " + c.shape_str() + ", expected (" +
                                std::to_string(a.rows) + ", " + std::to_string(b.cols) + ")");
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw std::invalid_argument(std::string("matmul: dtypes differ: a is ") + dtype_name(a.dtype) +
                                ", b is " + dtype_name(b.dtype) + ", result is " +
                                dtype_name(c.dtype));
  if (a.rows < 0 || a.cols < 0 || b.cols < 0)
    throw std::invalid_argument("matmul: negative dimension");
  const bool c_empty = c.rows == 0 || c.cols == 0;  // its strides mean nothing (NumPy 2: zeros)
  if (!c_empty && ((c.cols > 1 && c.col_stride != 1) || (c.rows > 1 && c.row_stride < c.cols)))
    throw std::invalid_argument("matmul: the result must be row-major with unit column stride");
  const std::size_t es = dtype_size(a.dtype);
  for (auto [v, name] : {std::pair{&a, "a"}, {&b, "b"}, {&c, "the result"}})
    if (v->rows > 0 && v->cols > 0 && reinterpret_cast<std::uintptr_t>(v->data) % es != 0)
      throw std::invalid_argument(std::string("matmul: the data of ") + name + " is at an address "
                                  "that is not a multiple of its element size (" +
                                  std::to_string(es) + " bytes); copy it to aligned memory");
}

// matmul() once the arguments are known to be consistent.
void multiply(const MatrixView& a, const MatrixView& b, const MatrixView& c, const std::string& device) {
  // Resolve even for empty work: bad specs always raise.
  auto dev = core::open_device_for(device, a.rows, b.cols, a.cols);
  if (c.rows == 0 || c.cols == 0) return;
  const std::size_t es = dtype_size(c.dtype);
  if (a.cols == 0) {  // K = 0: the empty sum
    for (std::int64_t i = 0; i < c.rows; ++i)
      std::memset(static_cast<char*>(c.data) + i * c.row_stride * es, 0, c.cols * es);
    return;
  }
  auto smaller = [&](const MatrixView& a2, const MatrixView& b2, const MatrixView& c2) {
    multiply(a2, b2, c2, device);
  };
  if (core::multiply_broadcast(a, b, c, smaller)) return;
  constexpr std::int64_t kMaxDim = 2147483647;  // the GPU kernels index with 32-bit sizes
  if (a.rows > kMaxDim || a.cols > kMaxDim || b.cols > kMaxDim)
    throw std::invalid_argument("matmul: a has shape " + a.shape_str() + ", b has shape " +
                                b.shape_str() + "; dimensions above 2**31 - 1 are not supported");
  if (a.dtype == DType::f64 && !dev->info().supports_f64)
    throw DeviceError("matmul: device " + dev->info().id() + " (" + dev->info().name +
                      ") does not support float64");
  std::vector<unsigned char> a_packed, b_packed;
  const core::HostMatrix ha = core::as_dense(a, a_packed);
  const core::HostMatrix hb = core::as_dense(b, b_packed);
  dev->matmul_host(ha, hb, c);
}

}  // namespace

void matmul(const MatrixView& a, const MatrixView& b, const MatrixView& c,
            const std::string& device) {
  check_arguments(a, b, c);
  core::with_enough_stack([&] { multiply(a, b, c, device); });
}

std::vector<double> time_gemm(const std::string& device, std::int64_t m, std::int64_t n,
                              std::int64_t k, DType dtype, int repeat, int launches,
                              const std::string& layout) {
  if (m <= 0 || n <= 0 || k <= 0 || repeat <= 0 || launches <= 0)
    throw std::invalid_argument("time_gemm: sizes, repeat and launches must be positive");
  auto is_layout = [](char x) { return x == 'r' || x == 'c'; };
  if (layout.size() != 2 || !is_layout(layout[0]) || !is_layout(layout[1]))
    throw std::invalid_argument("time_gemm: layout must be two of 'r' / 'c' (\"rr\", \"cr\", ...), not \"" +
                                layout + "\"");
  const bool a_col = layout[0] == 'c', b_col = layout[1] == 'c';
  return core::with_enough_stack([&] {
    auto dev = core::open_device(device);
    if (dtype == DType::f64 && !dev->info().supports_f64)
      throw DeviceError("time_gemm: device " + dev->info().id() + " does not support float64");
    const std::size_t es = dtype_size(dtype);
    auto upload_random = [&](std::int64_t count) {
      std::vector<unsigned char> host(static_cast<std::size_t>(count) * es);
      std::mt19937 rng(static_cast<unsigned>(count));
      std::uniform_real_distribution<double> u(-1.0, 1.0);
      for (std::int64_t i = 0; i < count; ++i) {
        if (dtype == DType::f32)
          reinterpret_cast<float*>(host.data())[i] = static_cast<float>(u(rng));
        else
          reinterpret_cast<double*>(host.data())[i] = u(rng);
      }
      auto buf = dev->alloc(host.size());
      dev->upload(*buf, host.data(), host.size());
      return buf;
    };
    auto a = upload_random(m * k), b = upload_random(k * n);
    auto c = dev->alloc(static_cast<std::size_t>(m * n) * es);
    core::DeviceMatrix da{a.get(), 0, m, k, a_col ? m : k, a_col, dtype};
    core::DeviceMatrix db{b.get(), 0, k, n, b_col ? k : n, b_col, dtype};
    core::DeviceMatrix dc{c.get(), 0, m, n, n, false, dtype};
    std::vector<double> seconds;
    dev->gemm(da, db, dc);  // warm-up: compiles the kernel
    for (int r = 0; r < repeat; ++r) seconds.push_back(dev->gemm_repeated(da, db, dc, launches));
    return seconds;
  });
}

}  // namespace portmat
