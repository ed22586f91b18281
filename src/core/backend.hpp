// The backend interface: what each backend (src/cpu, src/cuda, src/opencl) implements.
//
// Kept small on purpose: discover devices, hold device memory, move data, run one gemm. The core
// (src/core/matmul.cpp) does everything that is the same for all backends: argument checks,
// classifying strided views, packing views no kernel can read, K = 0 and empty results.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device_memory.hpp"
#include "portmat/portmat.hpp"

namespace portmat::core {

struct Batch;  // batch.hpp

// Device memory. Released when the last owner drops it.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual std::size_t bytes() const = 0;
};

// A matrix a kernel can read directly: element (i, j) of a row-major matrix is at
// data[offset + i * ld + j], of a column-major one at data[offset + j * ld + i].
// Transposed NumPy views are column-major; slices keep their leading dimension.
template <class Storage>
struct DenseMatrix {
  Storage data{};
  std::size_t offset = 0;  // elements
  std::int64_t rows = 0, cols = 0, ld = 0;
  bool col_major = false;
  DType dtype = DType::f32;

  // Elements from the first to one past the last, offset not included.
  std::size_t span() const {
    const std::int64_t outer = col_major ? cols : rows, inner = col_major ? rows : cols;
    return outer == 0 ? 0 : static_cast<std::size_t>((outer - 1) * ld + inner);
  }
};
using HostMatrix = DenseMatrix<const void*>;
using DeviceMatrix = DenseMatrix<const Buffer*>;
using AddressMatrix = DenseMatrix<std::uintptr_t>;  // data: a device address, offset 0

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  // Device memory of at least `bytes`; throws OutOfDeviceMemory.
  virtual std::unique_ptr<Buffer> alloc(std::size_t bytes) = 0;
  virtual void upload(Buffer& dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const Buffer& src, std::size_t bytes) = 0;

  // c = a @ b on device-resident matrices (c row-major, ld = c.ld). Waits for completion and
  // returns the kernel's own time in seconds (for benchmarks).
  virtual double gemm(const DeviceMatrix& a, const DeviceMatrix& b, const DeviceMatrix& c) = 0;

  // The same product `launches` times back to back (no wait between them where the device can
  // queue work), returning the mean seconds per product: how vendor libraries are often timed.
  virtual double gemm_repeated(const DeviceMatrix& a, const DeviceMatrix& b, const DeviceMatrix& c,
                               int launches) {
    double s = 0;
    for (int i = 0; i < launches; ++i) s += gemm(a, b, c);
    return s / launches;
  }

  // c[i] = a[i] @ b[i] for i < count on device-resident stacks (matrix i of x starts x_step
  // elements after matrix i - 1 of x.data, 0: the same matrix for every i), the whole stack
  // `launches` times back to back; returns the mean seconds per stack. float32 / float64 here (one
  // gemm per product); backends override it to run a stack as one launch, and may take complex
  // dtypes (a and c row-major) by their own route. For benchmarks (time_gemm).
  virtual double gemm_batch_repeated(const DeviceMatrix& a, std::int64_t a_step, const DeviceMatrix& b,
                                     std::int64_t b_step, const DeviceMatrix& c, std::int64_t c_step,
                                     std::int64_t count, int launches) {
    if (a.dtype != DType::f32 && a.dtype != DType::f64)
      throw DeviceError(std::string("device-resident ") + dtype_name(a.dtype) + " products are not implemented on " +
                        info().id());
    double s = 0;
    for (int l = 0; l < launches; ++l)
      for (std::int64_t i = 0; i < count; ++i) {
        DeviceMatrix ai = a, bi = b, ci = c;
        ai.offset += static_cast<std::size_t>(i * a_step);
        bi.offset += static_cast<std::size_t>(i * b_step);
        ci.offset += static_cast<std::size_t>(i * c_step);
        s += gemm(ai, bi, ci);
      }
    return s / launches;
  }

  // c[i] = a[i] @ b[i] on device-resident stacks, as gemm_batch_repeated once but untimed, and in
  // every dtype computes() names, and complex64 / complex128 (a and c row-major; complex128 where
  // the device has float64): portmat's device arrays (device_arrays.cpp). Returns when done.
  virtual void gemm_batch(const DeviceMatrix& a, std::int64_t a_step, const DeviceMatrix& b, std::int64_t b_step,
                          const DeviceMatrix& c, std::int64_t c_step, std::int64_t count) {
    gemm_batch_repeated(a, a_step, b, b_step, c, c_step, count, 1);
  }

  // c[i] = a[i] @ b[i] on memory another library owns (`data` is a device address, e.g. a CuPy
  // array's), queued on that library's `stream` (a CUstream) and not waited for: the DLPack
  // consumer's contract (matmul_on_stream). float32 / float64, the uint32 / uint64 products, and
  // complex64 / complex128 with b's real form built in `workspace` (workspace_bytes). Only devices
  // whose memory has addresses (CUDA) implement it.
  virtual void gemm_on_stream(const AddressMatrix& /*a*/, std::int64_t /*a_step*/, const AddressMatrix& /*b*/,
                              std::int64_t /*b_step*/, const AddressMatrix& /*c*/, std::int64_t /*c_step*/,
                              std::int64_t /*count*/, std::uintptr_t /*stream*/, std::uintptr_t /*workspace*/) {
    throw DeviceError("matmul: " + info().id() + " (" + info().name + ") does not take other libraries' device "
                      "arrays; only CUDA devices do");
  }

  // dst = src cast element by element from `from` to `to` (core/casts.hpp has the rules), for
  // `count` elements from the buffers' starts, on the device and waited for: portmat's device
  // arrays change dtype with it (mixed-dtype products, float16 / bfloat16 / bool / 8- and 16-bit
  // integers computed in a wider type). Every backend implements it: CUDA and OpenCL with their
  // cast kernels, the CPU backend with the host loop.
  virtual void cast(const Buffer& /*src*/, DType from, const Buffer& /*dst*/, DType to, std::int64_t /*count*/) {
    throw DeviceError(std::string("cast from ") + dtype_name(from) + " to " + dtype_name(to) +
                      " is not implemented on " + info().id());
  }

  // The same on memory another library owns (device addresses), queued on its `stream` (a
  // CUstream) and not waited for, as gemm_on_stream. CUDA only.
  virtual void cast_on_stream(std::uintptr_t /*src*/, DType /*from*/, std::uintptr_t /*dst*/, DType /*to*/,
                              std::int64_t /*count*/, std::uintptr_t /*stream*/) {
    throw DeviceError("cast: " + info().id() + " (" + info().name + ") does not take other libraries' device "
                      "arrays; only CUDA devices do");
  }

  // Waits until the work queued on another library's `stream` (a CUstream) is done: products
  // through gemm_on_stream whose result portmat itself hands out. CUDA only.
  virtual void wait_for_stream(std::uintptr_t /*stream*/) {
    throw DeviceError("matmul: " + info().id() + " (" + info().name + ") has no streams of other libraries");
  }

  // The device address of a buffer's first byte where its memory has one a foreign library can
  // use (CUDA: a CUdeviceptr; the CPU backend: a host pointer), else 0.
  virtual std::uintptr_t address_of(const Buffer& /*b*/) const { return 0; }

  // Whether `address` is memory of this device that another library allocated (CUDA: a device
  // pointer of this GPU, as a __cuda_array_interface__ names it). CUDA only; others say false.
  virtual bool holds_address(std::uintptr_t /*address*/) const { return false; }

  // Run-time tuning (OpenCL, `python -m portmat tune`): the key and the file this device's tuned
  // kernel parameters are stored under ({"", ""}: nothing to tune), and the parameters an
  // (m x k) @ (k x n) product of `dtype` with row-major operands runs with now ("MWG=64,NWG=64,...";
  // "" where the backend has none).
  virtual std::pair<std::string, std::string> tuning_store() const { return {}; }
  virtual std::string kernel_params(DType /*dtype*/, std::int64_t /*m*/, std::int64_t /*n*/, std::int64_t /*k*/) {
    return {};
  }

  // c = a @ b with host operands and a row-major host result (c.col_stride == 1), M, N, K > 0,
  // in a dtype the device computes (computes()).
  // Each backend moves data its own best way: in place on shared memory, copies on discrete
  // devices (pooled buffers, pipelined pinned copies). Must leave no device work referring to host
  // memory when it returns or throws.
  virtual void matmul_host(const HostMatrix& a, const HostMatrix& b, const MatrixView& c) = 0;

  // c[i] = a[i] @ b[i] for i < count (the same contract as matmul_host per product): matrix i of
  // x starts x_step elements after matrix i - 1 (0: every i reads the same matrix). Backends
  // override it to run a stack as one launch, or small products in parallel; this one loops.
  virtual void matmul_batch_host(const HostMatrix& a, std::int64_t a_step, const HostMatrix& b,
                                 std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                                 std::int64_t count) {
    const std::size_t es = dtype_size(c.dtype);
    for (std::int64_t i = 0; i < count; ++i) {
      HostMatrix ai = a, bi = b;
      MatrixView ci = c;
      ai.data = static_cast<const unsigned char*>(a.data) + i * a_step * static_cast<std::int64_t>(es);
      bi.data = static_cast<const unsigned char*>(b.data) + i * b_step * static_cast<std::int64_t>(es);
      ci.data = static_cast<unsigned char*>(c.data) + i * c_step * static_cast<std::int64_t>(es);
      matmul_host(ai, bi, ci);
    }
  }

  // c = a @ B'' for a complex b (K x N, complex64 / complex128), with a and c the real matrices
  // of interleaved parts (M x 2K, and M x 2N row-major) and B'' b's real form (batch.hpp,
  // complex_b), without writing B'' out: a device that packs b anyway can pack B'' straight from
  // b, saving a pass over memory. Returns false, touching nothing, where the device has no such
  // path for this product (the core then builds B'' itself).
  virtual bool matmul_complex_b_host(const HostMatrix& /*a*/, const HostMatrix& /*b*/, const MatrixView& /*c*/) {
    return false;
  }

  // c = a @ b for a stack of 8- or 16-bit integer products (batch.hpp's Batch: host memory, one
  // dtype, any strides) in their own dtype, wrapping as NumPy's loop does: false, touching nothing,
  // where the device has no such path for these products (the core then widens the operands to
  // uint32, multiplies, and narrows the results).
  virtual bool matmul_narrow_int_batch_host(const Batch& /*p*/) { return false; }

  // The same for a stack of count products (x_step elements between matrices, as
  // matmul_batch_host's): false, touching nothing, where the device declines the first (every
  // product of a stack has its shape). Backends override it to run small products in parallel;
  // this one loops.
  virtual bool matmul_complex_b_batch_host(const HostMatrix& a, std::int64_t a_step, const HostMatrix& b,
                                           std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                                           std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) {
      HostMatrix ai = a, bi = b;
      MatrixView ci = c;
      ai.data = static_cast<const unsigned char*>(a.data) + i * a_step * static_cast<std::int64_t>(dtype_size(a.dtype));
      bi.data = static_cast<const unsigned char*>(b.data) + i * b_step * static_cast<std::int64_t>(dtype_size(b.dtype));
      ci.data = static_cast<unsigned char*>(c.data) + i * c_step * static_cast<std::int64_t>(dtype_size(c.dtype));
      if (!matmul_complex_b_host(ai, bi, ci)) {
        if (i == 0) return false;
        throw std::logic_error("matmul: the device declined a complex product of a stack it had taken");
      }
    }
    return true;
  }

  // Whether the device has kernels of its own for this dtype: float32 always, float64 where
  // info().supports_f64, uint32 / uint64 (the products of every integer type) where it says so.
  // The core brings every other dtype to one of these (core/batch.hpp).
  virtual bool computes(DType t) const {
    return t == DType::f32 || (t == DType::f64 && info().supports_f64);
  }

  // Whether the device runs float32 products in precision mode p (portmat.hpp, Precision): float32
  // everywhere; the others only where a backend says so (CUDA, sm_80 and later). A device that
  // says yes reads current_precision() in every product of float32 arithmetic it is handed (on
  // the calling thread) and computes that mode, or throws; precision_note(p) says why not.
  virtual bool supports(Precision p) const { return p == Precision::float32; }
  virtual std::string precision_note(Precision /*p*/) const {
    return std::string("the ") + info().backend + " backend has no kernels for it";
  }

  // Bytes per second at which matmul_host's operands reach the kernels and results come back:
  // a discrete GPU's link, measured; a CPU's memory copy rate, measured; 0 where unknown. Measured
  // once, at the first call (milliseconds), for the automatic device choice (open_device_for).
  virtual double host_bytes_per_s() { return 0; }

  // Host memory of at least `bytes` that matmul_host writes results into fastest (pinned memory
  // for a discrete GPU's copy engines), held until the last copy of the pointer goes; null where
  // ordinary memory is as good or none can be had (the caller then allocates its own). With
  // `reuse_only`, only memory the device already holds is handed out (nothing slow is allocated).
  virtual std::shared_ptr<void> alloc_host(std::size_t /*bytes*/, bool /*reuse_only*/) {
    return nullptr;
  }

  // ---- device memory of the NumPy path (issue 20) -------------------------------------------
  // The core plans out-of-core products with these (out_of_core.cpp): a product whose
  // host_product_bytes pass memory_for_products() runs in blocks, each a matmul_host call that fits.
  MemoryAccount memory;  // every device buffer the backend holds, pooled ones too, against the cap
  UsageCounters usage;   // what the core ran here (out_of_core.cpp; portmat::device_usage)

  // Device memory one matmul_host call of an (m x k) @ (k x n) product of t takes at most: its
  // buffers for a, b and c and whatever scratch its kernels may allocate. 0 where the call
  // allocates none (memory shared with the host: arrays are used in place), and then the core
  // never tiles.
  virtual std::uint64_t host_product_bytes(std::int64_t /*m*/, std::int64_t /*n*/, std::int64_t /*k*/,
                                           DType /*t*/) const {
    return 0;
  }
  // Device memory a matmul_host call may take now: min(the cap less what portmat holds, what the
  // driver reports free less a margin), counting the pool's free buffers as free (the backend
  // gives them back when it needs the room).
  virtual std::uint64_t memory_for_products() { return ~std::uint64_t(0); }
  // The largest single buffer the device allocates (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE).
  virtual std::uint64_t max_buffer_bytes() const { return ~std::uint64_t(0); }
  // Frees the pool's free buffers (the core retries a block that met OutOfDeviceMemory after it).
  virtual void release_cached_memory() {}

  // Makes the caller's host memory [p, p + bytes) faster for matmul_host to read (page-locks it
  // in place for a discrete GPU) until the returned handle goes; the caller must keep the memory
  // alive and unmoved while it holds the handle. Null where it would not help or cannot be done.
  virtual std::shared_ptr<void> pin_host(const void* /*p*/, std::size_t /*bytes*/) { return nullptr; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;   // "cuda": the first part of its devices' ids
  virtual const char* label() const = 0;  // "CUDA": how messages name its driver
  // Probed once by the registry, on a big-stack thread, the first time the backend is asked for.
  // A backend whose driver is missing returns none; one that throws is reported as a note.
  virtual std::vector<std::shared_ptr<Device>> devices() = 0;
  // Whether its devices keep working in a child made by fork() after devices() ran in the parent.
  // Drivers with threads of their own (OpenCL, CUDA) do not; the registry then refuses their
  // devices in the child with an error naming the cause.
  virtual bool survives_fork() const { return false; }
  // What went wrong while probing (a platform that failed to list its devices, say), for users
  // asking why a device is missing. Valid after devices().
  virtual std::vector<std::string> notes() const { return {}; }
};

// The precision mode of the call in progress on this thread (precision.cpp): the core sets it with
// a PrecisionScope inside with_enough_stack, on the thread that then calls the device, around
// every public entry point (matmul, device arrays, matmul_on_stream, time_gemm). A scope rather
// than an argument of every Device method (seven virtuals, three backends, each passing it down
// to its launches): the CUDA backend reads it where it chooses a kernel (launch, launch_batch),
// always on the calling thread. A backend that launched from threads of its own would have to
// read it first on the calling thread. Devices that do not support() a mode never see it: the core
// checks first (require_precision).
Precision current_precision();
class PrecisionScope {
 public:
  explicit PrecisionScope(std::optional<Precision> p);  // nullopt: get_precision()
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision saved_;
};
// Whether products of dtype t follow the precision mode: float32, and the dtypes computed in
// float32 (complex64, float16, bfloat16).
bool follows_precision(DType t);
// Throws DeviceError naming the mode and the device where current_precision() is not float32,
// t follows it, and dev does not support() it.
void require_precision(const Device& dev, DType t);

// Registered backends (registry.cpp), in order of preference for the default device.
std::vector<std::unique_ptr<Backend>> make_backends();
#ifdef PORTMAT_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend();  // src/cuda
#endif
#ifdef PORTMAT_WITH_CPU
std::unique_ptr<Backend> make_cpu_backend();  // src/cpu
#endif
#ifdef PORTMAT_WITH_OPENCL
std::unique_ptr<Backend> make_opencl_backend();  // src/opencl
#endif

// The opened device behind a spec (see portmat::find_device).
std::shared_ptr<Device> open_device(const std::string& spec);

// fn(device) for every device of every backend probed in this process (none is probed here).
void for_each_open_device(const std::function<void(Device&)>& fn);

// Whether a spec names several devices for one NumPy product: a list ("cuda:0,cpu", what the
// vector overloads of matmul and Python's device=[...] become) or "cuda" (every CUDA device).
bool names_device_list(const std::string& spec);
// The device(s) behind such a spec: the one device where it names one (so that "cuda" on a
// machine with one GPU, or a list of one, is that device, as before), else a group that splits
// each product among them (multi_device.cpp). Throws std::invalid_argument for an empty entry,
// an unknown device (as open_device does) or a device named twice.
std::shared_ptr<Device> open_device_list(const std::string& spec);
std::shared_ptr<Device> make_device_group(std::vector<std::shared_ptr<Device>> devices);  // multi_device.cpp
// The spec of a list of specs (the vector overloads of matmul): std::invalid_argument for an empty
// list or an entry that is empty or holds a comma.
std::string device_list_spec(const std::vector<std::string>& devices);

// The device for an (m x k) @ (k x n) product of `element_bytes` elements: open_device(spec),
// except that when the choice is automatic (no spec, no set_default_device, no $PORTMAT_DEVICE)
// and would be a GPU, the native CPU backend (when there is one) takes products it is expected to
// finish sooner, by product_seconds' model ($PORTMAT_GPU_MIN_FLOP replaces the model by a flop
// threshold).
std::shared_ptr<Device> open_device_for(const std::string& spec, std::int64_t m, std::int64_t n,
                                        std::int64_t k, std::int64_t element_bytes = 4);

// The model behind the automatic choice: expected seconds of one NumPy-in/NumPy-out product of
// `flops` that moves `bytes` (operands in, result out) on a device with this float32 peak
// (GFLOP/s) and host_bytes_per_s(). A discrete GPU moves every byte over its link and pays a
// fixed cost per call; a CPU reads and writes them in its own memory and pays little per call;
// each computes at a fraction of its peak. registry.cpp has the constants and where they come from.
double product_seconds(double flops, double bytes, const DeviceInfo& device, double bytes_per_s);

}  // namespace portmat::core
