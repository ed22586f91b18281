// The OpenCL backend: every OpenCL device of every platform (NVIDIA, AMD, Intel GPUs; PoCL CPUs).
//
// Per device, created once and shared by all threads (the seed's static queue, made thread-safe):
// a context and an in-order profiling queue; compiled programs cached per kernel parameters
// (in memory and, for the driver's binaries, on disk: program_cache.cpp); and a pool of device
// buffers reused across calls. Devices sharing host memory (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL,
// integrated GPUs) read NumPy's memory in place and write the result in place, as the seed does
// with USM; discrete devices pipeline the copies (matmul_pipelined: page-locked staging, chunks of
// rows on several queues, results written straight into pooled page-locked arrays).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/backend.hpp"
#include "core/buffer_pool.hpp"
#include "core/env_knobs.hpp"
#include "core/host_block_pool.hpp"
#include "core/host_copy.hpp"
#include "core/layout.hpp"
#include "core/process.hpp"
#include "opencl/cl_api.hpp"
#include "opencl/gemm_params.hpp"
#include "opencl/program_cache.hpp"
#include "opencl/tuning_store.hpp"

namespace portmat::kernels {
extern const char gemm_cl[];         // kernels/gemm.cl, embedded by CMake (cmake/Embed.cmake)
extern const char gemm_direct_cl[];  // kernels/gemm_direct.cl (CPU runtimes: no local memory, no barriers)
extern const char casts_cl[];        // kernels/casts.cl: dtype casts and complex b's real form
}

namespace portmat::opencl {

// Integer knobs (docs/opencl.md, "Knobs"), read on every call as PORTMAT_OPENCL_PARAMS is.
using core::env_long;

namespace {

std::string device_string(const ClApi& cl, cl_device_id d, cl_device_info what) {
  std::size_t n = 0;
  if (cl.GetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  cl.GetDeviceInfo(d, what, n, s.data(), nullptr);
  s.resize(s.find('\0') == std::string::npos ? n : s.find('\0'));
  return s;
}

template <class T>
T device_value(const ClApi& cl, cl_device_id d, cl_device_info what) {
  T v{};
  cl.GetDeviceInfo(d, what, sizeof v, &v, nullptr);
  return v;
}

// A cl_mem; one of device memory is counted in its device's MemoryAccount (the cap,
// core/device_memory.hpp) while it lives (`account` null: host memory used in place).
class ClBuffer final : public core::Buffer {
 public:
  ClBuffer(const ClApi& cl, cl_mem mem, std::size_t bytes, core::MemoryAccount* account = nullptr)
      : cl_(cl), mem_(mem), bytes_(bytes), account_(account) {}
  ~ClBuffer() override {
    cl_.ReleaseMemObject(mem_);
    if (account_) account_->give(bytes_);
  }
  std::size_t bytes() const override { return bytes_; }
  cl_mem mem() const { return mem_; }

 private:
  const ClApi& cl_;
  cl_mem mem_;
  std::size_t bytes_;
  core::MemoryAccount* account_;
};

cl_mem mem_of(const core::Buffer* b) { return static_cast<const ClBuffer*>(b)->mem(); }

class OpenClDevice final : public core::Device {
 public:
  OpenClDevice(const ClApi& cl, cl_platform_id platform, cl_device_id dev, int index)
      : cl_(cl), platform_(platform), dev_(dev) {
    info_.backend = "opencl";
    info_.index = index;
    info_.name = device_string(cl, dev, CL_DEVICE_NAME);
    info_.vendor = device_string(cl, dev, CL_DEVICE_VENDOR);
    info_.driver_version = device_string(cl, dev, CL_DRIVER_VERSION);
    const auto type = device_value<cl_device_type>(cl, dev, CL_DEVICE_TYPE);
    info_.kind = (type & CL_DEVICE_TYPE_GPU) ? DeviceKind::gpu
                 : (type & CL_DEVICE_TYPE_CPU) ? DeviceKind::cpu
                                               : DeviceKind::other;
    info_.memory_bytes = device_value<cl_ulong>(cl, dev, CL_DEVICE_GLOBAL_MEM_SIZE);
    info_.host_unified = device_value<cl_bool>(cl, dev, CL_DEVICE_HOST_UNIFIED_MEMORY) == CL_TRUE;
    info_.compute_units = static_cast<int>(device_value<cl_uint>(cl, dev, CL_DEVICE_MAX_COMPUTE_UNITS));
    // The SIMD width: the native one (Intel's CPU runtime, which vectorizes across work-items, calls 1
    // its preferred width and 8 its native one on AVX2; PoCL says 8 for both).
    vector_bytes_ = 4 * static_cast<int>(std::max(device_value<cl_uint>(cl, dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT),
                                                  device_value<cl_uint>(cl, dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT)));
    info_.supports_f64 = device_value<cl_device_fp_config>(cl, dev, CL_DEVICE_DOUBLE_FP_CONFIG) != 0;
    max_alloc_ = device_value<cl_ulong>(cl, dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    local_mem_ = device_value<cl_ulong>(cl, dev, CL_DEVICE_LOCAL_MEM_SIZE);
    max_work_group_ = device_value<std::size_t>(cl, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    // NVIDIA's compute capability (cl_nv_device_attribute_query): cp.async needs 8.0 or later.
    if (info_.vendor.find("NVIDIA") != std::string::npos &&
        device_string(cl, dev, CL_DEVICE_EXTENSIONS).find("cl_nv_device_attribute_query") != std::string::npos) {
      constexpr cl_device_info kComputeCapabilityMajorNv = 0x4000;  // CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
      nv_cc_major_ = static_cast<int>(device_value<cl_uint>(cl, dev, kComputeCapabilityMajorNv));
    }
    where_ = info_.id() + " (" + info_.name + ")";
    tuned_ = std::make_unique<TunedParams>(tuning_key(info_));
    pool_.set_keep_bytes(info_.memory_bytes / 4);
  }

  ~OpenClDevice() override = default;  // devices live for the whole process (registry)

  const DeviceInfo& info() const override { return info_; }

  // float32, float64 where the device has it, and the wrapping unsigned products that carry every
  // integer dtype (gemm.cl, REAL_KIND).
  bool computes(DType t) const override {
    return t == DType::f32 || (t == DType::f64 && info_.supports_f64) || t == DType::u32 || t == DType::u64;
  }

  std::unique_ptr<core::Buffer> alloc(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    return create_buffer(bytes);
  }

  void upload(core::Buffer& dst, const void* src, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cl_check(cl_.EnqueueWriteBuffer(queue_, mem_of(&dst), CL_TRUE, 0, bytes, src, 0, nullptr, nullptr),
             "clEnqueueWriteBuffer", where_);
  }

  void download(void* dst, const core::Buffer& src, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cl_check(cl_.EnqueueReadBuffer(queue_, mem_of(&src), CL_TRUE, 0, bytes, dst, 0, nullptr, nullptr),
             "clEnqueueReadBuffer", where_);
  }

  double gemm(const core::DeviceMatrix& a, const core::DeviceMatrix& b,
              const core::DeviceMatrix& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cl_event started = nullptr;
    cl_event done = enqueue_gemm(mem_of(a.data), a, mem_of(b.data), b, mem_of(c.data), c, true, 1, 0, 0, 0,
                                 nullptr, 0, nullptr, &started);
    return wait_and_time_span(started, done);
  }

  void matmul_host(const core::HostMatrix& a, const core::HostMatrix& b,
                   const MatrixView& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    // Whatever happens below, no enqueued command may outlive this call: they read host memory.
    struct FinishGuard {
      const ClApi& cl;
      cl_command_queue q;
      ~FinishGuard() { cl.Finish(q); }
    } guard{cl_, queue_};
    if (shares_memory())
      matmul_in_place(a, b, c);
    else if (!pipeline_on() || !matmul_pipelined(a, b, c))
      matmul_copying(a, b, c);
  }

  // ---- device memory of the NumPy path (out-of-core, core/out_of_core.cpp) ---------------------
  // A discrete device's matmul_host holds a, b and c whole (matmul_pipelined, matmul_copying) and
  // no kernel scratch; one sharing host memory holds none (the arrays are used in place).
  std::uint64_t host_product_bytes(std::int64_t m, std::int64_t n, std::int64_t k, DType t) const override {
    if (shares_memory()) return 0;
    return dtype_size(t) * static_cast<std::uint64_t>(m * k + k * n + m * n);
  }
  // OpenCL reports no free memory: the global memory less what portmat holds here and a margin
  // (1/16: the driver's own, other programs), capped; the pool's free buffers count as free.
  std::uint64_t memory_for_products() override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t pooled = pool_.free_bytes(), held = core::room(memory.in_use(), pooled);
    std::uint64_t room = core::room(info_.memory_bytes - info_.memory_bytes / 16, held);
    if (const auto cap = device_memory_limit()) room = std::min(room, core::room(*cap, held));
    return room;
  }
  std::uint64_t max_buffer_bytes() const override { return max_alloc_; }
  void release_cached_memory() override {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.trim(0);
  }

  // Results of 1 MiB and more on a discrete device come from a pool of page-locked blocks
  // (mapped CL_MEM_ALLOC_HOST_PTR buffers, core::HostBlockPool), into which matmul_pipelined's
  // downloads write directly, without the host copy out of staging (python/portmat/_host_memory.py
  // asks for them). PORTMAT_OPENCL_PINNED_RESULTS=0 or PORTMAT_OPENCL_PIPELINE=0: ordinary arrays.
  std::shared_ptr<void> alloc_host(std::size_t bytes, bool reuse_only) override {
    if (bytes < (std::size_t(1) << 20) || shares_memory() || !pipeline_on() ||
        env_long("PORTMAT_OPENCL_PINNED_RESULTS", 1) == 0)
      return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    if (!result_pool_) make_result_pool();
    return result_pool_->get(bytes, reuse_only);
  }

  // A stack as one launch (enqueue_gemm's third dimension). Shared memory: the stacks are used
  // where they are, as in matmul_in_place (sparse stacks, whose matrices lie far apart, and
  // negative steps go product by product). Discrete memory: each stack crosses the bus densely in
  // one rectangular copy where its layout allows, else one per matrix.
  void matmul_batch_host(const core::HostMatrix& a, std::int64_t a_step, const core::HostMatrix& b,
                         std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                         std::int64_t count) override {
    const std::size_t es = dtype_size(c.dtype);
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;
    auto stack_span = [&](std::size_t one, std::int64_t step) {
      return step == 0 ? one : static_cast<std::size_t>((count - 1) * step) + one;
    };
    const std::int64_t ldc = M > 1 ? c.row_stride : N;
    const core::DeviceMatrix c_one{nullptr, 0, M, N, ldc, false, c.dtype};
    const std::size_t a_span = stack_span(a.span(), a_step), b_span = stack_span(b.span(), b_step),
                      c_span = stack_span(c_one.span(), c_step);
    const std::size_t dense = static_cast<std::size_t>((a_step ? count : 1) * M * K + (b_step ? count : 1) * K * N + count * M * N);
    const bool sparse = a_span + b_span + c_span > 2 * dense + 4096;
    const bool shared = shares_memory();
    // On a discrete device a stack of large products goes product by product through the
    // pipeline (matmul_pipelined), which overlaps their transfers; one launch gains nothing there.
    const bool one_by_one = !shared && pipeline_on() && 2.0 * M * N * K > kStackMaxFlops;
    if (count <= 1 || a_step < 0 || b_step < 0 || c_step <= 0 || (shared && sparse) || one_by_one ||
        std::max({a_span, b_span, c_span}) * es > max_alloc_)
      return core::Device::matmul_batch_host(a, a_step, b, b_step, c, c_step, count);
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    struct FinishGuard {  // no enqueued command may outlive this call: they use host memory
      const ClApi& cl;
      cl_command_queue q;
      ~FinishGuard() { cl.Finish(q); }
    } guard{cl_, queue_};
    if (shared) {
      auto wrap = [&](const void* p, std::size_t bytes, cl_mem_flags flags) {
        return create_buffer(bytes, flags | CL_MEM_USE_HOST_PTR, const_cast<void*>(p));
      };
      auto ab = wrap(a.data, a_span * es, CL_MEM_READ_ONLY), bb = wrap(b.data, b_span * es, CL_MEM_READ_ONLY);
      auto cb = wrap(c.data, c_span * es, CL_MEM_WRITE_ONLY);
      const core::DeviceMatrix da{ab.get(), 0, M, K, a.ld, a.col_major, a.dtype};
      const core::DeviceMatrix db{bb.get(), 0, K, N, b.ld, b.col_major, b.dtype};
      const core::DeviceMatrix dc{cb.get(), 0, M, N, ldc, false, c.dtype};
      const std::uintptr_t vector_bytes = 8 * es;  // the widest global vector (GVW <= 8)
      const bool aligned = reinterpret_cast<std::uintptr_t>(a.data) % vector_bytes == 0 &&
                           reinterpret_cast<std::uintptr_t>(b.data) % vector_bytes == 0;
      read_back(enqueue_gemm(ab->mem(), da, bb->mem(), db, cb->mem(), dc, aligned, count, a_step, b_step, c_step),
                cb->mem(), c_span * es, "result stack");
      return;
    }
    if (pipeline_on() && matmul_batch_pipelined(a, a_step, b, b_step, c, c_step, count)) return;
    // Discrete, unpipelined (PORTMAT_OPENCL_PIPELINE=0): dense device stacks (one matrix for a broadcast operand). A host stack of n matrices, `outer` lines of `inner` elements each (rows, or columns of a
    // column-major matrix), lines ld apart, matrices step apart <-> a dense device stack.
    auto rect = [&](bool write, cl_mem buf, void* host, std::int64_t n, std::int64_t outer, std::int64_t inner,
                    std::int64_t ld, std::int64_t step) {
      const std::size_t line = static_cast<std::size_t>(inner) * es, mat = line * outer;
      const std::size_t origin[3] = {0, 0, 0};
      const std::size_t ld_b = static_cast<std::size_t>(ld) * es, step_b = static_cast<std::size_t>(step) * es;
      const bool one_rect = n == 1 || (step_b >= ld_b * outer && step_b % ld_b == 0);
      if (one_rect) {  // the whole stack as one 3-D rectangle
        const std::size_t region[3] = {line, static_cast<std::size_t>(outer), static_cast<std::size_t>(n)};
        const std::size_t host_slice = n == 1 ? ld_b * outer : step_b;
        const cl_int err =
            write ? cl_.EnqueueWriteBufferRect(queue_, buf, CL_FALSE, origin, origin, region, line, mat, ld_b,
                                               host_slice, host, 0, nullptr, nullptr)
                  : cl_.EnqueueReadBufferRect(queue_, buf, CL_FALSE, origin, origin, region, line, mat, ld_b,
                                              host_slice, host, 0, nullptr, nullptr);
        cl_check(err, write ? "clEnqueueWriteBufferRect(stack)" : "clEnqueueReadBufferRect(stack)", where_);
        return;
      }
      for (std::int64_t i = 0; i < n; ++i) {  // matrices closer than their own lines: one by one
        const std::size_t borigin[3] = {0, 0, static_cast<std::size_t>(i)};
        const std::size_t region[3] = {line, static_cast<std::size_t>(outer), 1};
        void* h = static_cast<unsigned char*>(host) + i * step_b;
        const cl_int err =
            write ? cl_.EnqueueWriteBufferRect(queue_, buf, CL_FALSE, borigin, origin, region, line, mat, ld_b, 0,
                                               h, 0, nullptr, nullptr)
                  : cl_.EnqueueReadBufferRect(queue_, buf, CL_FALSE, borigin, origin, region, line, mat, ld_b, 0,
                                              h, 0, nullptr, nullptr);
        cl_check(err, write ? "clEnqueueWriteBufferRect(matrix)" : "clEnqueueReadBufferRect(matrix)", where_);
      }
    };
    const std::int64_t a_n = a_step ? count : 1, b_n = b_step ? count : 1;
    Lease la = lease(static_cast<std::size_t>(a_n * M * K) * es), lb = lease(static_cast<std::size_t>(b_n * K * N) * es);
    Lease lc = lease(static_cast<std::size_t>(count * M * N) * es);
    rect(true, la->mem(), const_cast<void*>(a.data), a_n, a.col_major ? K : M, a.col_major ? M : K, a.ld, a_step);
    rect(true, lb->mem(), const_cast<void*>(b.data), b_n, b.col_major ? N : K, b.col_major ? K : N, b.ld, b_step);
    const core::DeviceMatrix da{la.get(), 0, M, K, a.col_major ? M : K, a.col_major, a.dtype};
    const core::DeviceMatrix db{lb.get(), 0, K, N, b.col_major ? K : N, b.col_major, b.dtype};
    const core::DeviceMatrix dc{lc.get(), 0, M, N, N, false, c.dtype};
    cl_.ReleaseEvent(enqueue_gemm(la->mem(), da, lb->mem(), db, lc->mem(), dc, true, count, a_step ? M * K : 0,
                                  b_step ? K * N : 0, M * N));
    rect(false, lc->mem(), c.data, count, M, N, ldc, c_step);
    cl_check(cl_.Finish(queue_), "clFinish(stack)", where_);
  }

  // portmat's device arrays: a stack as one launch, waited for, in every dtype computes() names.
  // Complex: b's real form B'' built on the device (casts.cl, complex_b_*), then one real product
  // of a's and c's interleaved parts (a and c row-major), as the host path does (core/batch.hpp).
  void gemm_batch(const core::DeviceMatrix& a, std::int64_t a_step, const core::DeviceMatrix& b, std::int64_t b_step,
                  const core::DeviceMatrix& c, std::int64_t c_step, std::int64_t count) override {
    const bool complex = a.dtype == DType::c64 || a.dtype == DType::c128;
    const DType real = a.dtype == DType::c64 ? DType::f32 : a.dtype == DType::c128 ? DType::f64 : a.dtype;
    if (!computes(real))
      throw DeviceError(std::string("device-resident ") + dtype_name(a.dtype) + " products are not implemented on " + where_);
    if (complex && (a.col_major || b.col_major || c.col_major))
      throw std::invalid_argument("OpenCL complex gemm: a, b and c must be row-major");
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    if (!complex) {
      wait(enqueue_gemm(mem_of(a.data), a, mem_of(b.data), b, mem_of(c.data), c, true, count, a_step, b_step, c_step));
      return;
    }
    const std::int64_t M = a.rows, K = a.cols, N = b.cols, b_count = b_step == 0 ? 1 : count;
    const std::size_t rs = dtype_size(real);
    Lease bpp = lease(static_cast<std::size_t>(b_count * 4 * K * N) * rs);
    cl_kernel kb = casts_kernel(real == DType::f32 ? "complex_b_f32" : "complex_b_f64");
    const cl_mem bm = mem_of(b.data), om = bpp->mem();
    const cl_long b_off = static_cast<cl_long>(b.offset), ldb = b.ld, bst = b_step, k64 = K, n64 = N;
    const void* args[] = {&bm, &b_off, &ldb, &bst, &om, &k64, &n64};
    const std::size_t sizes[] = {sizeof bm, sizeof b_off, sizeof ldb, sizeof bst, sizeof om, sizeof k64, sizeof n64};
    for (cl_uint i = 0; i < 7; ++i) cl_check(cl_.SetKernelArg(kb, i, sizes[i], args[i]), "clSetKernelArg(complex_b)", where_);
    const std::size_t global[3] = {static_cast<std::size_t>(N), static_cast<std::size_t>(K),
                                   static_cast<std::size_t>(b_count)};
    cl_check(cl_.EnqueueNDRangeKernel(queue_, kb, 3, nullptr, global, nullptr, 0, nullptr, nullptr),
             "clEnqueueNDRangeKernel(complex_b)", where_);
    const core::DeviceMatrix ar{a.data, 2 * a.offset, M, 2 * K, 2 * a.ld, false, real};
    const core::DeviceMatrix br{bpp.get(), 0, 2 * K, 2 * N, 2 * N, false, real};
    const core::DeviceMatrix cr{c.data, 2 * c.offset, M, 2 * N, 2 * c.ld, false, real};
    wait(enqueue_gemm(mem_of(a.data), ar, bpp->mem(), br, mem_of(c.data), cr, true, count, 2 * a_step,
                      b_step == 0 ? 0 : 4 * K * N, 2 * c_step));
  }

  // Device arrays change dtype here: one work-item per element (casts.cl), waited for.
  void cast(const core::Buffer& src, DType from, const core::Buffer& dst, DType to, std::int64_t count) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cl_kernel k = casts_kernel("cast_elements");
    const cl_mem sm = mem_of(&src), dm = mem_of(&dst);
    const cl_int f = static_cast<cl_int>(from), t = static_cast<cl_int>(to);
    const cl_long n = count;
    const void* args[] = {&sm, &f, &dm, &t, &n};
    const std::size_t sizes[] = {sizeof sm, sizeof f, sizeof dm, sizeof t, sizeof n};
    for (cl_uint i = 0; i < 5; ++i) cl_check(cl_.SetKernelArg(k, i, sizes[i], args[i]), "clSetKernelArg(cast)", where_);
    const std::size_t local = 64, global = static_cast<std::size_t>((count + 63) / 64) * 64;
    cl_event ev = nullptr;
    cl_check(cl_.EnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, &local, 0, nullptr, &ev),
             "clEnqueueNDRangeKernel(cast)", where_ + " from " + dtype_name(from) + " to " + dtype_name(to));
    wait(ev);
  }

  // Device-resident stacks: one launch per stack, the kernels' own (profiled) times summed.
  double gemm_batch_repeated(const core::DeviceMatrix& a, std::int64_t a_step, const core::DeviceMatrix& b,
                             std::int64_t b_step, const core::DeviceMatrix& c, std::int64_t c_step,
                             std::int64_t count, int launches) override {
    if (a.dtype != DType::f32 && a.dtype != DType::f64)
      return core::Device::gemm_batch_repeated(a, a_step, b, b_step, c, c_step, count, launches);
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    double s = 0;
    for (int l = 0; l < launches; ++l) {
      cl_event started = nullptr;  // a stack of one may take the padded path (enqueue_gemm)
      const cl_event done = enqueue_gemm(mem_of(a.data), a, mem_of(b.data), b, mem_of(c.data), c, true, count, a_step,
                                         b_step, c_step, nullptr, 0, nullptr, &started);
      const double t = wait_and_time_span(started, done);
      if (t < 0) return -1.0;
      s += t;
    }
    return s / launches;
  }

 private:
  // ---- set-up, once ------------------------------------------------------------------------------
  void ready() {
    if (queue_) return;
    cl_int err = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     reinterpret_cast<cl_context_properties>(platform_), 0};
    context_ = cl_.CreateContext(props, 1, &dev_, nullptr, nullptr, &err);
    cl_check(err, "clCreateContext", where_);
    cl_command_queue q = cl_.CreateCommandQueue(context_, dev_, CL_QUEUE_PROFILING_ENABLE, &err);
    cl_check(err, "clCreateCommandQueue", where_);
    queue_ = q;
  }

  // ---- memory ------------------------------------------------------------------------------------
  std::unique_ptr<ClBuffer> create_buffer(std::size_t bytes, cl_mem_flags flags = CL_MEM_READ_WRITE,
                                          void* host = nullptr) {
    if (bytes > max_alloc_)
      throw OutOfDeviceMemory("clCreateBuffer on " + where_ + ": " + std::to_string(bytes) +
                              " bytes exceed the device's largest allocation (" +
                              std::to_string(max_alloc_) + " bytes)");
    // Device memory (not host memory used in place) counts against portmat's cap where the device
    // is run as a discrete one: past it, the pool's free buffers go first, then OutOfDeviceMemory.
    core::MemoryAccount* account = host ? nullptr : &memory;
    if (account) {
      const bool enforce = !shares_memory();
      if (enforce && memory.over_limit(bytes)) sweep_padded();  // padded copies done with go to the pool
      if (enforce && memory.over_limit(bytes) && !pool_.empty()) pool_.trim(0);
      memory.take(bytes, enforce, where_);
    }
    cl_int err = CL_SUCCESS;
    cl_mem m = cl_.CreateBuffer(context_, flags, std::max<std::size_t>(bytes, 1), host, &err);
    if (err != CL_SUCCESS && !host && !pool_.empty()) {  // give cached buffers back and retry
      pool_.trim(0);
      m = cl_.CreateBuffer(context_, flags, std::max<std::size_t>(bytes, 1), host, &err);
    }
    if (err == CL_OUT_OF_RESOURCES) err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    if (err != CL_SUCCESS && account) account->give(bytes);
    cl_check(err, "clCreateBuffer", where_ + " for " + std::to_string(bytes) + " bytes");
    return std::make_unique<ClBuffer>(cl_, m, bytes, account);
  }

  using Lease = core::BufferPool<ClBuffer>::Lease;

  Lease lease(std::size_t bytes) {
    return pool_.lease(bytes, [&] { return create_buffer(bytes); });
  }

  // ---- kernels -----------------------------------------------------------------------------------
  // An NDRange dimension of `items` work-items rounded up to whole work-groups of `group`.
  static std::size_t whole_groups(std::int64_t items, int group) {
    return static_cast<std::size_t>((items + group - 1) / group) * static_cast<std::size_t>(group);
  }

  // The work-items of one product's launch of gemm.cl (a work-group per NWG x MWG block) or
  // gemm_direct.cl (a work-item per direct_cols() columns and MWG rows, in whole work-groups):
  // along c's columns (dimension 0, ndimc a group) and rows (dimension 1, mdimc a group).
  struct GemmGrid {
    std::size_t cols, rows;
    std::int64_t groups(const GemmParams& p) const {
      return static_cast<std::int64_t>(cols / static_cast<std::size_t>(p.ndimc) * (rows / static_cast<std::size_t>(p.mdimc)));
    }
  };
  static GemmGrid gemm_grid(const GemmParams& p, std::int64_t M, std::int64_t N) {
    if (p.direct)
      return {whole_groups((N + p.direct_cols() - 1) / p.direct_cols(), p.ndimc),
              whole_groups((M + p.mwg - 1) / p.mwg, p.mdimc)};
    return {static_cast<std::size_t>((N + p.nwg - 1) / p.nwg) * p.ndimc,
            static_cast<std::size_t>((M + p.mwg - 1) / p.mwg) * p.mdimc};
  }

  // `packed`: gemm_direct.cl's program with PACKED=1, whose gemm reads the panels its pack_a and
  // pack_b write; `name` picks one of the three.
  cl_kernel kernel_for(const GemmParams& p, bool a_col, bool b_col, bool edges, int gvw, DType dtype,
                       bool packed = false, const char* name = "gemm") {
    if (auto why = p.invalid_reason(); !why.empty())
      throw std::invalid_argument(std::string(std::getenv("PORTMAT_OPENCL_PARAMS") ? "PORTMAT_OPENCL_PARAMS: " : "") +
                                  "OpenCL gemm parameters " + p.str() + ": " + why);
    if (static_cast<std::size_t>(p.threads()) > max_work_group_)
      throw std::invalid_argument("OpenCL gemm parameters " + p.str() + ": " +
                                  std::to_string(p.threads()) + " work-items exceed " + where_ +
                                  "'s limit of " + std::to_string(max_work_group_));
    if (p.local_bytes(dtype_size(dtype)) > local_mem_)
      throw std::invalid_argument("OpenCL gemm parameters " + p.str() + " need " +
                                  std::to_string(p.local_bytes(dtype_size(dtype))) +
                                  " bytes of local memory; " + where_ + " has " +
                                  std::to_string(local_mem_));
    if (p.maxregs && !p.direct && info_.vendor.find("NVIDIA") == std::string::npos)
      throw std::invalid_argument("OpenCL gemm parameters " + p.str() + ": MAXREGS is an option of NVIDIA's "
                                  "compiler; " + where_ + " is " + info_.vendor + "'s");
    if (p.async && !p.direct && !cp_async())
      throw std::invalid_argument("OpenCL gemm parameters " + p.str() + ": ASYNC (cp.async through inline PTX) "
                                  "needs NVIDIA's driver on compute capability 8.0 or later; " + where_ +
                                  " is " + info_.vendor + "'s" +
                                  (info_.vendor.find("NVIDIA") != std::string::npos ? ", compute capability " +
                                   std::to_string(nv_cc_major_) : std::string()));
    const int kind = dtype == DType::f64 ? 1 : dtype == DType::u32 ? 2 : dtype == DType::u64 ? 3 : 0;
    const std::string options = p.defines() + " -DREAL_KIND=" + std::to_string(kind) + " -DA_COL_MAJOR=" +
                                (a_col ? "1" : "0") + " -DB_COL_MAJOR=" + (b_col ? "1" : "0") +
                                " -DEDGES=" + (edges ? "1" : "0") + " -DGVW=" + std::to_string(gvw) +
                                (p.maxregs && !p.direct ? " -cl-nv-maxrregcount=" + std::to_string(p.maxregs) : "") +
                                (packed ? " -DPACKED=1" : "") + extra_build_options();
    auto it = kernels_.find(options + ":" + name);
    if (it != kernels_.end()) return it->second;
    // Driver compilers (PoCL's LLVM) recurse deeply: never on the caller's stack, which may be a
    // small thread's.
    cl_program prog = core::on_big_stack(
        [&] { return build_program(cl_, context_, dev_, where_, p.direct ? kernels::gemm_direct_cl : kernels::gemm_cl,
                                   options); });
    std::unique_ptr<std::remove_pointer_t<cl_program>, decltype(cl_.ReleaseProgram)> hold(prog, cl_.ReleaseProgram);
    static constexpr const char* kNames[] = {"gemm", "pack_a", "pack_b"};
    for (std::size_t i = 0; i < (packed ? 3u : 1u); ++i) {
      const char* kn = kNames[i];
      cl_int err = CL_SUCCESS;
      cl_kernel k = cl_.CreateKernel(prog, kn, &err);  // each kernel keeps the program alive
      cl_check(err, (std::string("clCreateKernel(") + kn + ")").c_str(), where_);
      kernels_.emplace(options + ":" + kn, k);
    }
    return kernels_.at(options + ":" + name);
  }

  // A kernel of casts.cl (the program built once per device, on a big stack as the gemm programs are).
  cl_kernel casts_kernel(const char* name) {
    auto it = kernels_.find(std::string("casts:") + name);
    if (it != kernels_.end()) return it->second;
    if (!casts_program_)
      casts_program_ = core::on_big_stack([&] { return build_program(cl_, context_, dev_, where_, kernels::casts_cl, ""); });
    cl_int err = CL_SUCCESS;
    cl_kernel k = cl_.CreateKernel(casts_program_, name, &err);
    cl_check(err, (std::string("clCreateKernel(") + name + ")").c_str(), where_);
    kernels_.emplace(std::string("casts:") + name, k);
    return k;
  }

  // The kernel parameters of an (M x K) @ (K x N) product (or a stack of count): the shipped
  // defaults, or what `portmat tune` stored for this device and driver (tuning_store.hpp).
  // `untransposed`: a column-major a and a row-major b (choose_params).
  GemmParams params_for(DType dtype, std::int64_t M, std::int64_t N, std::int64_t count, bool untransposed = false) {
    const std::optional<GemmParams> tuned = tuned_->get(dtype_size(dtype));
    return choose_params(traits(), dtype, static_cast<long>(M), static_cast<long>(N), static_cast<long>(count),
                         tuned ? &*tuned : nullptr, untransposed);
  }

  // What choose_params needs of this device; direct_ok = false: gemm.cl only.
  DeviceTraits traits(bool direct_ok = true) const {
    return {info_.kind, info_.vendor, info_.compute_units, vector_bytes_, direct_ok, cp_async()};
  }
  // gemm.cl's ASYNC can run: NVIDIA's driver on compute capability 8.0 or later (cp.async).
  bool cp_async() const { return nv_cc_major_ >= 8; }

  std::pair<std::string, std::string> tuning_store() const override { return {tuning_key(info_), tuning_path()}; }
  std::string kernel_params(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) override {
    const GemmParams p = params_for(dtype, m, n, 1);
    const std::optional<GemmParams> t = transposed_params(p, dtype, m, n, k);
    return (t ? *t : p).str();
  }

  // Enqueues c = a @ b on buffers holding the matrices; returns the kernel's event. On `on` (the
  // device's queue_ when null) after the events `after` (the pipelined path's other queues).
  // `bases_aligned`: the buffers start on a GVW-vector boundary (always true for our allocations;
  // NumPy's memory used in place may start anywhere a float may).
  // A stack of `count` products: matrix i of each operand `x_step` elements after matrix i - 1
  // (0: the same matrix for every i), one launch (the NDRange's third dimension).
  // A large product with edges on a discrete device runs on copies padded to whole blocks
  // (enqueue_gemm_padded): the returned event is then the last of several commands, and `started`,
  // when given, receives the first (the caller releases it); it stays null otherwise.
  cl_event enqueue_gemm(cl_mem am, const core::DeviceMatrix& a, cl_mem bm,
                        const core::DeviceMatrix& b, cl_mem cm, const core::DeviceMatrix& c,
                        bool bases_aligned = true, std::int64_t count = 1, std::int64_t a_step = 0,
                        std::int64_t b_step = 0, std::int64_t c_step = 0, cl_command_queue on = nullptr,
                        cl_uint n_after = 0, const cl_event* after = nullptr, cl_event* started = nullptr,
                        const GemmParams* forced = nullptr) {
    const cl_int M = static_cast<cl_int>(a.rows), N = static_cast<cl_int>(b.cols),
                 K = static_cast<cl_int>(a.cols);
    GemmParams p = forced ? *forced : params_for(a.dtype, M, N, count, a.col_major && !b.col_major);
    if (p.direct && std::max({a.span(), b.span(), c.span()}) > 2147483647u)  // its int indices (gemm_direct.cl)
      p = choose_params(traits(/*direct_ok=*/false), a.dtype, M, N, count);
    if (!forced && count == 1 && !c.col_major && !splitting_)
      if (const std::int64_t slices = split_k_slices(p, M, N, K, dtype_size(a.dtype)); slices > 1)
        if (cl_event ev = enqueue_gemm_split_k(slices, am, a, bm, b, cm, c, bases_aligned, on ? on : queue_, n_after,
                                               after, started))
          return ev;
    if (p.direct && p.vecw > 1 && count == 1 && !forced && pack_direct(p, M, N, K))
      if (cl_event ev = enqueue_gemm_packed(p, am, a, bm, b, cm, c, on ? on : queue_, n_after, after, started))
        return ev;
    if (!forced && count == 1 && !a.col_major && !b.col_major)
      if (const std::optional<GemmParams> pt = transposed_params(p, a.dtype, M, N, K))
        if (cl_event ev = enqueue_gemm_padded(*pt, am, a, bm, b, cm, c, bases_aligned, on ? on : queue_, n_after,
                                              after, started, /*transpose_a=*/true))
          return ev;
    const bool edges = !p.direct && (M % p.mwg != 0 || N % p.nwg != 0 || K % p.kwg != 0);
    if (edges && !forced && pad_to_blocks(M, N, K, count))
      if (cl_event ev = enqueue_gemm_padded(p, am, a, bm, b, cm, c, bases_aligned, on ? on : queue_, n_after, after,
                                            started))
        return ev;
    // Vector loads read whole aligned vectors: every row start must be a multiple of GVW.
    auto aligned = [&](const core::DeviceMatrix& x, std::int64_t step, int w) {
      return x.ld % w == 0 && x.offset % static_cast<std::size_t>(w) == 0 && step % w == 0;
    };
    const int gvw = !p.direct && !edges && bases_aligned && aligned(a, a_step, p.gvw) && aligned(b, b_step, p.gvw)
                        ? p.gvw
                        : 1;
    cl_kernel k = kernel_for(p, a.col_major, b.col_major, edges, gvw, a.dtype);
    const cl_long a_off = static_cast<cl_long>(a.offset), b_off = static_cast<cl_long>(b.offset),
                  c_off = static_cast<cl_long>(c.offset);
    for (std::int64_t ld : {a.ld, b.ld, c.ld})
      if (ld > 2147483647)  // the kernel's leading dimensions are 32-bit
        throw std::invalid_argument("OpenCL gemm on " + where_ + ": a leading dimension of " +
                                    std::to_string(ld) + " elements exceeds 2**31 - 1");
    const cl_int lda = static_cast<cl_int>(a.ld), ldb = static_cast<cl_int>(b.ld),
                 ldc = static_cast<cl_int>(c.ld);
    const cl_long a_stride = a_step, b_stride = b_step, c_stride = c_step;
    const void* args[] = {&M, &N, &K, &am, &a_off, &lda, &bm, &b_off, &ldb, &cm, &c_off, &ldc,
                          &a_stride, &b_stride, &c_stride};
    const std::size_t sizes[] = {sizeof M, sizeof N, sizeof K, sizeof am, sizeof a_off, sizeof lda,
                                 sizeof bm, sizeof b_off, sizeof ldb, sizeof cm, sizeof c_off,
                                 sizeof ldc, sizeof a_stride, sizeof b_stride, sizeof c_stride};
    for (cl_uint i = 0; i < 15; ++i)
      cl_check(cl_.SetKernelArg(k, i, sizes[i], args[i]), "clSetKernelArg(gemm)", where_);
    const std::size_t local[3] = {static_cast<std::size_t>(p.ndimc),
                                  static_cast<std::size_t>(p.mdimc), 1};
    const GemmGrid grid = gemm_grid(p, M, N);
    const std::size_t global[3] = {grid.cols, grid.rows, static_cast<std::size_t>(count)};
    cl_event ev = nullptr;
    cl_int err = cl_.EnqueueNDRangeKernel(on ? on : queue_, k, 3, nullptr, global, local, n_after, after, &ev);
    cl_check(err, "clEnqueueNDRangeKernel(gemm)",
             where_ + " for " + (count > 1 ? std::to_string(count) + " x " : std::string()) + "(" +
                 std::to_string(M) + "x" + std::to_string(K) + ") @ (" +
                 std::to_string(K) + "x" + std::to_string(N) + ") with " + p.str());
    return ev;
  }

  double wait_and_time(cl_event ev) {
    std::unique_ptr<std::remove_pointer_t<cl_event>, decltype(cl_.ReleaseEvent)> hold(ev, cl_.ReleaseEvent);
    cl_check(cl_.WaitForEvents(1, &ev), "clWaitForEvents(gemm)", where_);
    cl_ulong t0 = 0, t1 = 0;
    if (cl_.GetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr) != CL_SUCCESS ||
        cl_.GetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr) != CL_SUCCESS)
      return -1.0;  // the driver keeps no profile: callers fall back to host time
    return static_cast<double>(t1 - t0) * 1e-9;
  }

  void wait(cl_event ev) { wait_and_time(ev); }

  // Seconds from the start of `first` to the end of `last` (both released), after waiting for last;
  // a null `first` (enqueue_gemm's `started` when one command did it all) times `last` alone.
  double wait_and_time_span(cl_event first, cl_event last) {
    if (!first) return wait_and_time(last);
    std::unique_ptr<std::remove_pointer_t<cl_event>, decltype(cl_.ReleaseEvent)> hold_first(first, cl_.ReleaseEvent),
        hold_last(last, cl_.ReleaseEvent);
    cl_check(cl_.WaitForEvents(1, &last), "clWaitForEvents(gemm)", where_);  // in order: first is done too
    cl_ulong t0 = 0, t1 = 0;
    if (cl_.GetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr) != CL_SUCCESS ||
        cl_.GetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr) != CL_SUCCESS)
      return -1.0;
    return static_cast<double>(t1 - t0) * 1e-9;
  }

  // ---- whole blocks for products with edges ------------------------------------------------------
  // gemm.cl's edge code (clamped scalar loads, guarded stores, a register tile the compiler cannot
  // keep within 128 registers) ran at 0.42x of its whole-block code on the H200 (n = 4095: 20.4
  // against 47.3 TFLOP/s at 4096; 28.7 with MAXREGS = 128). So on a discrete device a large product
  // with edges runs on copies of its operands padded with zeros to whole blocks (casts.cl's
  // copy_2d_b4 / _b8: one pass each, only for the operands that need it) into a padded result,
  // whose block is copied back: a few passes over memory against the kernel's n^3 work.
  // PORTMAT_OPENCL_PAD: 0 never, 1 whenever there are edges (the tests), else the rule below.
  static constexpr double kPadMinMacs = 5e8;  // below, the copies' launches cost more than they save
  bool pad_to_blocks(std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t count) const {
    if (count != 1) return false;  // (edges, the caller's condition, already exclude the direct kernel)
    const long knob = env_long("PORTMAT_OPENCL_PAD", -1);
    if (knob >= 0) return knob > 0;
    return !shares_memory() && static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kPadMinMacs;
  }

  // ---- a row-major a transposed first -----------------------------------------------------------
  // gemm.cl reads a row-major a across its rows into local memory (through registers: 4-byte
  // stores of a 16-byte load), while a column-major a, like a row-major b, goes in as it lies, by
  // cp.async on NVIDIA's driver (the ring, ASYNC). H200, 2026-12-03, float32 kernel-only: 47.5 /
  // 48.1 TFLOP/s at n = 4096 / 8192 with a row-major a against 49.4 / 50.2 with a column-major one
  // (docs/opencl.md). A transposed copy of a (casts.cl's transpose_2d, padded to whole blocks in the
  // same pass) costs two passes over a's M x K elements at memory speed, and saves a fraction g
  // (about 4% on the H200) of the product, which is 2 M N K flops: so it pays when
  //   g * 2 M N K / F > 2 M K e / BW + L,   i.e. N > e F / (g BW) (+ L),
  // with F the kernel's rate, BW the copy's, e the element size and L a launch. That depends on N
  // alone (and on the product being large enough to hide L): kTransposeMinN, kTransposeMinMacs.
  // TRANSA (GemmParams::transa): 0 never, 1 by this rule on a discrete device, 2 always (tests).
  static constexpr std::int64_t kTransposeMinN = 2048;
  static constexpr double kTransposeMinMacs = 4e9;
  bool transpose_a_first(const GemmParams& p, std::int64_t M, std::int64_t N, std::int64_t K) const {
    if (p.direct || p.transa == 0) return false;
    if (p.transa == 2) return true;
    return !shares_memory() && N >= kTransposeMinN &&
           static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kTransposeMinMacs;
  }
  // The parameters a row-major-operand product with `p` runs in when its a is copied column-major
  // first (those of that layout), or none when it is not: enqueue_gemm and kernel_params agree.
  std::optional<GemmParams> transposed_params(const GemmParams& p, DType dtype, std::int64_t M, std::int64_t N,
                                              std::int64_t K) {
    if (!transpose_a_first(p, M, N, K)) return std::nullopt;
    GemmParams t = params_for(dtype, M, N, 1, /*untransposed=*/true);
    if (t.direct) return std::nullopt;
    return t;
  }

  // The padded copies are leased from the device's pool and held here until the product's last
  // command is done; then they go back to the pool (swept at each padded product, and before an
  // allocation would pass portmat's device-memory cap), so nothing is reused while a queue may
  // still read or write it, and nothing stays held for the process's life.
  struct PadPending {
    cl_event done;  // retained
    std::vector<Lease> buffers;
  };
  std::list<PadPending> pad_pending_;

  void sweep_padded() {
    for (auto it = pad_pending_.begin(); it != pad_pending_.end();) {
      cl_int status = CL_COMPLETE;
      cl_.GetEventInfo(it->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
      if (status > CL_COMPLETE) {  // queued, submitted or running (errors are < 0: done too)
        ++it;
        continue;
      }
      cl_.ReleaseEvent(it->done);
      it = pad_pending_.erase(it);
    }
  }

  // casts.cl's copy_2d (dst's block = src's block, zeros beyond), or with `transpose` its
  // transpose_2d (dst's dst_rows x dst_cols block = src's rows x cols block transposed, zeros beyond).
  cl_event enqueue_copy_2d(cl_command_queue q, cl_mem src, std::size_t src_off, std::int64_t src_ld,
                           std::int64_t rows, std::int64_t cols, cl_mem dst, std::size_t dst_off,
                           std::int64_t dst_ld, std::int64_t dst_rows, std::int64_t dst_cols, std::size_t es,
                           cl_uint n_after, const cl_event* after, bool transpose = false) {
    cl_kernel k = casts_kernel(transpose ? (es == 8 ? "transpose_2d_b8" : "transpose_2d_b4")
                                         : (es == 8 ? "copy_2d_b8" : "copy_2d_b4"));
    const cl_long so = static_cast<cl_long>(src_off), sl = src_ld, r = rows, cc = cols,
                  dof = static_cast<cl_long>(dst_off), dl = dst_ld, dr = dst_rows, dcl = dst_cols;
    const void* args[] = {&src, &so, &sl, &r, &cc, &dst, &dof, &dl, &dr, &dcl};
    const std::size_t sizes[] = {sizeof src, sizeof so, sizeof sl, sizeof r, sizeof cc,
                                 sizeof dst, sizeof dof, sizeof dl, sizeof dr, sizeof dcl};
    for (cl_uint i = 0; i < 10; ++i) cl_check(cl_.SetKernelArg(k, i, sizes[i], args[i]), "clSetKernelArg(copy_2d)", where_);
    // transpose_2d: tile x tile tiles (x along dst's rows, y along its columns) of tile x tile_rows
    // work-items (casts.cl's TRANSPOSE_TILE, TRANSPOSE_ROWS).
    constexpr std::int64_t tile = 32, tile_rows = 8;
    const std::size_t local[2] = {static_cast<std::size_t>(transpose ? tile : 64),
                                  static_cast<std::size_t>(transpose ? tile_rows : 1)};
    const std::size_t global[2] = {
        static_cast<std::size_t>(transpose ? (dst_rows + tile - 1) / tile * tile : (dst_cols + 63) / 64 * 64),
        static_cast<std::size_t>(transpose ? (dst_cols + tile - 1) / tile * tile_rows : dst_rows)};
    cl_event ev = nullptr;
    cl_check(cl_.EnqueueNDRangeKernel(q, k, 2, nullptr, global, local, n_after, after, &ev),
             "clEnqueueNDRangeKernel(copy_2d)", where_);
    return ev;
  }

  // ---- split-K: a small result over a long k -----------------------------------------------------
  // A product whose result is far fewer work-groups than the device has compute units runs all of k
  // in each of them, one after another: (1 x 2^20) @ (2^20 x 1) took 150 ms NumPy in and out on the
  // H200 through NVIDIA's driver (one work-group; the CUDA backend 0.21 ms; session 28). So k is
  // cut into slices, each a product of its own: the whole slices are one batched launch (a's and
  // b's slices a stack with steps along k) into a workspace, a shorter last slice a launch of its
  // own, and casts.cl's sum_slices adds them into c in slice order (the same bits every run).
  // Slices: enough for two work-groups a compute unit, each at least kSplitMinSliceK deep and a
  // multiple of kSplitSliceAlign (whole KWG blocks, aligned vector loads), the workspace at most
  // kSplitMaxBytes. Only on GPUs, and only where the result's work-groups are at most one in
  // kSplitIdle of the compute units: CPU runtimes ran a stack's matrices one after another (Intel's,
  // 2-core machine: 4 x (1 x 262144) @ (262144 x 1) 15.7 ms against 5.9 for one, and the dot
  // product of 2^20 split in 4 10-12 ms against 11.4 unsplit), and on a GPU the rule is kept to
  // products that leave it mostly idle. Measured on the H200 (session 30, docs/opencl.md): the dot
  // product 150 -> 0.71 ms, (16 x 65536) @ (65536 x 16) 11.0 -> 0.53 ms, NumPy in and out.
  // PORTMAT_OPENCL_SPLIT_K: 0 never, 1 the rule, 2 wherever k makes two slices (the tests).
  static constexpr std::int64_t kSplitMinSliceK = 1024, kSplitSliceAlign = 64, kSplitIdle = 4;
  static constexpr double kSplitMaxBytes = 64 << 20;
  bool splitting_ = false;  // inside enqueue_gemm_split_k: its slices are not split again

  std::int64_t split_k_slices(const GemmParams& p, std::int64_t M, std::int64_t N, std::int64_t K,
                              std::size_t es) const {
    const long knob = env_long("PORTMAT_OPENCL_SPLIT_K", 1);
    if (knob == 2) return K >= 2 * kSplitSliceAlign ? std::min<std::int64_t>(K / kSplitSliceAlign, 4) : 1;
    if (knob != 1 || info_.kind != DeviceKind::gpu || K < 2 * kSplitMinSliceK) return 1;
    const std::int64_t groups = gemm_grid(p, M, N).groups(p);
    const std::int64_t want = (2 * static_cast<std::int64_t>(info_.compute_units) + groups - 1) / std::max<std::int64_t>(groups, 1);
    const double room = kSplitMaxBytes / (static_cast<double>(es) * static_cast<double>(M) * static_cast<double>(N));
    const std::int64_t slices = std::min({want, K / kSplitMinSliceK, static_cast<std::int64_t>(std::min(room, 1e9))});
    return slices >= 2 && want >= 2 * kSplitIdle ? slices : 1;
  }

  cl_event enqueue_gemm_split_k(std::int64_t slices, cl_mem am, const core::DeviceMatrix& a, cl_mem bm,
                                const core::DeviceMatrix& b, cl_mem cm, const core::DeviceMatrix& c, bool bases_aligned,
                                cl_command_queue q, cl_uint n_after, const cl_event* after, cl_event* started) {
    const std::int64_t M = a.rows, N = b.cols, K = a.cols;
    const char* sum = a.dtype == DType::f32   ? "sum_slices_f32"
                      : a.dtype == DType::f64 ? "sum_slices_f64"
                      : a.dtype == DType::u32 ? "sum_slices_u32"
                      : a.dtype == DType::u64 ? "sum_slices_u64"
                                              : nullptr;
    if (!sum) return nullptr;
    const std::int64_t ks = ((K + slices - 1) / slices + kSplitSliceAlign - 1) / kSplitSliceAlign * kSplitSliceAlign;
    const std::int64_t full = K / ks, rest = K - full * ks, parts = full + (rest > 0 ? 1 : 0);
    if (parts < 2) return nullptr;
    sweep_padded();
    PadPending held{nullptr, {}};
    try {
      held.buffers.emplace_back(lease(static_cast<std::size_t>(parts * M * N) * dtype_size(a.dtype)));
    } catch (const OutOfDeviceMemory&) {
      return nullptr;  // the lease goes back to the pool
    }
    ClBuffer* w = held.buffers[0].get();
    struct Splitting {
      bool& flag;
      ~Splitting() { flag = false; }
    } splitting{splitting_ = true};
    // Slice s of a is its columns [s ks, s ks + ks), of b its rows: steps along k in each layout.
    const std::int64_t a_step = a.col_major ? ks * a.ld : ks, b_step = b.col_major ? ks : ks * b.ld;
    core::DeviceMatrix as = a, bs = b;
    as.cols = ks, bs.rows = ks;
    std::vector<cl_event> evs;  // in queue order; the first waits for `after`
    evs.push_back(enqueue_gemm(am, as, bm, bs, w->mem(), core::DeviceMatrix{w, 0, M, N, N, false, c.dtype},
                               bases_aligned, full, a_step, b_step, M * N, q, n_after, after));
    if (rest > 0) {
      as.cols = rest, bs.rows = rest;
      as.offset += static_cast<std::size_t>(full * a_step), bs.offset += static_cast<std::size_t>(full * b_step);
      evs.push_back(enqueue_gemm(am, as, bm, bs, w->mem(),
                                 core::DeviceMatrix{w, static_cast<std::size_t>(full * M * N), M, N, N, false, c.dtype},
                                 bases_aligned, 1, 0, 0, 0, q));
    }
    cl_kernel k = casts_kernel(sum);
    const cl_mem wm = w->mem();
    const cl_long n_parts = parts, m64 = M, n64 = N, c_off = static_cast<cl_long>(c.offset), ldc = c.ld;
    const void* args[] = {&wm, &n_parts, &m64, &n64, &cm, &c_off, &ldc};
    const std::size_t sizes[] = {sizeof wm, sizeof n_parts, sizeof m64, sizeof n64, sizeof cm, sizeof c_off, sizeof ldc};
    for (cl_uint i = 0; i < 7; ++i) cl_check(cl_.SetKernelArg(k, i, sizes[i], args[i]), "clSetKernelArg(sum_slices)", where_);
    const std::size_t global[2] = {static_cast<std::size_t>(N), static_cast<std::size_t>(M)};
    cl_event done = nullptr;
    cl_check(cl_.EnqueueNDRangeKernel(q, k, 2, nullptr, global, nullptr, 0, nullptr, &done),
             "clEnqueueNDRangeKernel(sum_slices)", where_);
    for (std::size_t i = 1; i < evs.size(); ++i) cl_.ReleaseEvent(evs[i]);
    if (started)
      *started = evs.front();
    else
      cl_.ReleaseEvent(evs.front());
    held.done = done;
    cl_.RetainEvent(held.done);
    pad_pending_.push_back(std::move(held));
    return done;
  }

  // ---- packed panels for the direct kernel on CPU runtimes ---------------------------------------
  // gemm_direct.cl's vector form reads B down a column strip (one cache line a row, a page every
  // few rows) and A along MWG rows one leading dimension apart (at n = 4096 in one L1 set), so
  // from n = 2048 on PoCL it ran 42-49 GFLOP/s against 74-83 at 1024. Copied first into panels
  // (pack_a: MWG rows k-major; pack_b: TILE_N columns k-major, edges zero-filled), each work-item
  // reads two contiguous streams and no edge code. The copies read and write each operand once:
  // worth it from kPackMinMacs multiply-adds and a K of at least kPackMinK. PACK: 0 never, 1 the
  // rule, 2 always (the tests).
  static constexpr double kPackMinMacs = 1e8;
  static constexpr std::int64_t kPackMinK = 128;
  static bool pack_direct(const GemmParams& p, std::int64_t M, std::int64_t N, std::int64_t K) {
    if (p.pack == 2) return true;
    return p.pack == 1 && K >= kPackMinK && static_cast<double>(M) * N * K >= kPackMinMacs;
  }

  cl_event enqueue_gemm_packed(const GemmParams& p, cl_mem am, const core::DeviceMatrix& a, cl_mem bm,
                               const core::DeviceMatrix& b, cl_mem cm, const core::DeviceMatrix& c,
                               cl_command_queue q, cl_uint n_after, const cl_event* after, cl_event* started) {
    const std::int64_t M = a.rows, N = b.cols, K = a.cols, tile_n = p.direct_cols();
    const std::int64_t row_panels = (M + p.mwg - 1) / p.mwg, col_panels = (N + tile_n - 1) / tile_n;
    const std::size_t es = dtype_size(a.dtype);
    const std::size_t bytes_a = static_cast<std::size_t>(row_panels * p.mwg * K) * es,
                      bytes_b = static_cast<std::size_t>(col_panels * tile_n * K) * es;
    if (c.col_major || bytes_a + bytes_b > info_.memory_bytes / 8 ||
        std::max<std::int64_t>(row_panels * p.mwg, col_panels * tile_n) * K > 2147483647)
      return nullptr;
    sweep_padded();
    PadPending held{nullptr, {}};
    try {
      held.buffers.emplace_back(lease(bytes_a));
      held.buffers.emplace_back(lease(bytes_b));
    } catch (const OutOfDeviceMemory&) {
      return nullptr;  // the leases go back to the pool
    }
    const cl_mem pa = held.buffers[0]->mem(), pb = held.buffers[1]->mem();
    const cl_int Mi = static_cast<cl_int>(M), Ni = static_cast<cl_int>(N), Ki = static_cast<cl_int>(K);
    const cl_int lda = static_cast<cl_int>(a.ld), ldb = static_cast<cl_int>(b.ld), ldc = static_cast<cl_int>(c.ld);
    const cl_long a_off = static_cast<cl_long>(a.offset), b_off = static_cast<cl_long>(b.offset),
                  c_off = static_cast<cl_long>(c.offset), zero = 0;
    auto kernel = [&](const char* name) {
      return kernel_for(p, a.col_major, b.col_major, false, 1, a.dtype, /*packed=*/true, name);
    };
    auto launch = [&](cl_kernel k, const char* what, std::initializer_list<std::pair<const void*, std::size_t>> args,
                      std::size_t g0, std::size_t g1, std::size_t l0, std::size_t l1, cl_uint waits,
                      const cl_event* list) {
      cl_uint i = 0;
      for (const auto& [ptr, size] : args) cl_check(cl_.SetKernelArg(k, i++, size, ptr), "clSetKernelArg(pack)", where_);
      const std::size_t global[3] = {g0, g1, 1}, local[3] = {l0, l1, 1};
      cl_event ev = nullptr;
      cl_check(cl_.EnqueueNDRangeKernel(q, k, 3, nullptr, global, local, waits, list, &ev), what, where_);
      return ev;
    };
    // The packers: a work-item per k and panel, groups of 64 along k (no barriers: any size works).
    cl_event ev_a = launch(kernel("pack_a"), "clEnqueueNDRangeKernel(pack_a)",
                           {{&Mi, sizeof Mi}, {&Ki, sizeof Ki}, {&am, sizeof am}, {&a_off, sizeof a_off},
                            {&lda, sizeof lda}, {&pa, sizeof pa}},
                           whole_groups(K, 64), static_cast<std::size_t>(row_panels), 64, 1, n_after, after);
    cl_event ev_b = launch(kernel("pack_b"), "clEnqueueNDRangeKernel(pack_b)",
                           {{&Ni, sizeof Ni}, {&Ki, sizeof Ki}, {&bm, sizeof bm}, {&b_off, sizeof b_off},
                            {&ldb, sizeof ldb}, {&pb, sizeof pb}},
                           whole_groups(K, 64), static_cast<std::size_t>(col_panels), 64, 1, 0, nullptr);
    cl_event ev = launch(kernel("gemm"), "clEnqueueNDRangeKernel(gemm)",
                         {{&Mi, sizeof Mi}, {&Ni, sizeof Ni}, {&Ki, sizeof Ki}, {&pa, sizeof pa}, {&zero, sizeof zero},
                          {&Ki, sizeof Ki}, {&pb, sizeof pb}, {&zero, sizeof zero}, {&Ki, sizeof Ki}, {&cm, sizeof cm},
                          {&c_off, sizeof c_off}, {&ldc, sizeof ldc}, {&zero, sizeof zero}, {&zero, sizeof zero},
                          {&zero, sizeof zero}},
                         whole_groups(col_panels, p.ndimc), whole_groups(row_panels, p.mdimc), p.ndimc, p.mdimc, 0, nullptr);
    cl_.ReleaseEvent(ev_b);
    held.done = ev;
    cl_.RetainEvent(held.done);
    pad_pending_.push_back(std::move(held));
    if (started)
      *started = ev_a;
    else
      cl_.ReleaseEvent(ev_a);
    return ev;
  }

  // c = a @ b through padded copies (see pad_to_blocks); nullptr where the copies cannot be made.
  // `transpose_a`: a (row-major) is copied column-major (see transpose_a_first), padded or not.
  cl_event enqueue_gemm_padded(const GemmParams& p, cl_mem am, const core::DeviceMatrix& a, cl_mem bm,
                               const core::DeviceMatrix& b, cl_mem cm, const core::DeviceMatrix& c,
                               bool bases_aligned, cl_command_queue q, cl_uint n_after, const cl_event* after,
                               cl_event* started, bool transpose_a = false) {
    const std::int64_t M = a.rows, N = b.cols, K = a.cols;
    auto whole = [](std::int64_t x, int t) { return (x + t - 1) / t * t; };
    const std::int64_t Mp = whole(M, p.mwg), Np = whole(N, p.nwg), Kp = whole(K, p.kwg);
    const bool pad_a = transpose_a || Mp != M || Kp != K, pad_b = Kp != K || Np != N, pad_c = Mp != M || Np != N;
    const std::size_t es = dtype_size(a.dtype);
    const std::size_t bytes_a = pad_a ? static_cast<std::size_t>(Mp * Kp) * es : 0,
                      bytes_b = pad_b ? static_cast<std::size_t>(Kp * Np) * es : 0,
                      bytes_c = pad_c ? static_cast<std::size_t>(Mp * Np) * es : 0;
    if (c.col_major || bytes_a + bytes_b + bytes_c > info_.memory_bytes / 8) return nullptr;
    sweep_padded();
    PadPending held{nullptr, {}};
    held.buffers.reserve(3);
    ClBuffer *a_pad = nullptr, *b_pad = nullptr, *c_pad = nullptr;
    try {
      for (auto [buf, bytes] : {std::pair{&a_pad, bytes_a}, std::pair{&b_pad, bytes_b}, std::pair{&c_pad, bytes_c}})
        if (bytes) {
          held.buffers.emplace_back(lease(bytes));
          *buf = held.buffers.back().get();
        }
    } catch (const OutOfDeviceMemory&) {
      return nullptr;  // the leases go back to the pool
    }
    std::vector<cl_event> evs;  // in queue order; the first waits for `after`
    auto waits = [&] { return evs.empty() ? n_after : 0u; };
    auto list = [&] { return evs.empty() ? after : nullptr; };
    // An operand (rows x cols, padded to rp x cp) copied into `to`; its storage is rows-first, or
    // cols-first when it is column-major, and the copy keeps that layout.
    // With `flip` (a row-major operand only) the copy is column-major: its storage is cols-first.
    auto pad = [&](const core::DeviceMatrix& x, cl_mem xm, std::int64_t rp, std::int64_t cp, ClBuffer* to,
                   bool flip = false) {
      const std::int64_t sr = x.col_major ? x.cols : x.rows, sw = x.col_major ? x.rows : x.cols;
      const bool col_major = x.col_major || flip;
      const std::int64_t pr = col_major ? cp : rp, pw = col_major ? rp : cp;
      evs.push_back(enqueue_copy_2d(q, xm, x.offset, x.ld, sr, sw, to->mem(), 0, pw, pr, pw, es, waits(), list(),
                                    flip));
      return core::DeviceMatrix{to, 0, rp, cp, pw, col_major, x.dtype};
    };
    const core::DeviceMatrix pa = pad_a ? pad(a, am, Mp, Kp, a_pad, transpose_a) : a,
                             pb = pad_b ? pad(b, bm, Kp, Np, b_pad) : b;
    const core::DeviceMatrix pc = pad_c ? core::DeviceMatrix{c_pad, 0, Mp, Np, Np, false, c.dtype} : c;
    const cl_mem pam = pad_a ? a_pad->mem() : am, pbm = pad_b ? b_pad->mem() : bm, pcm = pad_c ? c_pad->mem() : cm;
    evs.push_back(enqueue_gemm(pam, pa, pbm, pb, pcm, pc, bases_aligned || (pad_a && pad_b), 1, 0, 0, 0, q, waits(),
                               list(), nullptr, &p));
    if (pad_c)
      evs.push_back(enqueue_copy_2d(q, c_pad->mem(), 0, Np, M, N, cm, c.offset, c.ld, M, N, es, 0, nullptr));
    for (std::size_t i = 1; i + 1 < evs.size(); ++i) cl_.ReleaseEvent(evs[i]);
    held.done = evs.back();
    cl_.RetainEvent(held.done);
    pad_pending_.push_back(std::move(held));
    if (evs.size() == 1) return evs[0];
    if (started)
      *started = evs.front();
    else
      cl_.ReleaseEvent(evs.front());
    return evs.back();
  }

  // ---- host in, host out ---------------------------------------------------------------------
  // Shared memory: wrap NumPy's buffers (CL_MEM_USE_HOST_PTR) and let the kernel read and write
  // them where they are; the map/unmap of the result makes its contents visible to the host. A
  // sparse view (a few rows of a huge memory map, say) is copied densely first: wrapped, its whole
  // range would count as one buffer, over the device's allocation limit.
  void matmul_in_place(const core::HostMatrix& a_in, const core::HostMatrix& b_in, const MatrixView& c_in) {
    const std::size_t es = dtype_size(c_in.dtype);
    std::vector<unsigned char> a_store, b_store, c_store;
    const core::HostMatrix a = core::is_sparse(a_in) ? core::packed(core::view_of(a_in), a_store) : a_in;
    const core::HostMatrix b = core::is_sparse(b_in) ? core::packed(core::view_of(b_in), b_store) : b_in;
    const bool c_sparse =
        c_in.rows > 1 && static_cast<std::size_t>(c_in.row_stride) > 2 * static_cast<std::size_t>(c_in.cols) + 4096;
    MatrixView c = c_in;
    if (c_sparse) {  // computed densely, then copied row by row
      c_store.resize(static_cast<std::size_t>(c.rows * c.cols) * es);
      c.data = c_store.data();
      c.row_stride = c.cols;
    }
    auto wrap = [&](const void* p, std::size_t bytes, cl_mem_flags flags) {
      return create_buffer(bytes, flags | CL_MEM_USE_HOST_PTR, const_cast<void*>(p));
    };
    auto ab = wrap(a.data, a.span() * es, CL_MEM_READ_ONLY);
    auto bb = wrap(b.data, b.span() * es, CL_MEM_READ_ONLY);
    core::DeviceMatrix dc{nullptr, 0, c.rows, c.cols, c.rows > 1 ? c.row_stride : c.cols, false, c.dtype};
    auto cb = wrap(c.data, dc.span() * es, CL_MEM_WRITE_ONLY);
    core::DeviceMatrix da{ab.get(), 0, a.rows, a.cols, a.ld, a.col_major, a.dtype};
    core::DeviceMatrix db{bb.get(), 0, b.rows, b.cols, b.ld, b.col_major, b.dtype};
    dc.data = cb.get();
    const std::uintptr_t vector_bytes = 8 * es;  // the widest global vector (GVW <= 8)
    const bool aligned = reinterpret_cast<std::uintptr_t>(a.data) % vector_bytes == 0 &&
                         reinterpret_cast<std::uintptr_t>(b.data) % vector_bytes == 0;
    read_back(enqueue_gemm(ab->mem(), da, bb->mem(), db, cb->mem(), dc, aligned), cb->mem(), dc.span() * es, "result");
    if (c_sparse) {
      cl_check(cl_.Finish(queue_), "clFinish", where_);
      for (std::int64_t i = 0; i < c.rows; ++i)
        std::memcpy(static_cast<unsigned char*>(c_in.data) + i * c_in.row_stride * es,
                    c_store.data() + i * c.cols * es, c.cols * es);
    }
  }

  // The end of a product into the caller's memory on a device that shares it: after `gemm` (an
  // event of queue_, released here) the result's buffer `c` (CL_MEM_USE_HOST_PTR over that memory)
  // is mapped for reading and unmapped, which is what makes the kernel's writes visible there. The
  // map is queued behind the kernel and only the map is waited for: one round trip to the runtime
  // instead of a wait for the kernel and then a blocking map (2-core machine, a tiny kernel, median
  // a call: PoCL 60 against 107 us, Intel's CPU runtime 7 against 9; docs/opencl.md).
  void read_back(cl_event gemm, cl_mem c, std::size_t bytes, const char* what) {
    cl_int err = CL_SUCCESS;
    cl_event mapped = nullptr;
    void* p = cl_.EnqueueMapBuffer(queue_, c, CL_FALSE, CL_MAP_READ, 0, bytes, 0, nullptr, &mapped, &err);
    if (err != CL_SUCCESS) {
      wait(gemm);  // the kernel writes the caller's memory: never leave before it is done
      cl_check(err, (std::string("clEnqueueMapBuffer(") + what + ")").c_str(), where_);
    }
    cl_.ReleaseEvent(gemm);
    wait(mapped);  // in order: the kernel is done too (its error, if any, fails this wait)
    cl_check(cl_.EnqueueUnmapMemObject(queue_, c, p, 0, nullptr, nullptr),
             (std::string("clEnqueueUnmapMemObject(") + what + ")").c_str(), where_);
  }

  // ---- the pipelined NumPy path of discrete devices ------------------------------------------
  // Whether NumPy's memory is used in place (matmul_in_place): devices that share host memory,
  // unless PORTMAT_OPENCL_DISCRETE=1 makes them take a discrete GPU's path (so that the tests run
  // the pipeline on PoCL and Intel's CPU runtime).
  bool shares_memory() const { return info_.host_unified && env_long("PORTMAT_OPENCL_DISCRETE", 0) == 0; }
  // PORTMAT_OPENCL_PIPELINE=0: discrete devices take matmul_copying (for A/B measurements).
  static bool pipeline_on() { return env_long("PORTMAT_OPENCL_PIPELINE", 1) != 0; }

  // Page-locked host memory: a CL_MEM_ALLOC_HOST_PTR buffer, mapped once and kept mapped, whose
  // pointer is the host side of clEnqueueWrite/ReadBuffer (the driver's DMA reads and writes it
  // directly: on the H200 55 GB/s, against 8.9 / 15 GB/s from malloc'd memory; docs/opencl.md).
  struct Staging {
    cl_mem mem = nullptr;
    unsigned char* p = nullptr;
    std::size_t bytes = 0;
  };

  // The staging slot `s` with at least `bytes`, grown (never shrunk) when it is too small. Called
  // with no command of this device in flight that uses it (every call waits for its own).
  unsigned char* staging(Staging& s, std::size_t bytes) {
    if (s.bytes >= bytes) return s.p;
    if (s.mem) {
      cl_.EnqueueUnmapMemObject(queue_, s.mem, s.p, 0, nullptr, nullptr);
      cl_.Finish(queue_);
      cl_.ReleaseMemObject(s.mem);
      s = Staging{};
    }
    constexpr std::size_t kUnit = std::size_t(2) << 20;  // grown in 2 MiB steps, at least 2 MiB
    const std::size_t round = std::min<std::size_t>(std::max(max_alloc_, bytes), (bytes + kUnit - 1) / kUnit * kUnit);
    cl_int err = CL_SUCCESS;
    cl_mem m = cl_.CreateBuffer(context_, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, round, nullptr, &err);
    if (err != CL_SUCCESS && !pool_.empty()) {  // give cached device buffers back and retry
      pool_.trim(0);
      m = cl_.CreateBuffer(context_, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, round, nullptr, &err);
    }
    cl_check(err, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR staging)", where_ + " for " + std::to_string(round) + " bytes");
    void* p = cl_.EnqueueMapBuffer(queue_, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, round, 0, nullptr, nullptr, &err);
    if (err != CL_SUCCESS) {
      cl_.ReleaseMemObject(m);
      cl_check(err, "clEnqueueMapBuffer(staging)", where_);
    }
    s = Staging{m, static_cast<unsigned char*>(p), round};
    return s.p;
  }

  // The pinned result pool (alloc_host). A block is a CL_MEM_ALLOC_HOST_PTR buffer mapped for
  // good; it is unmapped and released when the pool lets it go, on any thread (a Python thread
  // dropping an array), through a queue of its own. Keeps up to 1/16 of the host's memory (at most
  // 2 GiB) of free blocks, and at most a quarter of it in live results, as the CUDA backend does.
  // In a child made by fork() the pool hands out nothing and lets its blocks go without a driver
  // call (core::HostBlockPool); the registry never destroys devices, so none is made at exit.
  void make_result_pool() {
    cl_int err = CL_SUCCESS;
    release_queue_ = cl_.CreateCommandQueue(context_, dev_, 0, &err);
    cl_check(err, "clCreateCommandQueue(result pool)", where_);
    auto allocate = [this](std::size_t bytes) -> void* {  // called under mu_ (alloc_host)
      if (bytes > max_alloc_) return nullptr;
      cl_int e = CL_SUCCESS;
      cl_mem m = cl_.CreateBuffer(context_, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes, nullptr, &e);
      if (e != CL_SUCCESS) return nullptr;  // ordinary memory will do
      void* p = cl_.EnqueueMapBuffer(queue_, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, nullptr, nullptr, &e);
      if (e != CL_SUCCESS || !p) {
        cl_.ReleaseMemObject(m);
        return nullptr;
      }
      std::lock_guard<std::mutex> lock(blocks_mu_);
      blocks_[p] = m;
      return p;
    };
    auto release = [this](void* p) {
      cl_mem m = nullptr;
      {
        std::lock_guard<std::mutex> lock(blocks_mu_);
        auto it = blocks_.find(p);
        if (it == blocks_.end()) return;
        m = it->second;
        blocks_.erase(it);
      }
      cl_.EnqueueUnmapMemObject(release_queue_, m, p, 0, nullptr, nullptr);
      cl_.Finish(release_queue_);
      cl_.ReleaseMemObject(m);
    };
    const std::size_t ram = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
    result_pool_ = std::make_shared<core::HostBlockPool>(std::min(ram / 16, std::size_t(2) << 30), ram / 4,
                                                         std::move(allocate), std::move(release));
  }

  // True when [p, p + bytes) lies in a live block of the result pool: page-locked memory the
  // pipeline's transfers read or write in place.
  bool pinned(const void* p, std::size_t bytes) const { return result_pool_ && result_pool_->contains(p, bytes); }

  // The pipeline's queues (in-order: uploads, two for kernels, downloads) and host copy threads,
  // made at its first use: devices that share host memory never make them.
  void ready_pipeline() {
    if (!in_queue_) {
      cl_int err = CL_SUCCESS;
      for (cl_command_queue* q : {&in_queue_, &kernel_queue_[0], &kernel_queue_[1], &out_queue_}) {
        *q = cl_.CreateCommandQueue(context_, dev_, 0, &err);
        cl_check(err, "clCreateCommandQueue(pipeline)", where_);
      }
    }
    if (!host_threads_) {
      const long threads =
          env_long("PORTMAT_OPENCL_THREADS", std::clamp<long>(std::thread::hardware_concurrency(), 1, 16));
      host_threads_ = std::make_unique<core::HostPool>(static_cast<int>(std::clamp<long>(threads, 1, 64)));
    }
  }

  // The pipelined paths' guard: on leaving the call, normally or by an exception, waits for every
  // pipeline queue, so that no command outlives the staging, device buffers and NumPy memory it
  // uses, and releases the events the call kept.
  struct InFlight {
    OpenClDevice& d;
    std::vector<cl_event> events;
    ~InFlight() {
      for (cl_command_queue q : {d.in_queue_, d.kernel_queue_[0], d.kernel_queue_[1], d.out_queue_}) d.cl_.Finish(q);
      for (cl_event e : events) d.cl_.ReleaseEvent(e);
    }
    cl_event keep(cl_event e) {
      events.push_back(e);
      return e;
    }
  };

  // Discrete memory, pipelined (the CUDA backend's matmul_host without its pinned operands and
  // k-split start). The product is cut along M into chunks of rows (c[i0:i1] = a[i0:i1] @ b).
  // b goes up first, in pieces of whole lines through a ring of page-locked staging slots; then
  // per chunk: the host threads copy a's rows into a free staging slot, in_queue_ sends them, a
  // kernel computes the chunk's rows of c (kernel_queue_ 0 and 1 alternate, so that one chunk's
  // tail overlaps the next one's start), out_queue_ brings them into an output slot, and the host
  // threads copy them into the result. Host copies, both transfers and kernels of different chunks
  // overlap; queues depend on each other through events, and the host waits only for a slot it
  // needs back or a chunk's result. Why staging at all: a NumPy array is pageable memory, which
  // the driver copies at a fraction of the link's rate, single-threaded (docs/opencl.md);
  // the host threads fill page-locked staging with non-temporal stores instead (core/host_copy.hpp).
  // Returns false (nothing done) where a staging slot would exceed the device's allocation limit.
  bool matmul_pipelined(const core::HostMatrix& a, const core::HostMatrix& b, const MatrixView& c) {
    const std::size_t es = dtype_size(c.dtype);
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;

    // Chunks: ~16 MiB of a's or c's rows (PORTMAT_OPENCL_CHUNK_MB), whole 128-row blocks, one
    // chunk when the product moves 8 MiB or less; PORTMAT_OPENCL_CHUNKS=n cuts M (and b's lines)
    // into n pieces whatever the sizes (tests reach many chunks with small products).
    const long forced = env_long("PORTMAT_OPENCL_CHUNKS", 0);
    const std::size_t chunk_bytes = static_cast<std::size_t>(std::max(1L, env_long("PORTMAT_OPENCL_CHUNK_MB", 16))) << 20;
    const std::int64_t row_bytes = std::max(K, N) * static_cast<std::int64_t>(es);
    const std::int64_t total_bytes = (M * K + K * N + M * N) * static_cast<std::int64_t>(es);
    std::int64_t rows_per_chunk = M;
    if (forced > 0)
      rows_per_chunk = (M + std::min<std::int64_t>(forced, M) - 1) / std::min<std::int64_t>(forced, M);
    else if (total_bytes > (8 << 20))
      rows_per_chunk = std::min(M, std::max<std::int64_t>(128, static_cast<std::int64_t>(chunk_bytes) / row_bytes / 128 * 128));
    const std::int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;

    // b's pieces: whole lines (rows of a row-major b, columns of a column-major one), ~16 MiB each,
    // so that the host copy of one piece overlaps the transfer of the one before.
    const std::int64_t b_lines = b.col_major ? N : K;
    const std::size_t b_line = static_cast<std::size_t>(b.col_major ? K : N) * es;
    std::int64_t per_piece = forced > 0 ? (b_lines + std::min<std::int64_t>(forced, b_lines) - 1) / std::min<std::int64_t>(forced, b_lines)
                                        : std::max<std::int64_t>(1, static_cast<std::int64_t>(chunk_bytes / b_line));
    per_piece = std::min(per_piece, b_lines);
    const std::size_t a_chunk = static_cast<std::size_t>(rows_per_chunk * K) * es;
    const std::size_t in_slot = std::max(a_chunk, static_cast<std::size_t>(per_piece) * b_line);
    const std::size_t out_slot = static_cast<std::size_t>(rows_per_chunk * N) * es;
    if (std::max(in_slot, out_slot) > max_alloc_) return false;

    ready_pipeline();
    Lease da = lease(static_cast<std::size_t>(M * K) * es);
    Lease db = lease(static_cast<std::size_t>(K * N) * es);
    Lease dc = lease(static_cast<std::size_t>(M * N) * es);
    // Whatever happens below (declared after the leases, so it runs first), no command may
    // outlive this call: they use the staging, the device buffers and NumPy's memory.
    InFlight in_flight{*this, {}};
    core::HostPool& pool = *host_threads_;
    const std::string& where = where_;
    auto flush = [&](cl_command_queue q) { cl_check(cl_.Flush(q), "clFlush(pipeline)", where); };

    // Staging rings: kSlots slots per direction, each its own buffer (grown, kept for later calls).
    cl_event in_free[kSlots] = {};
    int in_next = 0;
    auto take_in_slot = [&](int& s) {
      s = in_next;
      in_next = (in_next + 1) % kSlots;
      if (in_free[s]) cl_check(cl_.WaitForEvents(1, &in_free[s]), "host-to-device copy (clWaitForEvents)", where);
      return staging(in_stage_[s], in_slot);
    };
    auto send = [&](int s, unsigned char* slot, cl_mem dst, std::size_t at, std::size_t bytes, const char* what) {
      cl_event ev = nullptr;
      cl_check(cl_.EnqueueWriteBuffer(in_queue_, dst, CL_FALSE, at, bytes, slot, 0, nullptr, &ev), what, where);
      in_free[s] = in_flight.keep(ev);
      flush(in_queue_);
      return ev;
    };

    // Operands and results in the pinned result pool (a result fed back as an operand, say) are
    // read and written in place, without a host copy: dense b, dense row-major a (whose row
    // chunks are contiguous), a result with contiguous rows.
    const std::size_t a_bytes = static_cast<std::size_t>(M * K) * es, b_bytes = static_cast<std::size_t>(K * N) * es;
    const bool a_direct = !a.col_major && (M == 1 || a.ld == K) && pinned(a.data, a_bytes);
    const bool b_direct = b.ld == (b.col_major ? K : N) && pinned(b.data, b_bytes);
    const bool c_direct = (M == 1 || c.row_stride == N) && pinned(c.data, static_cast<std::size_t>(M * N) * es);
    std::vector<cl_event> direct_downs;  // checked before returning (InFlight only waits)

    const auto* bsrc = static_cast<const unsigned char*>(b.data);
    cl_event b_ready = nullptr;
    if (b_direct) {
      cl_check(cl_.EnqueueWriteBuffer(in_queue_, db->mem(), CL_FALSE, 0, b_bytes, bsrc, 0, nullptr, &b_ready),
               "clEnqueueWriteBuffer(b, pinned)", where);
      in_flight.keep(b_ready);
      flush(in_queue_);
    }
    for (std::int64_t l0 = 0; !b_direct && l0 < b_lines; l0 += per_piece) {
      const std::int64_t nl = std::min(per_piece, b_lines - l0);
      int s = 0;
      unsigned char* slot = take_in_slot(s);
      core::copy_2d(pool, slot, b_line, bsrc + l0 * b.ld * es, b.ld * es, nl, b_line);
      b_ready = send(s, slot, db->mem(), l0 * b_line, nl * b_line, "clEnqueueWriteBuffer(b)");
    }

    struct Pending {
      std::int64_t i0, rows;
      unsigned char* slot;
      cl_event ready;
    };
    std::deque<Pending> pending;
    auto copy_out = [&](const Pending& p) {
      cl_check(cl_.WaitForEvents(1, &p.ready), "gemm or device-to-host copy (clWaitForEvents)", where);
      const std::int64_t line_stride = p.rows > 1 ? c.row_stride : N;
      core::copy_2d(pool, static_cast<unsigned char*>(c.data) + p.i0 * c.row_stride * es, line_stride * es, p.slot,
                    N * es, p.rows, N * es);
    };

    const auto* asrc = static_cast<const unsigned char*>(a.data);
    const core::DeviceMatrix bm{db.get(), 0, K, N, b.col_major ? K : N, b.col_major, b.dtype};
    for (std::int64_t ci = 0; ci < chunks; ++ci) {
      const std::int64_t i0 = ci * rows_per_chunk, rows = std::min(rows_per_chunk, M - i0);
      // a's rows: lines of K, or K columns of `rows` (column-major), dense on the device.
      cl_event a_ready = nullptr;
      if (a_direct) {
        cl_check(cl_.EnqueueWriteBuffer(in_queue_, da->mem(), CL_FALSE, static_cast<std::size_t>(i0 * K) * es,
                                        static_cast<std::size_t>(rows * K) * es, asrc + i0 * K * es, 0, nullptr,
                                        &a_ready),
                 "clEnqueueWriteBuffer(a, pinned)", where);
        in_flight.keep(a_ready);
        flush(in_queue_);
      } else {
        int s = 0;
        unsigned char* slot = take_in_slot(s);
        if (a.col_major)
          core::copy_2d(pool, slot, rows * es, asrc + i0 * es, a.ld * es, K, rows * es);
        else
          core::copy_2d(pool, slot, K * es, asrc + i0 * a.ld * es, a.ld * es, rows, K * es);
        a_ready = send(s, slot, da->mem(), static_cast<std::size_t>(i0 * K) * es,
                       static_cast<std::size_t>(rows * K) * es, "clEnqueueWriteBuffer(a)");
      }
      const core::DeviceMatrix am{da.get(), static_cast<std::size_t>(i0 * K), rows, K, a.col_major ? rows : K,
                                  a.col_major, a.dtype};
      const core::DeviceMatrix cm{dc.get(), static_cast<std::size_t>(i0 * N), rows, N, N, false, c.dtype};
      const cl_event after[2] = {a_ready, b_ready};
      cl_command_queue kq = kernel_queue_[ci % 2];
      const cl_event computed = in_flight.keep(
          enqueue_gemm(da->mem(), am, db->mem(), bm, dc->mem(), cm, true, 1, 0, 0, 0, kq, 2, after));
      flush(kq);
      if (c_direct) {  // straight into the result's rows
        cl_event down = nullptr;
        cl_check(cl_.EnqueueReadBuffer(out_queue_, dc->mem(), CL_FALSE, static_cast<std::size_t>(i0 * N) * es,
                                       static_cast<std::size_t>(rows * N) * es,
                                       static_cast<unsigned char*>(c.data) + i0 * N * es, 1, &computed, &down),
                 "clEnqueueReadBuffer(c, pinned)", where);
        direct_downs.push_back(in_flight.keep(down));
        flush(out_queue_);
        continue;
      }
      // The output slot this chunk uses must have been copied out: at most kSlots in flight.
      copy_out_in_order(pending, copy_out, [&] { return static_cast<int>(pending.size()) >= kSlots; });
      unsigned char* oslot = staging(out_stage_[ci % kSlots], out_slot);
      cl_event down = nullptr;
      cl_check(cl_.EnqueueReadBuffer(out_queue_, dc->mem(), CL_FALSE, static_cast<std::size_t>(i0 * N) * es,
                                     static_cast<std::size_t>(rows * N) * es, oslot, 1, &computed, &down),
               "clEnqueueReadBuffer(c)", where);
      pending.push_back({i0, rows, oslot, in_flight.keep(down)});
      flush(out_queue_);
      // Results already down go out now, between the copies in.
      copy_out_in_order(pending, copy_out, [&] { return finished(pending.front().ready); });
    }
    copy_out_in_order(pending, copy_out, [] { return true; });
    wait_for(direct_downs, "gemm or device-to-host copy (clWaitForEvents)", where);
    return true;
  }

  // The pipelines' downloads through staging, copied out of their slots in the order they were
  // queued (copy_out waits for each) for as long as `more()` holds and any are left.
  template <class Pending, class CopyOut, class More>
  static void copy_out_in_order(std::deque<Pending>& pending, const CopyOut& copy_out, const More& more) {
    while (!pending.empty() && more()) {
      copy_out(pending.front());
      pending.pop_front();
    }
  }
  // Whether an event's command has completed, without waiting for it.
  bool finished(cl_event e) const {
    cl_int status = CL_QUEUED;
    return cl_.GetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr) == CL_SUCCESS &&
           status == CL_COMPLETE;
  }
  // Waits for every event of `events` (downloads written straight into the result).
  void wait_for(const std::vector<cl_event>& events, const char* what, const std::string& where) const {
    if (!events.empty())
      cl_check(cl_.WaitForEvents(static_cast<cl_uint>(events.size()), events.data()), what, where);
  }

  // Stacks on a discrete device, pipelined as the CUDA backend's matmul_batch_host: the stack is
  // cut into chunks of whole matrices (~PORTMAT_OPENCL_CHUNK_MB of staged operands or results
  // each; PORTMAT_OPENCL_CHUNKS=n: n chunks); per chunk the host threads pack its matrices of a and
  // b densely into a staging slot (3 in a ring), in_queue_ sends them, one launch multiplies the
  // chunk (kernel queues alternate), out_queue_ brings the results into an output slot and the
  // host threads copy them into c (or the download writes c in place where it is a pooled
  // page-locked block). A broadcast operand (step 0) goes up once, with the first chunk. Returns
  // false (nothing done) where a slot would exceed the device's allocation limit.
  bool matmul_batch_pipelined(const core::HostMatrix& a, std::int64_t a_step, const core::HostMatrix& b,
                              std::int64_t b_step, const MatrixView& c, std::int64_t c_step, std::int64_t count) {
    const std::size_t es = dtype_size(c.dtype);
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;
    const std::size_t a_mat = static_cast<std::size_t>(M * K) * es, b_mat = static_cast<std::size_t>(K * N) * es,
                      c_mat = static_cast<std::size_t>(M * N) * es;
    // An operand's host lines: rows of a row-major matrix, columns of a column-major one; on the
    // device each matrix is dense in its own layout.
    struct Side {
      const unsigned char* p;
      std::size_t step, ld, lines, line, mat;  // bytes, but lines
      bool stacked;
    };
    auto side = [&](const core::HostMatrix& x, std::int64_t step, std::size_t mat) {
      return Side{static_cast<const unsigned char*>(x.data), static_cast<std::size_t>(step) * es,
                  static_cast<std::size_t>(x.ld) * es, static_cast<std::size_t>(x.col_major ? x.cols : x.rows),
                  static_cast<std::size_t>(x.col_major ? x.rows : x.cols) * es, mat, step != 0};
    };
    const Side sa = side(a, a_step, a_mat), sb = side(b, b_step, b_mat);
    const long forced = env_long("PORTMAT_OPENCL_CHUNKS", 0);
    const std::size_t chunk_bytes = static_cast<std::size_t>(std::max(1L, env_long("PORTMAT_OPENCL_CHUNK_MB", 16))) << 20;
    const std::size_t per_in = (sa.stacked ? a_mat : 0) + (sb.stacked ? b_mat : 0);
    const std::int64_t per_chunk =
        forced > 0 ? (count + std::min<std::int64_t>(forced, count) - 1) / std::min<std::int64_t>(forced, count)
                   : std::max<std::int64_t>(1, static_cast<std::int64_t>(chunk_bytes / std::max<std::size_t>({per_in, c_mat, 1})));
    const std::int64_t chunks = (count + per_chunk - 1) / per_chunk;
    const std::size_t in_slot = per_chunk * per_in + (sa.stacked ? 0 : a_mat) + (sb.stacked ? 0 : b_mat);
    const std::size_t out_slot = per_chunk * c_mat;
    if (std::max(in_slot, out_slot) > max_alloc_) return false;

    ready_pipeline();
    Lease da = lease((sa.stacked ? count : 1) * a_mat), db = lease((sb.stacked ? count : 1) * b_mat);
    Lease dc = lease(count * c_mat);
    InFlight in_flight{*this, {}};  // after the leases: runs first
    core::HostPool& pool = *host_threads_;
    const std::string& where = where_;
    auto flush = [&](cl_command_queue q) { cl_check(cl_.Flush(q), "clFlush(pipeline)", where); };
    const bool c_direct = (M == 1 || c.row_stride == N) && c_step == M * N && pinned(c.data, count * c_mat);
    const core::DeviceMatrix am{da.get(), 0, M, K, a.col_major ? M : K, a.col_major, a.dtype};
    const core::DeviceMatrix bm{db.get(), 0, K, N, b.col_major ? K : N, b.col_major, b.dtype};
    const core::DeviceMatrix cm{dc.get(), 0, M, N, N, false, c.dtype};

    cl_event in_free[kSlots] = {};
    struct Pending {
      std::int64_t i0, nm;
      unsigned char* slot;
      cl_event ready;
    };
    std::deque<Pending> pending;
    auto copy_out = [&](const Pending& p) {
      cl_check(cl_.WaitForEvents(1, &p.ready), "batched gemm or device-to-host copy (clWaitForEvents)", where);
      core::copy_3d(pool, static_cast<unsigned char*>(c.data) + p.i0 * c_step * static_cast<std::int64_t>(es),
                    static_cast<std::size_t>(c_step) * es, static_cast<std::size_t>(M > 1 ? c.row_stride : N) * es,
                    p.slot, c_mat, static_cast<std::size_t>(N) * es, static_cast<std::size_t>(p.nm),
                    static_cast<std::size_t>(M), static_cast<std::size_t>(N) * es);
    };
    std::vector<cl_event> direct_downs;
    for (std::int64_t ci = 0; ci < chunks; ++ci) {
      const std::int64_t i0 = ci * per_chunk, nm = std::min(per_chunk, count - i0);
      const int si = static_cast<int>(ci % kSlots);
      if (in_free[si]) cl_check(cl_.WaitForEvents(1, &in_free[si]), "host-to-device copy (clWaitForEvents)", where);
      unsigned char* slot = staging(in_stage_[si], in_slot);
      std::size_t at = 0;
      cl_event up = nullptr;
      for (const Side* sd : {&sa, &sb}) {  // chunk ci's matrices of each operand, packed, then sent
        if (!sd->stacked && i0 > 0) continue;  // a broadcast operand went up with chunk 0
        const std::int64_t first = sd->stacked ? i0 : 0, n = sd->stacked ? nm : 1;
        const std::size_t bytes = static_cast<std::size_t>(n) * sd->mat;
        core::copy_3d(pool, slot + at, sd->mat, sd->line, sd->p + first * sd->step, sd->step, sd->ld,
                      static_cast<std::size_t>(n), sd->lines, sd->line);
        cl_check(cl_.EnqueueWriteBuffer(in_queue_, (sd == &sa ? da : db)->mem(), CL_FALSE,
                                        static_cast<std::size_t>(first) * sd->mat, bytes, slot + at, 0, nullptr, &up),
                 "clEnqueueWriteBuffer(stack)", where);
        in_flight.keep(up);
        at += bytes;
      }
      in_free[si] = up;  // in order: the last write of the chunk is the slot's last reader
      flush(in_queue_);
      cl_command_queue kq = kernel_queue_[ci % 2];
      core::DeviceMatrix ai = am, bi = bm, ci_m = cm;
      ai.offset = sa.stacked ? static_cast<std::size_t>(i0 * M * K) : 0;
      bi.offset = sb.stacked ? static_cast<std::size_t>(i0 * K * N) : 0;
      ci_m.offset = static_cast<std::size_t>(i0 * M * N);
      const cl_event computed = in_flight.keep(enqueue_gemm(da->mem(), ai, db->mem(), bi, dc->mem(), ci_m, true, nm,
                                                            sa.stacked ? M * K : 0, sb.stacked ? K * N : 0, M * N,
                                                            kq, 1, &up));
      flush(kq);
      if (c_direct) {
        cl_event down = nullptr;
        cl_check(cl_.EnqueueReadBuffer(out_queue_, dc->mem(), CL_FALSE, static_cast<std::size_t>(i0) * c_mat,
                                       static_cast<std::size_t>(nm) * c_mat,
                                       static_cast<unsigned char*>(c.data) + static_cast<std::size_t>(i0) * c_mat, 1,
                                       &computed, &down),
                 "clEnqueueReadBuffer(stack, pinned)", where);
        direct_downs.push_back(in_flight.keep(down));
        flush(out_queue_);
        continue;
      }
      copy_out_in_order(pending, copy_out, [&] { return static_cast<int>(pending.size()) >= kSlots; });
      unsigned char* oslot = staging(out_stage_[si], out_slot);
      cl_event down = nullptr;
      cl_check(cl_.EnqueueReadBuffer(out_queue_, dc->mem(), CL_FALSE, static_cast<std::size_t>(i0) * c_mat,
                                     static_cast<std::size_t>(nm) * c_mat, oslot, 1, &computed, &down),
               "clEnqueueReadBuffer(stack)", where);
      pending.push_back({i0, nm, oslot, in_flight.keep(down)});
      flush(out_queue_);
      copy_out_in_order(pending, copy_out, [&] { return finished(pending.front().ready); });
    }
    copy_out_in_order(pending, copy_out, [] { return true; });
    wait_for(direct_downs, "batched gemm or device-to-host copy (clWaitForEvents)", where);
    return true;
  }

  // Discrete memory: operands go into pooled device buffers, packed dense (a sliced view crosses
  // the bus without its gaps, via a rectangular copy); the result comes back into c.
  void matmul_copying(const core::HostMatrix& a, const core::HostMatrix& b, const MatrixView& c) {
    const std::size_t es = dtype_size(c.dtype);
    auto put = [&](const core::HostMatrix& h, Lease& dst) {
      const std::size_t outer = h.col_major ? h.cols : h.rows, inner = h.col_major ? h.rows : h.cols;
      if (static_cast<std::size_t>(h.ld) == inner || outer == 1) {
        cl_check(cl_.EnqueueWriteBuffer(queue_, dst->mem(), CL_FALSE, 0, outer * inner * es, h.data,
                                        0, nullptr, nullptr),
                 "clEnqueueWriteBuffer(operand)", where_);
      } else {
        const std::size_t origin[3] = {0, 0, 0}, region[3] = {inner * es, outer, 1};
        cl_check(cl_.EnqueueWriteBufferRect(queue_, dst->mem(), CL_FALSE, origin, origin, region,
                                            inner * es, 0, h.ld * es, 0, h.data, 0, nullptr, nullptr),
                 "clEnqueueWriteBufferRect(operand)", where_);
      }
    };
    Lease la = lease(static_cast<std::size_t>(a.rows * a.cols) * es);
    Lease lb = lease(static_cast<std::size_t>(b.rows * b.cols) * es);
    Lease lc = lease(static_cast<std::size_t>(c.rows * c.cols) * es);
    put(a, la);
    put(b, lb);
    core::DeviceMatrix da{la.get(), 0, a.rows, a.cols, a.col_major ? a.rows : a.cols, a.col_major, a.dtype};
    core::DeviceMatrix db{lb.get(), 0, b.rows, b.cols, b.col_major ? b.rows : b.cols, b.col_major, b.dtype};
    core::DeviceMatrix dc{lc.get(), 0, c.rows, c.cols, c.cols, false, c.dtype};
    cl_event ev = enqueue_gemm(la->mem(), da, lb->mem(), db, lc->mem(), dc);
    cl_.ReleaseEvent(ev);
    if (c.rows <= 1 || c.row_stride == c.cols) {
      cl_check(cl_.EnqueueReadBuffer(queue_, lc->mem(), CL_TRUE, 0, c.rows * c.cols * es, c.data, 0,
                                     nullptr, nullptr),
               "clEnqueueReadBuffer(result)", where_);
    } else {
      const std::size_t origin[3] = {0, 0, 0}, region[3] = {c.cols * es, static_cast<std::size_t>(c.rows), 1};
      cl_check(cl_.EnqueueReadBufferRect(queue_, lc->mem(), CL_TRUE, origin, origin, region,
                                         c.cols * es, 0, c.row_stride * es, 0, c.data, 0, nullptr, nullptr),
               "clEnqueueReadBufferRect(result)", where_);
    }
  }

  const ClApi& cl_;
  cl_platform_id platform_;
  cl_device_id dev_;
  DeviceInfo info_;
  std::string where_;
  std::unique_ptr<TunedParams> tuned_;  // what `portmat tune` stored (constructor)
  std::size_t max_alloc_ = 0, local_mem_ = 0, max_work_group_ = 0;
  int nv_cc_major_ = 0;  // NVIDIA's compute capability, major (0: not NVIDIA's driver, or not told)
  int vector_bytes_ = 32;  // the float vector's bytes (CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT x 4)

  std::mutex mu_;  // one command stream per device: guards everything below
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  // $PORTMAT_OPENCL_BUILD_OPTIONS, appended to the gemm kernel's build options (e.g. NVIDIA's
  // -cl-nv-maxrregcount=128, to try two 128 x 128 blocks per SM; the program cache keys on it).
  static std::string extra_build_options() {
    const char* e = std::getenv("PORTMAT_OPENCL_BUILD_OPTIONS");
    return e && *e ? std::string(" ") + e : std::string();
  }
  std::map<std::string, cl_kernel> kernels_;  // by build options ("casts:<name>": casts.cl's)
  cl_program casts_program_ = nullptr;        // casts.cl, built at the first cast (lives with the device)
  core::BufferPool<ClBuffer> pool_;  // keeps at most a quarter of the device (constructor)
  // The pipeline (matmul_pipelined), made at its first use. Its staging stays mapped for the
  // process's life, as the device does (the registry never destroys devices, so no driver call
  // runs at exit); a child made by fork() never uses it, since the registry refuses OpenCL
  // devices there (Backend::survives_fork).
  static constexpr int kSlots = 3;  // staging slots per direction: fill one while two are in flight
  static constexpr double kStackMaxFlops = 4e9;  // stacks of larger products go one by one (matmul_batch_host)
  cl_command_queue in_queue_ = nullptr, kernel_queue_[2] = {nullptr, nullptr}, out_queue_ = nullptr;
  Staging in_stage_[kSlots], out_stage_[kSlots];
  std::shared_ptr<core::HostBlockPool> result_pool_;  // alloc_host, made at its first use
  cl_command_queue release_queue_ = nullptr;          // unmaps the pool's blocks as they go
  std::mutex blocks_mu_;                              // guards blocks_ (released on any thread)
  std::map<void*, cl_mem> blocks_;                    // the pool's blocks: mapped pointer -> buffer
  std::unique_ptr<core::HostPool> host_threads_;
};

class OpenClBackend final : public core::Backend {
 public:
  const char* name() const override { return "opencl"; }
  const char* label() const override { return "OpenCL"; }

  std::vector<std::shared_ptr<core::Device>> devices() override {
    std::vector<std::shared_ptr<core::Device>> out;
    const ClApi* cl = cl_api();
    if (!cl) {
      notes_.push_back("no OpenCL ICD loader (libOpenCL.so.1) was found");
      return out;
    }
    cl_uint np = 0;
    if (cl_int err = cl->GetPlatformIDs(0, nullptr, &np); err != CL_SUCCESS || np == 0) {
      notes_.push_back("clGetPlatformIDs: " + (err != CL_SUCCESS ? cl_error_name(err) : "no platforms"));
      return out;
    }
    std::vector<cl_platform_id> platforms(np);
    cl->GetPlatformIDs(np, platforms.data(), nullptr);
    int index = 0;
    for (cl_platform_id p : platforms) {
      cl_uint nd = 0;
      if (cl_int err = cl->GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd); err != CL_SUCCESS || nd == 0) {
        char name[256] = {0};
        cl->GetPlatformInfo(p, CL_PLATFORM_NAME, sizeof name - 1, name, nullptr);
        notes_.push_back(std::string("platform '") + name + "': clGetDeviceIDs: " +
                         (err != CL_SUCCESS ? cl_error_name(err) : "no devices"));
        continue;
      }
      std::vector<cl_device_id> devs(nd);
      cl->GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr);
      for (cl_device_id d : devs) out.push_back(std::make_shared<OpenClDevice>(*cl, p, d, index++));
    }
    return out;
  }

  std::vector<std::string> notes() const override { return notes_; }

 private:
  std::vector<std::string> notes_;
};

}  // namespace

}  // namespace portmat::opencl

namespace portmat::core {
std::unique_ptr<Backend> make_opencl_backend() {
  return std::make_unique<opencl::OpenClBackend>();
}
}  // namespace portmat::core
