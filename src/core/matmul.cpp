// portmat::matmul for every backend: checks arguments, handles the sizes no kernel needs to see
// (empty results, K = 0) and broadcast operands (broadcast.hpp), brings every dtype to one the
// device computes (batch.hpp, dtypes.cpp), turns strided views into matrices a kernel can read,
// then hands off to the device, on a thread with stack enough for the driver (process.hpp). Both
// public overloads end here as a strided batch (arrays.cpp makes the batches of N-d operands).
// Also the benchmark's kernel-only timing.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/backend.hpp"
#include "core/batch.hpp"
#include "core/broadcast.hpp"
#include "core/layout.hpp"
#include "core/out_of_core.hpp"
#include "core/process.hpp"

namespace portmat {

const char* device_kind_name(DeviceKind k) {
  return k == DeviceKind::gpu ? "gpu" : k == DeviceKind::cpu ? "cpu" : "other";
}
std::string MatrixView::shape_str() const {
  return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}

void core::check_views(const MatrixView& a, const MatrixView& b, const MatrixView& c) {
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

namespace {

constexpr std::int64_t kMaxDim = 2147483647;  // the GPU kernels index with 32-bit sizes

// One 2-D product in a dtype the device computes: broadcast operands reduced, views made
// readable, then the device.
void multiply_one(core::Device& dev, const MatrixView& a, const MatrixView& b, const MatrixView& c) {
  auto smaller = [&](const MatrixView& a2, const MatrixView& b2, const MatrixView& c2) {
    multiply_one(dev, a2, b2, c2);
  };
  if (core::multiply_broadcast(a, b, c, smaller)) return;
  if (a.rows > kMaxDim || a.cols > kMaxDim || b.cols > kMaxDim)
    throw std::invalid_argument("matmul: a has shape " + a.shape_str() + ", b has shape " +
                                b.shape_str() + "; dimensions above 2**31 - 1 are not supported");
  std::vector<unsigned char> a_packed, b_packed;
  const core::HostMatrix ha = core::as_dense(a, a_packed);
  const core::HostMatrix hb = core::as_dense(b, b_packed);
  core::host_product(dev, ha, hb, c);  // in blocks where the device's memory asks for them
}

// Whether every matrix of a stack is a kernel-readable dense matrix in place.
bool dense_stack(const MatrixView& v) { return v.row_stride != 0 && v.col_stride != 0 && core::dense_in_place(v); }

// A batch in a dtype the device computes.
void multiply_computed(core::Device& dev, const core::Batch& p) {
  const std::int64_t M = p.a.rows, N = p.b.cols, K = p.a.cols;
  if (p.count == 1) return multiply_one(dev, p.a, p.b, p.c);
  // One b for every matrix of a, and a's and c's matrices stacked row after row: one product
  // of count * M rows (x @ W over a batch: the common case, and the fastest).
  const bool a_rows_stack = p.a.col_stride == 1 && p.a.row_stride >= K && p.a_step == M * p.a.row_stride;
  const bool c_rows_stack = p.c_step == M * p.c.row_stride;
  if (p.b_step == 0 && a_rows_stack && c_rows_stack) {
    MatrixView a = p.a, c = p.c;
    a.rows = c.rows = M * p.count;
    return multiply_one(dev, a, p.b, c);
  }
  if (!dense_stack(p.a) || !dense_stack(p.b) || M > kMaxDim || N > kMaxDim || K > kMaxDim) {
    for (std::int64_t i = 0; i < p.count; ++i)
      multiply_one(dev, core::nth(p.a, p.a_step, i), core::nth(p.b, p.b_step, i), core::nth(p.c, p.c_step, i));
    return;
  }
  core::host_batch(dev, *core::dense_in_place(p.a), p.a_step, *core::dense_in_place(p.b), p.b_step, p.c,
                   p.c_step, p.count);
}

// The product through float64 when that is exact: integer operands whose every partial sum
// stays below 2^53 in magnitude (K * max|a| * max|b|), for devices without integer kernels.
bool exact_in_f64(const core::Batch& p) {
  const double bound = static_cast<double>(p.a.cols) * core::max_abs(p.a, p.a_step, p.count) *
                       core::max_abs(p.b, p.b_step, p.count);
  return bound < 9007199254740992.0;  // 2^53
}

// A complex stack whose every product the device multiplies with b as it is
// (Device::matmul_complex_b_host): r holds the real product's a and c (interleaved parts) and the
// complex b. False, with nothing done, where the device declines or an operand is not dense in
// place.
bool complex_b_on_device(core::Device& dev, const core::Batch& r) {
  if (!core::dense_in_place(r.a) || !core::dense_in_place(r.b) ||
      (r.count > 1 && (!dense_stack(r.a) || !dense_stack(r.b))) || r.a.rows > kMaxDim || r.b.rows > kMaxDim ||
      r.b.cols > kMaxDim)
    return false;
  // Where the real product would not fit on the device, the core's own B'' goes out-of-core.
  const DType real = r.a.dtype;
  if (!core::fits_on_device(dev, r.a.rows, 2 * r.b.cols, r.a.cols, real)) return false;
  return dev.matmul_complex_b_batch_host(*core::dense_in_place(r.a), r.a_step, *core::dense_in_place(r.b), r.b_step,
                                         r.c, r.c_step, r.count);
}

// A complex product with few rows (M <= kComplexFewRows: a vector times a matrix among them) whose
// b has its elements contiguous along its rows. B'' (complex_b) would write and read back four
// times b's bytes, where the product itself reads b once: (1 x 1024) @ (1024 x 1024) complex64
// took 1.42 ms on the 2-core machine against NumPy's 0.14. Instead one real product of a's parts
// stacked, A' = [re a; im a] (2M x K, dtypes.cpp), with b read where it is as the real (K x 2N)
// matrix of its interleaved parts, R = A' @ b_real (the few-rows kernels stream b once), and c
// from R's two halves (store_complex_rows). Each part of c is then a difference or a sum of two
// real dot products of the same terms NumPy's sum has.
constexpr std::int64_t kComplexFewRows = 4;

void route(core::Device& dev, const core::Batch& p, const std::string& device);

bool complex_few_rows(core::Device& dev, const core::Batch& p, DType real, const std::string& device) {
  const std::int64_t M = p.a.rows, K = p.a.cols, N = p.b.cols;
  if (M > kComplexFewRows || (p.b.col_stride != 1 && N > 1) || K > kMaxDim || 2 * N > kMaxDim) return false;
  const core::Converted a2 = core::complex_parts_a(p.a, p.a_step, p.count);
  const core::Converted r = core::result_buffer(p.count * 4 * M * N, real);
  core::Batch q;
  q.a = a2.view, q.a_step = a2.step;
  q.b = {p.b.data, K, 2 * N, 2 * p.b.row_stride, 1, real}, q.b_step = 2 * p.b_step;
  q.c = {r.storage.get(), 2 * M, 2 * N, 2 * N, 1, real}, q.c_step = 4 * M * N;
  q.count = p.count;
  route(dev, q, device);
  core::store_complex_rows(r.storage.get(), p.c, p.c_step, p.count);
  return true;
}

void route_complex(core::Device& dev, const core::Batch& p, const std::string& device, bool may_transpose);

// Few here: at most 8 (5-8 complex64 columns of a (1024 x 1024, F): 3.2-3.7 ms copied, 0.86-1.6
// transposed, NumPy 1.1-1.6; 8 rows of (1024 x 1024, F) b 1.3-1.9 against 0.64).
constexpr std::int64_t kComplexTransposedMax = 8;

// A complex product with few columns and a column-major a, or few rows and a column-major b, as its
// transpose, c^T = b^T @ a^T (into a scratch stack, then c). The route below reads a as reals only
// where its elements are contiguous along k, and b (for few rows) only where they are along n;
// else it copies a (convert_stack) or writes B'' from b element by element, a pass over the long
// operand that cost (2048 x 2048, Fortran order) @ (2048) complex64 31 ms against NumPy's 0.7 on
// the 2-core machine, and (2048) @ (2048 x 2048, Fortran order) 14.5 ms. Transposed, the long
// operand is read where it is: a^T by complex_few_rows, or b^T as the real matrix of its
// interleaved parts with the short a^T's B'' (4 K M reals).
bool complex_transposed(core::Device& dev, const core::Batch& p, const std::string& device) {
  const std::int64_t M = p.a.rows, K = p.a.cols, N = p.b.cols;
  if (M < 1 || K < 1 || N < 1) return false;
  const bool a_k = p.a.col_stride == 1 || K == 1;      // a's elements contiguous along k
  const bool b_n = p.b.col_stride == 1 || N == 1;      // b's along n
  const bool at_m = p.a.row_stride == 1 || M == 1;     // a^T's along its rows (a column-major)
  const bool bt_k = p.b.row_stride == 1 || K == 1;     // b^T's along k (b column-major)
  if (!((N <= kComplexTransposedMax && !a_k && at_m) || (M <= kComplexTransposedMax && !b_n && bt_k))) return false;
  const DType t = p.c.dtype;
  const core::Converted ct = core::result_buffer(p.count * N * M, t);
  core::Batch q;
  q.a = {p.b.data, N, K, p.b.col_stride, p.b.row_stride, t};
  q.b = {p.a.data, K, M, p.a.col_stride, p.a.row_stride, t};
  q.c = {ct.storage.get(), N, M, M, 1, t};
  q.count = p.count, q.a_step = p.b_step, q.b_step = p.a_step, q.c_step = N * M;
  route_complex(dev, q, device, false);  // once: with both sides short it would turn back
  const MatrixView c_t{p.c.data, N, M, p.c.col_stride, p.c.row_stride, t};
  core::store_stack(ct.storage.get(), t, c_t, p.c_step, p.count);
  return true;
}

// c gets the products of the converted operands, computed in `compute`.
void through(core::Device& dev, const core::Batch& p, DType compute, const std::string& device);

void route(core::Device& dev, const core::Batch& p, const std::string& device) {
  const DType t = p.c.dtype;
  core::require_precision(dev, t);  // before any conversion: the mode and the device named at once
  switch (t) {
    case DType::f32:
    case DType::f64:
      if (!dev.computes(t))
        throw DeviceError("matmul: device " + dev.info().id() + " (" + dev.info().name +
                          ") does not support " + dtype_name(t));
      return multiply_computed(dev, p);
    case DType::f16:  // accumulates in float32, as NumPy's float16 loop does
    case DType::bf16:  // the same (ml_dtypes' bfloat16 matmul accumulates in float32 too)
      return through(dev, p, DType::f32, device);
    case DType::c64:
    case DType::c128:
      return route_complex(dev, p, device, true);
    case DType::i32:
    case DType::u32:
    case DType::i64:
    case DType::u64: {
      const DType bits = dtype_size(t) == 4 ? DType::u32 : DType::u64;
      if (dev.computes(bits)) {  // the same bits, wrapping: signedness does not matter
        core::Batch u = p;
        u.a.dtype = u.b.dtype = u.c.dtype = bits;
        return multiply_computed(dev, u);
      }
      if (dev.computes(DType::f64) && exact_in_f64(p)) return through(dev, p, DType::f64, device);
      // No exact way on this device: the native CPU backend's integer kernels.
      auto cpu = core::open_device("cpu");
      if (!cpu->computes(bits))
        throw DeviceError(std::string("matmul: no device here multiplies ") + dtype_name(t) + " exactly");
      return route(*cpu, p, device);
    }
    case DType::boolean:
      if (dev.computes(t)) return multiply_computed(dev, p);  // logic, where the device has it
      [[fallthrough]];
    default:  // boolean and 8/16-bit integers: through uint32 (or float64, exact, on the device)
      if (!dev.computes(DType::u32) && dev.computes(DType::f64) && exact_in_f64(p))
        return through(dev, p, DType::f64, device);
      return through(dev, p, DType::u32, device);
  }
}

// c = a @ b for complex64 / complex128 (route's case), may_transpose: complex_transposed may take it.
void route_complex(core::Device& dev, const core::Batch& p, const std::string& device, bool may_transpose) {
  const DType t = p.c.dtype;
  const DType real = t == DType::c64 ? DType::f32 : DType::f64;
  if (may_transpose && complex_transposed(dev, p, device)) return;
  // a and c as real matrices of interleaved parts where they are (a packed first if its
  // complex elements are not contiguous along k); b rewritten (dtypes.cpp, complex_b).
  core::Converted a_packed;
  MatrixView a = p.a;
  std::int64_t a_step = p.a_step;
  if (a.col_stride != 1 && a.cols > 1) {
    a_packed = core::convert_stack(p.a, p.a_step, p.count, t);
    a = a_packed.view, a_step = a_packed.step;
  }
  core::Batch r;
  r.a = {a.data, a.rows, 2 * a.cols, 2 * a.row_stride, 1, real};
  r.b = p.b;  // complex: taken as it is by a device that can, else b's real form
  r.c = {p.c.data, p.c.rows, 2 * p.c.cols, 2 * p.c.row_stride, 1, real};
  r.count = p.count, r.a_step = 2 * a_step, r.b_step = p.b_step, r.c_step = 2 * p.c_step;
  if (complex_b_on_device(dev, r)) return;
  if (complex_few_rows(dev, p, real, device)) return;
  const core::Converted b2 = core::complex_b(p.b, p.b_step, p.count);
  r.b = b2.view, r.b_step = b2.step;
  return route(dev, r, device);
}

void through(core::Device& dev, const core::Batch& p, DType compute, const std::string& device) {
  if (compute == DType::u32 && dev.matmul_narrow_int_batch_host(p)) return;  // 8/16-bit, in place
  const core::Converted a = core::convert_stack(p.a, p.a_step, p.count, compute, true);
  const core::Converted b = core::convert_stack(p.b, p.b_step, p.count, compute, true);
  const std::int64_t M = p.c.rows, N = p.c.cols;
  const core::Converted c = core::result_buffer(p.count * M * N, compute);
  core::Batch q;
  q.a = a.view, q.b = b.view, q.c = {c.storage.get(), M, N, N, 1, compute};
  q.count = p.count, q.a_step = a.step, q.b_step = b.step, q.c_step = M * N;
  route(dev, q, device);
  core::store_stack(c.storage.get(), compute, p.c, p.c_step, p.count);
}

}  // namespace

namespace core {

void multiply_batch(const Batch& p, const std::string& device) {
  const std::int64_t M = p.a.rows, N = p.b.cols, K = p.a.cols;
  // Resolve even for empty work: bad specs always raise. A mode other than float32 takes the
  // default device as it is: the automatic choice would send small products to the CPU, which
  // runs none of them (a user who asks for tf32 on a GPU machine means the GPU).
  const bool moded = current_precision() != Precision::float32 && follows_precision(p.c.dtype);
  device_memory_limit();  // a bad $PORTMAT_DEVICE_MEMORY raises at every product, naming itself
  // A list of devices (or "cuda": every CUDA device) splits the product (multi_device.cpp).
  auto dev = names_device_list(device) ? open_device_list(device)
             : moded                   ? open_device(device)
                                       : open_device_for(device, M * std::max<std::int64_t>(p.count, 1), N, K,
                                                         static_cast<std::int64_t>(dtype_size(p.c.dtype)));
  if (moded) require_precision(*dev, p.c.dtype);  // also for empty products: the same answer at every size
  if (M == 0 || N == 0 || p.count == 0) return;
  if (K == 0) {  // the empty sum
    const std::size_t es = dtype_size(p.c.dtype);
    for (std::int64_t b = 0; b < p.count; ++b) {
      const MatrixView c = nth(p.c, p.c_step, b);
      for (std::int64_t i = 0; i < M; ++i)
        std::memset(static_cast<char*>(c.data) + i * c.row_stride * static_cast<std::int64_t>(es), 0, N * es);
    }
    return;
  }
  route(*dev, p, device);
}

}  // namespace core

void matmul(const MatrixView& a, const MatrixView& b, const MatrixView& c,
            const std::string& device, std::optional<Precision> precision) {
  core::check_views(a, b, c);
  core::with_enough_stack([&] {
    const core::PrecisionScope scope(precision);
    core::multiply_batch({a, b, c}, device);
  });
}

void matmul(const MatrixView& a, const MatrixView& b, const MatrixView& c, const std::vector<std::string>& devices,
            std::optional<Precision> precision) {
  matmul(a, b, c, core::device_list_spec(devices), precision);
}

std::string core::device_list_spec(const std::vector<std::string>& devices) {
  if (devices.empty()) throw std::invalid_argument("matmul: the list of devices is empty");
  std::string spec;
  for (const std::string& d : devices) {
    if (d.empty() || d.find(',') != std::string::npos)
      throw std::invalid_argument("matmul: '" + d + "' in the list of devices is not a device spec "
                                  "(give one spec such as 'cuda:0' or 'cpu' per entry)");
    spec += (spec.empty() ? "" : ",") + d;
  }
  return spec;
}

std::vector<double> time_gemm(const std::string& device, std::int64_t m, std::int64_t n,
                              std::int64_t k, DType dtype, int repeat, int launches,
                              const std::string& layout, std::int64_t batch, std::optional<Precision> precision) {
  if (m <= 0 || n <= 0 || k <= 0 || repeat <= 0 || launches <= 0 || batch <= 0)
    throw std::invalid_argument("time_gemm: sizes, repeat, launches and batch must be positive");
  auto is_layout = [](char x) { return x == 'r' || x == 'c'; };
  if (layout.size() != 2 || !is_layout(layout[0]) || !is_layout(layout[1]))
    throw std::invalid_argument("time_gemm: layout must be two of 'r' / 'c' (\"rr\", \"cr\", ...), not \"" +
                                layout + "\"");
  const bool complex = dtype == DType::c64 || dtype == DType::c128;
  if (dtype != DType::f32 && dtype != DType::f64 && !complex)
    throw std::invalid_argument(std::string("time_gemm: dtype must be float32, float64, complex64 or complex128, not ") +
                                dtype_name(dtype));
  const bool a_col = layout[0] == 'c', b_col = layout[1] == 'c';
  if (complex && a_col)
    throw std::invalid_argument("time_gemm: complex products take a row-major a (layout \"rr\" or \"rc\")");
  return core::with_enough_stack([&] {
    const core::PrecisionScope scope(precision);
    auto dev = core::open_device(device);
    core::require_precision(*dev, dtype);
    const bool wide = dtype == DType::f64 || dtype == DType::c128;
    if (wide && !dev->info().supports_f64)
      throw DeviceError(std::string("time_gemm: device ") + dev->info().id() + " does not support " + dtype_name(dtype));
    const std::size_t es = dtype_size(dtype), parts = complex ? 2 : 1;
    auto upload_random = [&](std::int64_t count) {  // count elements (complex: 2 reals each)
      std::vector<unsigned char> host(static_cast<std::size_t>(count) * es);
      std::mt19937 rng(static_cast<unsigned>(count));
      std::uniform_real_distribution<double> u(-1.0, 1.0);
      for (std::size_t i = 0; i < static_cast<std::size_t>(count) * parts; ++i) {
        if (wide)
          reinterpret_cast<double*>(host.data())[i] = u(rng);
        else
          reinterpret_cast<float*>(host.data())[i] = static_cast<float>(u(rng));
      }
      auto buf = dev->alloc(host.size());
      dev->upload(*buf, host.data(), host.size());
      return buf;
    };
    auto a = upload_random(batch * m * k), b = upload_random(batch * k * n);
    auto c = dev->alloc(static_cast<std::size_t>(batch * m * n) * es);
    core::DeviceMatrix da{a.get(), 0, m, k, a_col ? m : k, a_col, dtype};
    core::DeviceMatrix db{b.get(), 0, k, n, b_col ? k : n, b_col, dtype};
    core::DeviceMatrix dc{c.get(), 0, m, n, n, false, dtype};
    std::vector<double> seconds;
    if (batch == 1 && !complex) {
      dev->gemm(da, db, dc);  // warm-up: compiles the kernel
      for (int r = 0; r < repeat; ++r) seconds.push_back(dev->gemm_repeated(da, db, dc, launches));
    } else {
      dev->gemm_batch_repeated(da, m * k, db, k * n, dc, m * n, batch, 1);  // warm-up
      for (int r = 0; r < repeat; ++r)
        seconds.push_back(dev->gemm_batch_repeated(da, m * k, db, k * n, dc, m * n, batch, launches));
    }
    return seconds;
  });
}

}  // namespace portmat
