// portmat public C++ API: matrix multiplication of strided host matrices on any device.
//
// A C++ user links the `portmat_core` library and calls portmat::matmul(); the Python package is a
// thin nanobind layer over the same calls. Devices come from three backends (native CPU, CUDA,
// OpenCL) behind the small interface in src/core/backend.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace portmat {

// ---- errors -------------------------------------------------------------------------------------
// Every failure is one of these, with context (which call, which shapes or device, the driver's
// code); the Python layer maps them to exceptions of the same names.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A driver call failed (build failure, lost device, bad argument, ...).
struct DeviceError : Error {
  using Error::Error;
};
// The device could not allocate memory; the caller may free something and try again.
struct OutOfDeviceMemory : DeviceError {
  using DeviceError::DeviceError;
};

// ---- element types ------------------------------------------------------------------------------
// Every dtype np.matmul multiplies with a loop of its own. Integers wrap around as NumPy's do;
// boolean is the logical product (OR of ANDs); float16 and bfloat16 accumulate in float32 and are
// rounded once to their own type. bf16 is bfloat16 (ml_dtypes.bfloat16, torch.bfloat16): the upper
// 16 bits of a float32, rounded to nearest even.
enum class DType {
  f32, f64, f16, c64, c128,  // float32, float64, float16, complex64, complex128
  boolean,
  i8, i16, i32, i64,
  u8, u16, u32, u64,
  bf16,
};
std::size_t dtype_size(DType t);
const char* dtype_name(DType t);  // NumPy's names: "float32", "complex64", "bool", "uint8", ...
DType dtype_from_name(const std::string& name);  // throws std::invalid_argument for others

// A 2-D view of memory, strides in elements (either may be negative or zero).
struct MatrixView {
  void* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 0;
  DType dtype = DType::f32;

  std::string shape_str() const;  // "(rows, cols)"
};

// An N-d view of memory (N >= 1), strides in elements (any may be negative or zero): an operand of
// np.matmul. 1-D is a vector; more than 2 dimensions is a stack of matrices (the last two axes)
// whose leading axes broadcast against the other operand's, as in NumPy.
struct ArrayView {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape, strides;

  std::string shape_str() const;  // "(2, 3, 4)"
};

// ---- devices ------------------------------------------------------------------------------------
enum class DeviceKind { gpu, cpu, other };
const char* device_kind_name(DeviceKind k);  // "gpu", "cpu", "other"

struct DeviceInfo {
  std::string backend;  // "cpu", "cuda" or "opencl"
  int index = 0;        // index within the backend
  std::string name, vendor, driver_version;
  DeviceKind kind = DeviceKind::other;
  std::uint64_t memory_bytes = 0;
  bool host_unified = false;  // shares system memory: host buffers are used in place
  int compute_units = 0;
  bool supports_f64 = false;
  double peak_gflops = 0.0;  // float32 FMA peak (measured or from the clock); 0 when unknown

  std::string id() const { return backend + ":" + std::to_string(index); }
};

// All devices of all backends that could be opened; a backend whose driver is absent adds none.
// Starts every backend's driver (find_device("cpu:0") starts only the CPU backend's).
std::vector<DeviceInfo> devices();

// Why devices might be missing: each backend's problems while probing ("opencl: platform 'X':
// clGetDeviceIDs: CL_DEVICE_NOT_FOUND (-1)"); empty when all went well.
std::vector<std::string> backend_notes();

// Resolves a device spec: "" (the default), "opencl:1", "gpu", "cpu", or a bare backend name
// ("opencl" = that backend's preferred device: a GPU if it has one). Throws std::invalid_argument naming the choices if none matches.
DeviceInfo find_device(const std::string& spec);

// The device matmul uses for an (m x k) @ (k x n) product given `spec`: find_device(spec), except
// that an automatic choice of a GPU sends problems below about 2.5e8 flops (where the host wins
// on measured machines; $PORTMAT_GPU_MIN_FLOP overrides) to the native CPU backend if present.
DeviceInfo device_for(const std::string& spec, std::int64_t m, std::int64_t n, std::int64_t k);

// The default device: set_default_device(), else $PORTMAT_DEVICE, else the first GPU, else a CPU.
DeviceInfo default_device();
void set_default_device(const std::string& spec);  // "" restores the automatic choice

// ---- device memory and out-of-core products (issue 20) ------------------------------------------
// The most device memory portmat allocates on each discrete device (a GPU; an OpenCL device run
// as a discrete one with PORTMAT_OPENCL_DISCRETE=1), pooled buffers included: set here, else
// $PORTMAT_DEVICE_MEMORY (bytes, with K / M / G / T for powers of 1024: "8G"), read once per
// process. An allocation past it throws OutOfDeviceMemory. A NumPy-in/NumPy-out product whose
// device buffers do not fit in min(limit, the device's free memory) runs out-of-core: in blocks
// of the result, each through the device's pipelined path (docs/usage.md, "Out-of-core").
// std::nullopt restores the automatic choice ($PORTMAT_DEVICE_MEMORY, else no limit). 0 is refused.
void set_device_memory_limit(std::optional<std::uint64_t> bytes);
// The limit in force; throws std::invalid_argument naming PORTMAT_DEVICE_MEMORY for a bad value.
std::optional<std::uint64_t> device_memory_limit();
// "8G" -> 8 << 30, "512M", "1024", "4GiB"; throws std::invalid_argument for anything else or 0.
std::uint64_t parse_memory_size(const std::string& text);

// What portmat's NumPy path did on a device since the last reset_device_usage (diagnostics, for
// tests and benchmarks): device memory portmat holds there now and at most (the peak), the calls
// into the device's host path (one per block of an out-of-core product), the products it ran in
// blocks, and their flops (2 m n k per call).
struct DeviceUsage {
  std::uint64_t bytes_in_use = 0, peak_bytes = 0;
  std::uint64_t host_calls = 0, tiled_products = 0;
  double flops = 0;
};
DeviceUsage device_usage(const std::string& device);
void reset_device_usage(const std::string& device);  // counters to 0, the peak to what is in use

// ---- precision of float32 products (issue 18) ---------------------------------------------------
// How a product computed in float32 arithmetic (float32, complex64, and float16 / bfloat16, which
// are computed in float32) is computed. float64, complex128, the integers and bool ignore it.
//   float32     exact float32: every product and sum rounded as float32 FMAs round (the default;
//               PyTorch's set_float32_matmul_precision("highest"), cuBLAS CUBLAS_COMPUTE_32F)
//   float32_tc  float32 accuracy on tensor cores: each operand split into a TF32 high and low part,
//               hi*hi + hi*lo + lo*hi accumulated in float32 (no PyTorch or cuBLAS equivalent on
//               Hopper; cuBLAS's CUBLAS_COMPUTE_32F_EMULATED_16BFX9 is the nearest idea)
//   tf32        operands rounded to TF32 (10 mantissa bits), float32 accumulation (PyTorch "high"
//               / allow_tf32, cuBLAS CUBLAS_COMPUTE_32F_FAST_TF32)
//   bfloat16    operands rounded to bfloat16 (7 mantissa bits), float32 accumulation (PyTorch
//               "medium", cuBLAS CUBLAS_COMPUTE_32F_FAST_16BF)
// Only CUDA GPUs of compute capability 8.0 or later run the modes other than float32; every other
// device raises DeviceError naming the mode and the device (never something else silently).
// Not yet run on a GPU: see docs/usage.md.
enum class Precision { float32, float32_tc, tf32, bfloat16 };
const char* precision_name(Precision p);              // "float32", "float32_tc", "tf32", "bfloat16"
Precision precision_from_name(const std::string& s);  // throws std::invalid_argument for others
// The process-wide mode: set_precision(), else $PORTMAT_PRECISION, else float32. std::nullopt
// restores the automatic choice.
void set_precision(std::optional<Precision> p);
Precision get_precision();

// ---- the operation ------------------------------------------------------------------------------
// c = a @ b. a is (M, K), b is (K, N), c is (M, N); all of one dtype. a and b may be any strided
// views; c must be row-major with unit column stride. Thread-safe.
// precision: the mode of this call (std::nullopt: get_precision()).
void matmul(const MatrixView& a, const MatrixView& b, const MatrixView& c,
            const std::string& device = "", std::optional<Precision> precision = std::nullopt);

// One product split across several devices (issue 20): `devices` are specs as above, at least one,
// no device twice ("cpu" and "cpu:0" are the same device). The result is cut into blocks, one per
// device in proportion to its expected speed, each computed on a host thread of its own through
// that device's pipelined path (and out-of-core where it must), all into c; products under
// $PORTMAT_SPLIT_MIN_FLOP (default 1e8 flops) run whole on the fastest. A device that does not
// compute the dtype (float64, say) gets no block. An error on any device is thrown once every
// device is done. A list of one device is that device. matmul(..., "cuda") runs on every CUDA
// device of the process the same way (one GPU: as before).
// Note: pass a std::vector<std::string> (a braced list of string literals is ambiguous).
void matmul(const MatrixView& a, const MatrixView& b, const MatrixView& c, const std::vector<std::string>& devices,
            std::optional<Precision> precision = std::nullopt);

// out = a @ b with np.matmul's shapes: a 1-D a is a row vector and a 1-D b a column vector (their
// added axis is not in the result), the leading axes of stacks broadcast, and out has exactly the
// result's shape (matmul_shape). All three of one dtype; out's last axis must have unit stride
// unless it has one element, and out must not overlap a or b. Stacks run as strided batches: one
// launch per batch on GPUs, products spread over the threads on the CPU.
void matmul(const ArrayView& a, const ArrayView& b, const ArrayView& out,
            const std::string& device = "", std::optional<Precision> precision = std::nullopt);
// The same on several devices (see the MatrixView overload above).
void matmul(const ArrayView& a, const ArrayView& b, const ArrayView& out, const std::vector<std::string>& devices,
            std::optional<Precision> precision = std::nullopt);

// The shape of a @ b for operands of these shapes; throws std::invalid_argument naming both when
// NumPy would refuse them (a 0-d operand, inner dimensions that differ, stacks that do not
// broadcast).
std::vector<std::int64_t> matmul_shape(const std::vector<std::int64_t>& a,
                                       const std::vector<std::int64_t>& b);

// ---- arrays that stay on a device ---------------------------------------------------------------
// A C-contiguous array (a matrix, a vector or a stack) held in one device's memory, so that
// products chain on the device without crossing the link: matmul of DeviceArrays returns a
// DeviceArray on their device. Copies of a DeviceArray share its memory (released with the last).
// Every backend: CUDA and OpenCL GPUs, OpenCL CPU devices and the native CPU backend (host memory).
// dtypes: every DType (float64 and complex128 where the device has float64). Products run on the
// device in a compute dtype (float16 / bfloat16 in float32, accumulated there and rounded once;
// bool and 8/16-bit integers in int32, wrapping as NumPy's, bool as the int32 sum != 0; the others
// in themselves, complex through the real kernels) with cast kernels between (CUDA, OpenCL; plain
// C++ on the CPU backend, whose memory is host memory).
class DeviceArray {
 public:
  DeviceArray() = default;
  // Uninitialised memory for an array of this shape on `device` (a spec as for matmul).
  static DeviceArray empty(const std::string& device, DType dtype, const std::vector<std::int64_t>& shape);
  // A copy of the host array `host` (any strides) on `device`.
  static DeviceArray from_host(const ArrayView& host, const std::string& device);
  // Copies the array into the host array `dst` of the same shape and dtype (any strides).
  void to_host(const ArrayView& dst) const;
  // A copy of the array cast to `dtype` on its device (this array itself when it already is).
  DeviceArray astype(DType dtype) const;

  bool valid() const { return state_ != nullptr; }
  const std::vector<std::int64_t>& shape() const;
  DType dtype() const;
  const DeviceInfo& device() const;
  std::int64_t size() const;  // elements
  // The memory's address where it has one a foreign library can use: a CUdeviceptr on CUDA, a
  // host pointer on the CPU backend; 0 on OpenCL (a cl_mem has none).
  std::uintptr_t address() const;

  struct State;  // the device and its buffer (src/core/device_arrays.cpp)
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  explicit DeviceArray(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

// out = a @ b with np.matmul's shapes, on the device that holds all three (out has exactly
// matmul_shape(a.shape(), b.shape()) and shares no memory with a or b). out's dtype is the
// product's: a and b of other dtypes are cast to it on the device first, as NumPy casts operands
// to np.result_type (the caller picks out's dtype; mixed dtypes are promoted by the caller).
// Returns when the product is done: the next call, or a copy to the host, sees it.
void matmul(const DeviceArray& a, const DeviceArray& b, const DeviceArray& out,
            std::optional<Precision> precision = std::nullopt);
// a @ b into a new array of a's dtype; a and b must be of one dtype (else pass out).
DeviceArray matmul(const DeviceArray& a, const DeviceArray& b, std::optional<Precision> precision = std::nullopt);

// dst[i] = src[i] cast from `from` to `to` for i < count, on memory another library owns on a
// CUDA GPU (device addresses, contiguous), queued on `stream` and not waited for, as
// matmul_on_stream: how products of dtypes the kernels lack are brought to one they have.
void cast_on_stream(std::uintptr_t src, DType from, std::uintptr_t dst, DType to, std::int64_t count,
                    const std::string& device, std::uintptr_t stream);

// out = a @ b on memory another library owns on a CUDA GPU (a CuPy array's, a torch tensor's):
// the views' `data` are device addresses, strides in elements as for the host overload. The work
// is queued on `stream` (a CUstream; 0: the legacy default stream) and not waited for, as a
// DLPack consumer does: the caller's stream orders it after the operands' producers and before
// whatever reads out. `workspace` (device memory of workspace_bytes(a, b), owned by the caller
// until the queued work is done) is needed for complex dtypes only. float32, float64, complex64,
// complex128 and the 32/64-bit integers.
void matmul_on_stream(const ArrayView& a, const ArrayView& b, const ArrayView& out, const std::string& device,
                      std::uintptr_t stream, std::uintptr_t workspace = 0,
                      std::optional<Precision> precision = std::nullopt);
std::size_t workspace_bytes(const ArrayView& a, const ArrayView& b);

// Kernel-only timing: runs a (M,K)x(K,N) product on device-resident random data `repeat` times and
// returns each run's seconds (device event time where the backend has one). For benchmarks. With
// launches > 1, each run is that many products queued back to back, and its time is their mean.
// layout: a's and b's storage, 'r' row-major or 'c' column-major each ("rr": both row-major).
// batch > 1: a strided stack of `batch` products, timed as one (its seconds are the whole
// stack's). complex64 / complex128 where the device multiplies complex matrices itself (CUDA:
// b rewritten as a real matrix on the device, inside the timed region; a row-major).
// precision: as matmul's (float32 and complex64 only; the others ignore it).
std::vector<double> time_gemm(const std::string& device, std::int64_t m, std::int64_t n,
                              std::int64_t k, DType dtype, int repeat, int launches = 1,
                              const std::string& layout = "rr", std::int64_t batch = 1,
                              std::optional<Precision> precision = std::nullopt);

}  // namespace portmat
