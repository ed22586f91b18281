// The OpenCL backend: every OpenCL device of every platform (NVIDIA, AMD, Intel GPUs; PoCL CPUs).
//
// Per device, created once and shared by all threads (the seed's static queue, made thread-safe):
// a context and an in-order profiling queue; compiled programs cached per kernel parameters
// (in memory and, for the driver's binaries, on disk: program_cache.cpp); and a pool of device
// buffers reused across calls. Devices sharing host memory (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL,
// integrated GPUs) read NumPy's memory in place and write the result in place, as the seed does
// with USM; discrete devices copy operands in (packing sliced views on the way) and the result out.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "core/backend.hpp"
#include "core/buffer_pool.hpp"
#include "core/layout.hpp"
#include "core/process.hpp"
#include "opencl/cl_api.hpp"
#include "opencl/gemm_params.hpp"
#include "opencl/program_cache.hpp"
#include "opencl/tuning_store.hpp"

namespace portmat::kernels {
extern const char gemm_cl[];         // kernels/gemm.cl, embedded by CMake (cmake/Embed.cmake)
extern const char gemm_direct_cl[];  // kernels/gemm_direct.cl (CPU runtimes that vectorize work-items)
extern const char casts_cl[];        // kernels/casts.cl: dtype casts and complex b's real form
}

namespace portmat::opencl {

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

class ClBuffer final : public core::Buffer {
 public:
  ClBuffer(const ClApi& cl, cl_mem mem, std::size_t bytes) : cl_(cl), mem_(mem), bytes_(bytes) {}
  ~ClBuffer() override { cl_.ReleaseMemObject(mem_); }
  std::size_t bytes() const override { return bytes_; }
  cl_mem mem() const { return mem_; }

 private:
  const ClApi& cl_;
  cl_mem mem_;
  std::size_t bytes_;
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
    info_.supports_f64 = device_value<cl_device_fp_config>(cl, dev, CL_DEVICE_DOUBLE_FP_CONFIG) != 0;
    max_alloc_ = device_value<cl_ulong>(cl, dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    local_mem_ = device_value<cl_ulong>(cl, dev, CL_DEVICE_LOCAL_MEM_SIZE);
    max_work_group_ = device_value<std::size_t>(cl, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE);
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
    cl_event done = enqueue_gemm(mem_of(a.data), a, mem_of(b.data), b, mem_of(c.data), c);
    return wait_and_time(done);
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
    if (info_.host_unified)
      matmul_in_place(a, b, c);
    else
      matmul_copying(a, b, c);
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
    if (count <= 1 || a_step < 0 || b_step < 0 || c_step <= 0 || (info_.host_unified && sparse) ||
        std::max({a_span, b_span, c_span}) * es > max_alloc_)
      return core::Device::matmul_batch_host(a, a_step, b, b_step, c, c_step, count);
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    struct FinishGuard {  // no enqueued command may outlive this call: they use host memory
      const ClApi& cl;
      cl_command_queue q;
      ~FinishGuard() { cl.Finish(q); }
    } guard{cl_, queue_};
    if (info_.host_unified) {
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
      wait(enqueue_gemm(ab->mem(), da, bb->mem(), db, cb->mem(), dc, aligned, count, a_step, b_step, c_step));
      cl_int err = CL_SUCCESS;
      void* p = cl_.EnqueueMapBuffer(queue_, cb->mem(), CL_TRUE, CL_MAP_READ, 0, c_span * es, 0, nullptr,
                                     nullptr, &err);
      cl_check(err, "clEnqueueMapBuffer(result stack)", where_);
      cl_check(cl_.EnqueueUnmapMemObject(queue_, cb->mem(), p, 0, nullptr, nullptr),
               "clEnqueueUnmapMemObject(result stack)", where_);
      return;
    }
    // Discrete: dense device stacks (one matrix for a broadcast operand). A host stack of n matrices, `outer` lines of `inner` elements each (rows, or columns of a
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
      const double t = wait_and_time(enqueue_gemm(mem_of(a.data), a, mem_of(b.data), b, mem_of(c.data), c, true,
                                                  count, a_step, b_step, c_step));
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
    cl_int err = CL_SUCCESS;
    cl_mem m = cl_.CreateBuffer(context_, flags, std::max<std::size_t>(bytes, 1), host, &err);
    if (err != CL_SUCCESS && !host && !pool_.empty()) {  // give cached buffers back and retry
      pool_.trim(0);
      m = cl_.CreateBuffer(context_, flags, std::max<std::size_t>(bytes, 1), host, &err);
    }
    if (err == CL_OUT_OF_RESOURCES) err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    cl_check(err, "clCreateBuffer", where_ + " for " + std::to_string(bytes) + " bytes");
    return std::make_unique<ClBuffer>(cl_, m, bytes);
  }

  using Lease = core::BufferPool<ClBuffer>::Lease;

  Lease lease(std::size_t bytes) {
    return pool_.lease(bytes, [&] { return create_buffer(bytes); });
  }

  // ---- kernels -----------------------------------------------------------------------------------
  cl_kernel kernel_for(const GemmParams& p, bool a_col, bool b_col, bool edges, int gvw, DType dtype) {
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
    const int kind = dtype == DType::f64 ? 1 : dtype == DType::u32 ? 2 : dtype == DType::u64 ? 3 : 0;
    const std::string options = p.defines() + " -DREAL_KIND=" + std::to_string(kind) + " -DA_COL_MAJOR=" +
                                (a_col ? "1" : "0") + " -DB_COL_MAJOR=" + (b_col ? "1" : "0") +
                                " -DEDGES=" + (edges ? "1" : "0") + " -DGVW=" + std::to_string(gvw);
    auto it = kernels_.find(options);
    if (it != kernels_.end()) return it->second;
    // Driver compilers (PoCL's LLVM) recurse deeply: never on the caller's stack, which may be a
    // small thread's.
    cl_program prog = core::on_big_stack(
        [&] { return build_program(cl_, context_, dev_, where_, p.direct ? kernels::gemm_direct_cl : kernels::gemm_cl,
                                   options); });
    cl_int err = CL_SUCCESS;
    cl_kernel k = cl_.CreateKernel(prog, "gemm", &err);
    cl_.ReleaseProgram(prog);  // the kernel keeps it alive
    cl_check(err, "clCreateKernel(gemm)", where_);
    kernels_.emplace(options, k);
    return k;
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
  GemmParams params_for(DType dtype, std::int64_t M, std::int64_t N, std::int64_t count) {
    const std::optional<GemmParams> tuned = tuned_->get(dtype_size(dtype));
    return choose_params({info_.kind, info_.vendor, info_.compute_units}, dtype, static_cast<long>(M),
                         static_cast<long>(N), static_cast<long>(count), tuned ? &*tuned : nullptr);
  }

  std::pair<std::string, std::string> tuning_store() const override { return {tuning_key(info_), tuning_path()}; }
  std::string kernel_params(DType dtype, std::int64_t m, std::int64_t n) override {
    return params_for(dtype, m, n, 1).str();
  }

  // Enqueues c = a @ b on buffers holding the matrices; returns the kernel's event.
  // `bases_aligned`: the buffers start on a GVW-vector boundary (always true for our allocations;
  // NumPy's memory used in place may start anywhere a float may).
  // A stack of `count` products: matrix i of each operand `x_step` elements after matrix i - 1
  // (0: the same matrix for every i), one launch (the NDRange's third dimension).
  cl_event enqueue_gemm(cl_mem am, const core::DeviceMatrix& a, cl_mem bm,
                        const core::DeviceMatrix& b, cl_mem cm, const core::DeviceMatrix& c,
                        bool bases_aligned = true, std::int64_t count = 1, std::int64_t a_step = 0,
                        std::int64_t b_step = 0, std::int64_t c_step = 0) {
    const cl_int M = static_cast<cl_int>(a.rows), N = static_cast<cl_int>(b.cols),
                 K = static_cast<cl_int>(a.cols);
    GemmParams p = params_for(a.dtype, M, N, count);
    if (p.direct && std::max({a.span(), b.span(), c.span()}) > 2147483647u)  // its int indices (gemm_direct.cl)
      p = choose_params({info_.kind, std::string(), info_.compute_units}, a.dtype, M, N, count);
    const bool edges = !p.direct && (M % p.mwg != 0 || N % p.nwg != 0 || K % p.kwg != 0);
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
    // gemm.cl: a work-group per NWG x MWG block; gemm_direct.cl: a work-item per column and MWG rows.
    const std::size_t global[3] = {
        p.direct ? static_cast<std::size_t>((N + p.ndimc - 1) / p.ndimc) * p.ndimc
                 : static_cast<std::size_t>((N + p.nwg - 1) / p.nwg) * p.ndimc,
        p.direct ? static_cast<std::size_t>((M + p.mwg - 1) / p.mwg)
                 : static_cast<std::size_t>((M + p.mwg - 1) / p.mwg) * p.mdimc,
        static_cast<std::size_t>(count)};
    cl_event ev = nullptr;
    cl_int err = cl_.EnqueueNDRangeKernel(queue_, k, 3, nullptr, global, local, 0, nullptr, &ev);
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
    wait(enqueue_gemm(ab->mem(), da, bb->mem(), db, cb->mem(), dc, aligned));
    cl_int err = CL_SUCCESS;
    void* p = cl_.EnqueueMapBuffer(queue_, cb->mem(), CL_TRUE, CL_MAP_READ, 0, dc.span() * es, 0,
                                   nullptr, nullptr, &err);
    cl_check(err, "clEnqueueMapBuffer(result)", where_);
    cl_check(cl_.EnqueueUnmapMemObject(queue_, cb->mem(), p, 0, nullptr, nullptr),
             "clEnqueueUnmapMemObject(result)", where_);
    if (c_sparse) {
      cl_check(cl_.Finish(queue_), "clFinish", where_);
      for (std::int64_t i = 0; i < c.rows; ++i)
        std::memcpy(static_cast<unsigned char*>(c_in.data) + i * c_in.row_stride * es,
                    c_store.data() + i * c.cols * es, c.cols * es);
    }
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

  std::mutex mu_;  // one command stream per device: guards everything below
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::map<std::string, cl_kernel> kernels_;  // by build options ("casts:<name>": casts.cl's)
  cl_program casts_program_ = nullptr;        // casts.cl, built at the first cast (lives with the device)
  core::BufferPool<ClBuffer> pool_;  // keeps at most a quarter of the device (constructor)
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
