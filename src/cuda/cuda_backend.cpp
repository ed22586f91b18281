// The CUDA backend: every NVIDIA GPU the driver reports, through the driver API (cuda_api.hpp,
// loaded at first use) and kernels compiled ahead of time (kernels/gemm.cu, embedded fatbin).
//
// Why ahead-of-time nvcc rather than NVRTC at run time: NVRTC is a separate ~100 MB library that
// a machine with only the driver lacks, it adds seconds of compilation at first use, and the
// kernels need no run-time specialisation (sizes, layouts and alignment are kernel arguments or one
// of four compiled layout variants). The fatbin carries sm_80 and sm_90a machine code plus
// compute_90 PTX that newer GPUs' drivers compile once; only libcuda.so.1 is needed at run time.
//
// Per device, created at first use and shared by all threads (one lock): the primary context,
// the loaded module, streams and events, a pool of device buffers, pinned staging buffers, a pool
// of host threads for the NumPy-in/NumPy-out pipeline (matmul_host, described there), and the
// pinned result pool and operand pins that let that pipeline skip host copies (pinned_pool.hpp).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "core/backend.hpp"
#include "core/buffer_pool.hpp"
#include "core/env_knobs.hpp"
#include "cuda/cuda_api.hpp"
#include "core/host_copy.hpp"
#include "cuda/kernels/gemm_tiles.h"
#include "cuda/tile_choice.hpp"
#include "cuda/pinned_pool.hpp"

// kernels/gemm.cu compiled by nvcc, embedded by cuda.cmake (.incbin)
extern "C" const unsigned char portmat_cuda_gemm_fatbin[];

namespace portmat::cuda {

using core::copy_2d;
using core::copy_3d;
using core::env_long;
using core::HostPool;

namespace {

// The NumPy path's chunks (matmul_host, matmul_host_batched) carry about this many bytes: enough
// tiles to fill the GPU, few enough chunks that per-chunk costs stay small (at n = 4096 on the
// H200: 11.2 ms with 16 MiB chunks and 16 threads, 13.5 ms with 4 MiB chunks;
// PORTMAT_CUDA_CHUNK_MB overrides it).
std::size_t numpy_chunk_bytes() { return static_cast<std::size_t>(std::max(1L, env_long("PORTMAT_CUDA_CHUNK_MB", 16))) << 20; }

// A chunk of rows of a single product: numpy_chunk_bytes of a (or c), a multiple of 128 rows; a
// small product (8 MiB in all) is one chunk.
std::int64_t chunk_rows(std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t es) {
  const std::int64_t bytes = static_cast<std::int64_t>(numpy_chunk_bytes());
  const std::int64_t rows = std::max<std::int64_t>(128, bytes / (std::max<std::int64_t>({K, N, 1}) * es) / 128 * 128);
  return (M * K + K * N + M * N) * es <= (8 << 20) || rows >= M ? M : rows;
}

// "cuda:0 (NVIDIA H200) for [count x ](m x k) @ (k x n)" + extra: the subject of a launch's error
// message, built only when a launch fails.
std::string product_text(const std::string& where, std::int64_t m, std::int64_t n, std::int64_t k,
                         const std::string& extra, std::int64_t count = 1) {
  return where + " for " + (count != 1 ? std::to_string(count) + " x " : std::string()) + "(" + std::to_string(m) +
         "x" + std::to_string(k) + ") @ (" + std::to_string(k) + "x" + std::to_string(n) + ")" + extra;
}

// Device memory, counted in its device's MemoryAccount (the cap, core/device_memory.hpp) while
// it lives.
class CuBuffer final : public core::Buffer {
 public:
  CuBuffer(const CuApi& cu, CUcontext ctx, CUdeviceptr ptr, std::size_t bytes, core::MemoryAccount* account)
      : cu_(cu), ctx_(ctx), ptr_(ptr), bytes_(bytes), account_(account) {}
  ~CuBuffer() override {
    cu_.CtxSetCurrent(ctx_);
    cu_.MemFree(ptr_);
    if (account_) account_->give(bytes_);
  }
  std::size_t bytes() const override { return bytes_; }
  CUdeviceptr ptr() const { return ptr_; }

 private:
  const CuApi& cu_;
  CUcontext ctx_;
  CUdeviceptr ptr_;
  std::size_t bytes_;
  core::MemoryAccount* account_;
};

CUdeviceptr ptr_of(const core::Buffer* b) { return static_cast<const CuBuffer*>(b)->ptr(); }

// Pinned host memory (cuMemHostAlloc), kept for the device's lifetime and grown on demand.
struct Pinned {
  const CuApi* cu = nullptr;
  void* p = nullptr;
  std::size_t bytes = 0;
  ~Pinned() {
    if (p) cu->MemFreeHost(p);
  }
};

// The batched kernel a cluster kernel is made from (the same tile and body; split-K's two launches).
const GemmTile& batched_partner(const GemmTile& t) { return &t == &kF32_64x64c ? kF32_64x64b : t; }

// A float32 tile by the name PORTMAT_CUDA_TILE accepts (gemm_tiles.h lists them).
const GemmTile* tile_by_name(const std::string& s) {
  for (const NamedTile& t : kF32Tiles)
    if (s == t.short_name) return t.tile;
  return nullptr;
}

class CudaDevice final : public core::Device {
 public:
  CudaDevice(const CuApi& cu, CUdevice dev, int index) : cu_(cu), dev_(dev) {
    char name[256] = {0};
    cu.DeviceGetName(name, sizeof name - 1, dev);
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      cu.DeviceGetAttribute(&v, a, dev);
      return v;
    };
    int driver = 0;
    cu.DriverGetVersion(&driver);
    std::size_t mem = 0;
    cu.DeviceTotalMem(&mem, dev);
    cc_major_ = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    cc_minor_ = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    info_.backend = "cuda";
    info_.index = index;
    info_.name = name;
    info_.vendor = "NVIDIA";
    info_.driver_version = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
    info_.kind = DeviceKind::gpu;
    info_.memory_bytes = mem;
    info_.host_unified = false;
    info_.compute_units = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info_.supports_f64 = true;
    // FP32 lanes per SM: 64 on GA100 (8.0), 128 on the other chips since Ampere (8.6, 8.9, 9.0).
    const int lanes = (cc_major_ == 8 && cc_minor_ == 0) || cc_major_ < 8 ? 64 : 128;
    info_.peak_gflops = info_.compute_units * lanes * 2.0 * attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) * 1e-6;
    smem_optin_ = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    smem_per_sm_ = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    where_ = info_.id() + " (" + info_.name + ")";
    pool_.set_keep_bytes(info_.memory_bytes / 4);
  }

  const DeviceInfo& info() const override { return info_; }

  std::unique_ptr<core::Buffer> alloc(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    return create_buffer(bytes);
  }

  // On the kernels' stream, waited for: cuMemcpyHtoD from pageable memory returns once the data
  // is staged, before it reaches the device, and the kernels' non-blocking streams do not wait
  // for the legacy stream it uses, so a kernel launched next could read (or a buffer filled
  // before it overwrite) the old contents: seen as unwritten results under load (ctest -j6).
  void upload(core::Buffer& dst, const void* src, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cu_check(cu_.MemcpyHtoDAsync(ptr_of(&dst), src, bytes, kstream_[0]), "cuMemcpyHtoDAsync", where_);
    cu_check(cu_.StreamSynchronize(kstream_[0]), "host-to-device copy (cuStreamSynchronize)", where_);
  }

  void download(void* dst, const core::Buffer& src, std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cu_check(cu_.MemcpyDtoHAsync(dst, ptr_of(&src), bytes, kstream_[0]), "cuMemcpyDtoHAsync", where_);
    cu_check(cu_.StreamSynchronize(kstream_[0]), "device-to-host copy (cuStreamSynchronize)", where_);
  }

  // The precision modes other than float32 (issue 18) run on the tensor-core kernels
  // (kernels/gemm_tc.cuh, mma.sync): sm_80 and later.
  bool supports(Precision p) const override { return p == Precision::float32 || cc_major_ >= 8; }
  std::string precision_note(Precision /*p*/) const override {
    return "it is sm_" + std::to_string(cc_major_) + std::to_string(cc_minor_) +
           "; portmat's tensor-core kernels (mma.sync) need sm_80 or later";
  }

  // float32, float64, and the wrapping unsigned products that carry every integer dtype.
  bool computes(DType t) const override {
    return t == DType::f32 || t == DType::f64 || t == DType::u32 || t == DType::u64;
  }

  double gemm(const core::DeviceMatrix& a, const core::DeviceMatrix& b,
              const core::DeviceMatrix& c) override {
    return gemm_repeated(a, b, c, 1);
  }

  double gemm_repeated(const core::DeviceMatrix& a, const core::DeviceMatrix& b,
                       const core::DeviceMatrix& c, int launches) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    const std::size_t es = dtype_size(a.dtype);
    auto products = [&](int count) {
      for (int i = 0; i < count; ++i)
        launch(kstream_[0], ptr_of(a.data) + a.offset * es, a, ptr_of(b.data) + b.offset * es, b,
               ptr_of(c.data) + c.offset * es, c.ld, a.rows, b.cols, a.cols, /*whole=*/true);
    };
    // PORTMAT_CUDA_TIME_GRAPH=1: the products captured in a CUDA graph and its replay timed, which
    // leaves out the host's side of each launch, as cuBLAS is timed through torch's CUDA graphs
    // (bench/diagnostics/cuda_vs_cublas.py): below ~10 us a queued launch's host time shows.
    if (knob("PORTMAT_CUDA_TIME_GRAPH", 0) != 0 && cu_.StreamBeginCapture && cu_.StreamEndCapture &&
        cu_.GraphInstantiate && cu_.GraphLaunch && cu_.GraphExecDestroy && cu_.GraphDestroy)
      return graph_seconds(products, launches);
    cu_check(cu_.EventRecord(t0_, kstream_[0]), "cuEventRecord", where_);
    products(launches);
    cu_check(cu_.EventRecord(t1_, kstream_[0]), "cuEventRecord", where_);
    cu_check(cu_.EventSynchronize(t1_), "gemm kernel (cuEventSynchronize)", where_);
    float ms = 0.f;
    cu_check(cu_.EventElapsedTime(&ms, t0_, t1_), "cuEventElapsedTime", where_);
    return ms * 1e-3 / launches;
  }

  void matmul_host(const core::HostMatrix& a, const core::HostMatrix& b,
                   const MatrixView& c) override;

  // Seconds per product of `products(launches)` captured once as a CUDA graph on kernel stream 0
  // and replayed (gemm_repeated's PORTMAT_CUDA_TIME_GRAPH). One product runs first, outside the
  // capture, so that workspaces, flags and kernels exist before it (nothing may be allocated or
  // waited for while a stream is captured).
  template <class Products>
  double graph_seconds(Products& products, int launches) {
    const CUstream s = kstream_[0];
    products(1);
    cu_check(cu_.StreamSynchronize(s), "cuStreamSynchronize (graph timing)", where_);
    cu_check(cu_.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture", where_);
    CUgraph graph = nullptr;
    try {
      products(launches);
    } catch (...) {
      cu_.StreamEndCapture(s, &graph);
      if (graph) cu_.GraphDestroy(graph);
      throw;
    }
    cu_check(cu_.StreamEndCapture(s, &graph), "cuStreamEndCapture", where_);
    CUgraphExec exec = nullptr;
    const CUresult made = cu_.GraphInstantiate(&exec, graph, 0);
    cu_.GraphDestroy(graph);
    cu_check(made, "cuGraphInstantiate", where_);
    struct ExecGuard {
      const CuApi& cu;
      CUgraphExec e;
      ~ExecGuard() { cu.GraphExecDestroy(e); }
    } guard{cu_, exec};
    cu_check(cu_.GraphLaunch(exec, s), "cuGraphLaunch", where_);  // warm
    cu_check(cu_.EventRecord(t0_, s), "cuEventRecord", where_);
    cu_check(cu_.GraphLaunch(exec, s), "cuGraphLaunch", where_);
    cu_check(cu_.EventRecord(t1_, s), "cuEventRecord", where_);
    cu_check(cu_.EventSynchronize(t1_), "gemm graph (cuEventSynchronize)", where_);
    float ms = 0.f;
    cu_check(cu_.EventElapsedTime(&ms, t0_, t1_), "cuEventElapsedTime", where_);
    return ms * 1e-3 / launches;
  }

  // A stack of products small enough to go through the link as stacks (kStackMaxFlops each): see
  // the definition below. Larger products go one by one through matmul_host's pipeline.
  void matmul_batch_host(const core::HostMatrix& a, std::int64_t a_step, const core::HostMatrix& b,
                         std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                         std::int64_t count) override;

  // Device-resident stacks, one launch per stack (launch_batch); complex64 / complex128 as one real
  // product each: B'' built on the device (complex_b), then a's and c's interleaved parts read as
  // real matrices of twice the columns (core/batch.hpp, complex_b, says why that keeps NumPy's
  // accuracy). The timed region holds both.
  double gemm_batch_repeated(const core::DeviceMatrix& a, std::int64_t a_step, const core::DeviceMatrix& b,
                             std::int64_t b_step, const core::DeviceMatrix& c, std::int64_t c_step,
                             std::int64_t count, int launches) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    const bool complex = a.dtype == DType::c64 || a.dtype == DType::c128;
    const DType real = a.dtype == DType::c64 ? DType::f32 : a.dtype == DType::c128 ? DType::f64 : a.dtype;
    if (real != DType::f32 && real != DType::f64)
      throw DeviceError(std::string("device-resident ") + dtype_name(a.dtype) + " products are not implemented on " + where_);
    if (complex && (a.col_major || c.col_major))
      throw std::invalid_argument("CUDA complex gemm: a and c must be row-major");
    const std::size_t es = dtype_size(a.dtype);
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;
    const std::int64_t b_count = b_step == 0 ? 1 : count;
    std::optional<Lease> bpp;  // B'': b_count real (2K x 2N) matrices
    if (complex) bpp.emplace(lease(static_cast<std::size_t>(b_count * 4 * K * N) * (es / 2)));
    const CUstream s = kstream_[0];
    cu_check(cu_.EventRecord(t0_, s), "cuEventRecord", where_);
    for (int l = 0; l < launches; ++l) {
      const CUdeviceptr pa = ptr_of(a.data) + a.offset * es, pb = ptr_of(b.data) + b.offset * es,
                        pc = ptr_of(c.data) + c.offset * es;
      if (!complex) {
        launch_batch(s, pa, a, a_step, pb, b, b_step, pc, c.ld, c_step, M, N, K, count, true);
        continue;
      }
      complex_b(s, pb, b, b_step, b_count, (*bpp)->ptr());
      const core::DeviceMatrix ar{nullptr, 0, M, 2 * K, 2 * a.ld, false, real};
      const core::DeviceMatrix br{nullptr, 0, 2 * K, 2 * N, 2 * N, false, real};
      launch_batch(s, pa, ar, 2 * a_step, (*bpp)->ptr(), br, b_step == 0 ? 0 : 4 * K * N, pc, 2 * c.ld,
                   2 * c_step, M, 2 * N, 2 * K, count, true);
    }
    cu_check(cu_.EventRecord(t1_, s), "cuEventRecord", where_);
    cu_check(cu_.EventSynchronize(t1_), "batched gemm (cuEventSynchronize)", where_);
    float ms = 0.f;
    cu_check(cu_.EventElapsedTime(&ms, t0_, t1_), "cuEventElapsedTime", where_);
    return ms * 1e-3 / launches;
  }

  // portmat's device arrays: one launch per stack on the first kernel stream, waited for. Every
  // dtype computes() names (float32, float64, and the integers as uint32 / uint64).
  void gemm_batch(const core::DeviceMatrix& a, std::int64_t a_step, const core::DeviceMatrix& b,
                  std::int64_t b_step, const core::DeviceMatrix& c, std::int64_t c_step,
                  std::int64_t count) override {
    if (a.dtype == DType::c64 || a.dtype == DType::c128) {  // B'' then one real product, waited for
      gemm_batch_repeated(a, a_step, b, b_step, c, c_step, count, 1);
      return;
    }
    if (!computes(a.dtype))
      throw DeviceError(std::string("device-resident ") + dtype_name(a.dtype) + " products are not implemented on " + where_);
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    const std::size_t es = dtype_size(a.dtype);
    launch_batch(kstream_[0], ptr_of(a.data) + a.offset * es, a, a_step, ptr_of(b.data) + b.offset * es, b, b_step,
                 ptr_of(c.data) + c.offset * es, c.ld, c_step, a.rows, b.cols, a.cols, count, true);
    cu_check(cu_.StreamSynchronize(kstream_[0]), "gemm of device arrays (cuStreamSynchronize)", where_);
  }

  // Other libraries' memory (CuPy, torch), queued on their stream and not waited for. Complex: b's
  // real form B'' built in the caller's workspace first, on the same stream (the workspace is free
  // again once the stream has passed the product; complex_b overwrites it for the next batch only
  // after the product before it, in stream order).
  void gemm_on_stream(const core::AddressMatrix& a, std::int64_t a_step, const core::AddressMatrix& b,
                      std::int64_t b_step, const core::AddressMatrix& c, std::int64_t c_step, std::int64_t count,
                      std::uintptr_t stream, std::uintptr_t workspace) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    const CUstream s = reinterpret_cast<CUstream>(stream);
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;
    const bool complex = a.dtype == DType::c64 || a.dtype == DType::c128;
    const DType real = a.dtype == DType::c64 ? DType::f32 : a.dtype == DType::c128 ? DType::f64 : a.dtype;
    if (!computes(real))
      throw DeviceError(std::string("device-resident ") + dtype_name(a.dtype) + " products are not implemented on " + where_);
    const std::size_t es = dtype_size(a.dtype);
    if (M == 0 || N == 0 || count == 0) return;
    if (K == 0) {  // the empty sum: zeros, row by row of each matrix of c
      for (std::int64_t i = 0; i < count; ++i)
        cu_check(cu_.MemsetD2D8Async(c.data + static_cast<std::size_t>(i * c_step) * es, c.ld * es, 0, N * es, M, s),
                 "cuMemsetD2D8Async (K = 0)", where_);
      return;
    }
    auto as_device = [](const core::AddressMatrix& x, DType t) {
      return core::DeviceMatrix{nullptr, 0, x.rows, x.cols, x.ld, x.col_major, t};
    };
    if (!complex) {
      launch_batch(s, a.data, as_device(a, a.dtype), a_step, b.data, as_device(b, b.dtype), b_step, c.data, c.ld, c_step,
                   M, N, K, count, true);
      return;
    }
    if (a.col_major && K > 1) throw std::invalid_argument("CUDA complex gemm: a must be row-major");
    if (workspace == 0) throw std::invalid_argument("CUDA complex gemm: no workspace for b's real form");
    const std::int64_t b_count = b_step == 0 ? 1 : count;
    complex_b(s, b.data, as_device(b, b.dtype), b_step, b_count, workspace);
    const core::DeviceMatrix ar{nullptr, 0, M, 2 * K, 2 * (M > 1 ? a.ld : K), false, real};
    const core::DeviceMatrix br{nullptr, 0, 2 * K, 2 * N, 2 * N, false, real};
    launch_batch(s, a.data, ar, 2 * a_step, workspace, br, b_step == 0 ? 0 : 4 * K * N, c.data, 2 * c.ld, 2 * c_step,
                 M, 2 * N, 2 * K, count, true);
  }

  // Casts (kernels/casts.cuh): queued on the caller's stream; device arrays' on the first kernel
  // stream, waited for.
  void cast_on_stream(std::uintptr_t src, DType from, std::uintptr_t dst, DType to, std::int64_t count,
                      std::uintptr_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    launch_cast(reinterpret_cast<CUstream>(stream), src, from, dst, to, count);
  }
  void cast(const core::Buffer& src, DType from, const core::Buffer& dst, DType to, std::int64_t count) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    launch_cast(kstream_[0], ptr_of(&src), from, ptr_of(&dst), to, count);
    cu_check(cu_.StreamSynchronize(kstream_[0]), "cast of a device array (cuStreamSynchronize)", where_);
  }

  std::uintptr_t address_of(const core::Buffer& b) const override { return ptr_of(&b); }
  bool holds_address(std::uintptr_t address) const override {
    int ordinal = -1;  // unified addressing: the driver knows every device pointer's GPU
    return address != 0 &&
           cu_.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, static_cast<CUdeviceptr>(address)) ==
               CUDA_SUCCESS &&
           ordinal == info().index;
  }
  void wait_for_stream(std::uintptr_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    cu_check(cu_.StreamSynchronize(reinterpret_cast<CUstream>(stream)), "cuStreamSynchronize (a caller's stream)",
             where_);
  }


  // The link's host-to-device rate: 32 MiB from pinned memory, best of 3 (a few ms, once). The
  // automatic device choice asks for it on every call it weighs (registry.cpp, open_device_for),
  // most of which then go to the CPU: once measured it is read without the device's lock, the
  // environment scan and the context switch of ready().
  double host_bytes_per_s() override {
    if (const double known = link_rate_.load(std::memory_order_acquire); known > 0) return known;
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    if (link_rate_ > 0) return link_rate_;
    constexpr std::size_t kBytes = std::size_t(32) << 20;
    Pinned host;
    void* src = pinned(host, kBytes);
    std::memset(src, 0, kBytes);
    Lease dst = lease(kBytes);
    double best = 0;
    for (int r = 0; r < 3; ++r) {
      cu_check(cu_.EventRecord(t0_, in_stream_), "cuEventRecord", where_);
      cu_check(cu_.MemcpyHtoDAsync(dst->ptr(), src, kBytes, in_stream_), "cuMemcpyHtoDAsync(link rate)", where_);
      cu_check(cu_.EventRecord(t1_, in_stream_), "cuEventRecord", where_);
      cu_check(cu_.EventSynchronize(t1_), "host-to-device copy (cuEventSynchronize)", where_);
      float ms = 0.f;
      cu_check(cu_.EventElapsedTime(&ms, t0_, t1_), "cuEventElapsedTime", where_);
      best = std::max(best, kBytes / std::max(ms * 1e-3, 1e-9));
    }
    link_rate_.store(best, std::memory_order_release);
    return best;
  }

  // Results of 1 MiB and more come from the pinned pool (pinned_pool.hpp), so the copy engine
  // writes them directly; PORTMAT_CUDA_PINNED_RESULTS=0 turns this off (for measurements).
  std::shared_ptr<void> alloc_host(std::size_t bytes, bool reuse_only) override {
    if (bytes < (std::size_t(1) << 20) || env_long("PORTMAT_CUDA_PINNED_RESULTS", 1) == 0)
      return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    return pinned_pool_->get(bytes, reuse_only);
  }

  // ---- device memory of the NumPy path (out-of-core, core/out_of_core.cpp) ---------------------
  // matmul_host holds a, b and c whole, and its kernels may grow scratch that stays: the split-K
  // workspace of each kernel stream (at most kSplitMaxBytes), the stream-K flags, and in a
  // precision mode on sm_90 the wgmma pre-pass's copies of a row chunk of a and of b per stream.
  std::uint64_t host_product_bytes(std::int64_t m, std::int64_t n, std::int64_t k, DType t) const override {
    const std::uint64_t es = dtype_size(t);
    std::uint64_t bytes = es * static_cast<std::uint64_t>(m * k + k * n + m * n);
    bytes += 2 * static_cast<std::uint64_t>(kSplitMaxBytes) + 2 * kMaxSkBlocks * sizeof(int);
    if (t == DType::f32 && core::current_precision() != Precision::float32 && wgmma_capable()) {
      const std::int64_t rows = chunk_rows(m, n, k, 4);
      bytes += 2 * 4 * static_cast<std::uint64_t>((rows + 256) * k + n * k);
    }
    return bytes;
  }

  // min(the cap less what portmat holds here, the driver's free memory less a margin for its own
  // allocations and fragmentation), the pool's free buffers counted as free.
  std::uint64_t memory_for_products() override {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    std::size_t free = 0, total = 0;
    cu_check(cu_.MemGetInfo(&free, &total), "cuMemGetInfo", where_);
    const std::uint64_t pooled = pool_.free_bytes();
    const std::uint64_t margin = std::max<std::uint64_t>(std::uint64_t(256) << 20, total / 64);
    std::uint64_t room = core::room(free + pooled, margin);
    if (const auto cap = device_memory_limit()) room = std::min(room, core::room(*cap, core::room(memory.in_use(), pooled)));
    return room;
  }

  void release_cached_memory() override {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.trim(0);
  }

  // Operands of 4 MiB and more are page-locked in place (cuMemHostRegister) so that later calls
  // copy them to the device directly; PORTMAT_CUDA_PIN_OPERANDS=0 turns this off.
  std::shared_ptr<void> pin_host(const void* p, std::size_t bytes) override {
    if (bytes < (std::size_t(4) << 20) || env_long("PORTMAT_CUDA_PIN_OPERANDS", 1) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    return pins_->pin(p, bytes);
  }

 private:
  // ---- set-up, once ------------------------------------------------------------------------------
  void ready() {
    if (knobs_.read()) plans_.clear();  // the plans were made under other knobs
    if (ctx_) {
      cu_check(cu_.CtxSetCurrent(ctx_), "cuCtxSetCurrent", where_);
      return;
    }
    CUcontext ctx = nullptr;
    cu_check(cu_.DevicePrimaryCtxRetain(&ctx, dev_), "cuDevicePrimaryCtxRetain", where_);
    cu_check(cu_.CtxSetCurrent(ctx), "cuCtxSetCurrent", where_);
    cu_check(cu_.ModuleLoadData(&module_, portmat_cuda_gemm_fatbin),
             "cuModuleLoadData(embedded gemm fatbin)", where_);
    for (CUstream* s : {&in_stream_, &kstream_[0], &kstream_[1], &out_stream_})
      cu_check(cu_.StreamCreate(s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", where_);
    cu_check(cu_.EventCreate(&t0_, CU_EVENT_DEFAULT), "cuEventCreate", where_);
    cu_check(cu_.EventCreate(&t1_, CU_EVENT_DEFAULT), "cuEventCreate", where_);
    const long threads = env_long("PORTMAT_CUDA_THREADS",
                                  std::clamp<long>(std::thread::hardware_concurrency(), 1, 16));
    pool_threads_ = std::make_unique<HostPool>(static_cast<int>(std::clamp<long>(threads, 1, 64)));
    // Pinned results: keep up to 1/16 of the host's memory (at most 2 GiB) of free blocks for
    // reuse, and lock at most a quarter of it in live results.
    const std::size_t ram = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                            static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
    HostPool* threads_pool = pool_threads_.get();
    auto fault_in = [threads_pool](void* p, std::size_t bytes) {
      threads_pool->run(bytes / 4096, 256, [p](std::size_t b, std::size_t e) {
        for (std::size_t page = b; page < e; ++page) static_cast<volatile char*>(p)[page * 4096] = 0;
      });
    };
    pinned_pool_ = make_pinned_pool(cu_, ctx, std::min(ram / 16, std::size_t(2) << 30), ram / 4, fault_in);
    pins_ = std::make_shared<HostPins>(cu_, ctx, ram / 4);
    ctx_ = ctx;
  }

  // The stream-K hand-over flags (gemm_common.cuh, sk_signal / sk_wait) of the launches on
  // `stream`: one zeroed array per stream, since the stream-K launches of one stream run one after
  // the other and leave every flag cleared, while those of two streams may overlap. Our two
  // kernel streams have one each; so does each stream of another library that gemm_on_stream was
  // given (a stream handle reused after its stream was destroyed finds its flags cleared).
  int* sk_flags(CUstream stream, std::int64_t blocks) {
    if (blocks > kMaxSkBlocks) throw std::logic_error("CUDA gemm: too many stream-K blocks");
    std::unique_ptr<CuBuffer>& flags = stream == kstream_[0]   ? sk_flags_[0]
                                       : stream == kstream_[1] ? sk_flags_[1]
                                                               : foreign_sk_flags_[stream];
    if (!flags) {
      flags = create_buffer(kMaxSkBlocks * sizeof(int));
      cu_check(cu_.MemsetD32Async(flags->ptr(), 0, kMaxSkBlocks, stream), "cuMemsetD32Async (stream-K flags)", where_);
    }
    return reinterpret_cast<int*>(flags->ptr());
  }

  // An event without timing, from a free list (events are cheap but not free to create).
  CUevent event() {
    if (!free_events_.empty()) {
      CUevent e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    CUevent e = nullptr;
    cu_check(cu_.EventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate", where_);
    return e;
  }

  // ---- memory ------------------------------------------------------------------------------------
  // Every device buffer, counted against portmat's cap (core/device_memory.hpp): past it, the
  // pool's free buffers go first, then the allocation fails with OutOfDeviceMemory.
  std::unique_ptr<CuBuffer> create_buffer(std::size_t bytes) {
    if (memory.over_limit(bytes) && !pool_.empty()) pool_.trim(0);
    memory.take(bytes, true, where_);
    CUdeviceptr p = 0;
    CUresult r = cu_.MemAlloc(&p, std::max<std::size_t>(bytes, 1));
    if (r == CUDA_ERROR_OUT_OF_MEMORY && !pool_.empty()) {  // give cached buffers back and retry
      pool_.trim(0);
      r = cu_.MemAlloc(&p, std::max<std::size_t>(bytes, 1));
    }
    if (r != CUDA_SUCCESS) memory.give(bytes);
    cu_check(r, "cuMemAlloc", where_ + " for " + std::to_string(bytes) + " bytes");
    return std::make_unique<CuBuffer>(cu_, ctx_, p, bytes, &memory);
  }

  using Lease = core::BufferPool<CuBuffer>::Lease;

  Lease lease(std::size_t bytes) {
    return pool_.lease(bytes, [&] { return create_buffer(bytes); });
  }

  // True when [p, p + bytes) is page-locked host memory the copy engines can use directly: a block
  // of the pinned pool or an array pinned by pin_host. Memory pinned by others (e.g. CuPy's pinned
  // pool) is not looked up with cuPointerGetAttribute: the driver may still hold a registration
  // that a program's own unpinning failed to drop (memory moved by ndarray.resize), for pages the
  // address no longer maps, and that lookup fails (an API error) on every pageable pointer.
  bool is_pinned(const void* p, std::size_t bytes) {
    return pinned_pool_->contains(p, bytes) || pins_->contains(p, bytes);
  }

  void* pinned(Pinned& p, std::size_t bytes) {
    if (p.bytes >= bytes) return p.p;
    if (p.p) cu_.MemFreeHost(p.p);
    p = Pinned{};
    p.cu = &cu_;
    const std::size_t round = std::max<std::size_t>(bytes, 1 << 20);
    cu_check(cu_.MemHostAlloc(&p.p, round, 0), "cuMemHostAlloc (pinned staging)",
             where_ + " for " + std::to_string(round) + " bytes");
    p.bytes = round;
    return p.p;
  }

  // ---- kernels -----------------------------------------------------------------------------------
  // A launch knob's value, or `fallback` where it is not set: looked up among the PORTMAT_CUDA_
  // variables that ready() collected at the start of this call (docs/cuda.md, "Knobs").
  long knob(const char* name, long fallback) const { return knobs_.value(name, fallback); }
  const char* knob_text(const char* name) const { return knobs_.text(name); }

  // What launch() runs for a product: the thin kernels' choice and the tile model's (float32), or
  // the dtype's tile. The plans of recent shapes are kept (the model costs about a microsecond, a
  // fair part of a small product's host time) while the knobs stay as they were (ready()).
  using Plan = F32Plan;
  Plan plan(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, bool whole) {
    const PlanKey key{m, n, k, static_cast<int>(dtype) * 8 + a_col * 4 + b_col * 2 + whole};
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    Plan p{};
    p.tile = choose_tile(dtype, m, n, k, whole);
    if (dtype == DType::f32) p = choose_f32_plan(m, n, k, a_col, b_col, info_.compute_units, p.tile, family_force());
    if (plans_.size() >= kMaxPlans) plans_.clear();
    plans_.emplace(key, p);
    return p;
  }

  // The tile of a product (and for float32 whether its tiles are all shared stream-K): float64 and
  // the integers have one tile each; float32 follows the model of tile_choice.cpp, which weighs
  // 128x256 (the fastest per SM: on its own and on launch()'s hybrid grid from a wave of tiles up;
  // H200 49.6-52 TFLOP/s at n = 2048-8192, gemm_tiles.h), 64x128, 128x64 (both also stream-K)
  // and 64x64 by the waves of each on this GPU's SMs. PORTMAT_CUDA_TILE names one instead.
  TileChoice choose_tile(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, bool whole) {
    if (dtype == DType::f64) return {&kF64_64x64, false, 0, 0.0};
    if (dtype == DType::u32) return {&kU32_64x64, false, 0, 0.0};
    if (dtype == DType::u64) return {&kU64_64x64, false, 0, 0.0};
    if (const char* e = knob_text("PORTMAT_CUDA_TILE"))
      if (const GemmTile* t = tile_by_name(e)) return {t, false, 0, 0.0};
    // PORTMAT_CUDA_SPLIT_K=S (with PORTMAT_CUDA_SPLIT_TILE: 64x128, 128x64, 64x64, 64x128_sl or
    // 128x64_sl (the sliced-k tiles' batched kernels, _slb), or 64x64c, the cluster kernel (sm_90, at most
    // kClusterMaxSlices slices); default 64x128): k split in S slices, whatever the model says
    // (measurements, tests).
    if (const long split = knob("PORTMAT_CUDA_SPLIT_K", 0); split > 1) {
      const char* e = knob_text("PORTMAT_CUDA_SPLIT_TILE");
      const std::string name = e ? e : "64x128";
      const GemmTile* t = name == "128x64"      ? &kF32_128x64_fpb
                          : name == "64x64"     ? &kF32_64x64b
                          : name == "64x64c"    ? &kF32_64x64c
                          : name == "64x128_sl" ? &kF32_64x128_slb
                          : name == "128x64_sl" ? &kF32_128x64_slb
                                                : &kF32_64x128_fpb;
      return {t, false, 0, 0.0, split};
    }
    const int sliced = static_cast<int>(knob("PORTMAT_CUDA_SLICED", 2));
    if (!clusters()) return choose_f32_tile(m, n, k, info_.compute_units, warp_specialized(), whole, {}, sliced);
    return choose_f32_tile(m, n, k, info_.compute_units, warp_specialized(), whole,
                           [this](const GemmTile& t, int slices, bool spread) { return cluster_room(t, slices, spread); },
                           sliced);
  }

  // Every kernel launch of this backend. On sm_90 and later with cuLaunchKernelEx, a programmatic
  // dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): the kernel is launched
  // once the blocks of the kernel ahead of it on the stream have exited, and each of its blocks
  // waits at its entry (wait_for_prior_grid, kernels/gemm_common.cuh) until that kernel's writes
  // are visible. What it saves is part of the gap between two kernels of a stream, the launch
  // latency that a CUDA graph removes (docs/cuda.md, "Launches that overlap": H100, session 43, us,
  // plain / PDL: 512^3 16.1 / 14.3, 640^3 23.8 / 22.0, 768^3 35.5 / 33.6, (16 x 65536) @ (65536 x
  // 16) 17.7 / 16.0). `more` adds an attribute: split-K's cluster shape. PORTMAT_CUDA_PDL=0
  // launches plainly (measurements). A driver that refuses the attribute with a launch error gets
  // plain launches from then on (of that kind: alone, or beside a cluster shape).
  CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned threads, unsigned smem, CUstream stream,
                         void** params, const CUlaunchAttribute* more = nullptr) {
    std::atomic<bool>& works = more ? pdl_with_more_works_ : pdl_works_;
    const bool pdl = cc_major_ >= 9 && cu_.LaunchKernelEx && works && knob("PORTMAT_CUDA_PDL", 1) != 0;
    if (!pdl && !more) return cu_.LaunchKernel(f, gx, gy, 1, threads, 1, 1, smem, stream, params, nullptr);
    CUlaunchAttribute attrs[2]{};  // `more`, then the PDL attribute
    unsigned count = 0;
    if (more) attrs[count++] = *more;
    if (pdl) {
      attrs[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[count++].value.programmaticStreamSerializationAllowed = 1;
    }
    CUlaunchConfig config{};
    config.gridDimX = gx, config.gridDimY = gy, config.gridDimZ = 1;
    config.blockDimX = threads, config.blockDimY = 1, config.blockDimZ = 1;
    config.sharedMemBytes = smem;
    config.hStream = stream;
    config.attrs = attrs, config.numAttrs = count;
    const CUresult r = cu_.LaunchKernelEx(&config, f, params, nullptr);
    if (pdl && (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE)) {
      works = false;  // launch-time refusals are not sticky: the same launch, plainly
      return launch_kernel(f, gx, gy, threads, smem, stream, params, more);
    }
    return r;
  }

  // Split-K may be one launch of a cluster kernel (sm_90 and later, a driver with cuLaunchKernelEx
  // and cuOccupancyMaxActiveClusters; PORTMAT_CUDA_CLUSTER=0 keeps the two launches: measurements).
  bool clusters() const {
    return cc_major_ >= 9 && cu_.LaunchKernelEx && cu_.OccupancyMaxActiveClusters &&
           knob("PORTMAT_CUDA_CLUSTER", 1) != 0;
  }

  // How many clusters of `slices` blocks of cluster kernel t this GPU runs at once (the model's
  // ClusterRoom): asked of the driver once per kernel, size and spread (0 where it says none or
  // fails). spread: with one block an SM, asked as if each block took over half of an SM's shared
  // memory (the kernel's limit raised for the question, then put back); where the driver cannot
  // say, the packed room over min_blocks.
  std::int64_t cluster_room(const GemmTile& t, int slices, bool spread) {
    int& room = cluster_room_[{&t, slices * 2 + spread}];
    if (room != 0) return std::max(room, 0);  // asked before (-1: none)
    const CUfunction f = function(t, false, false);
    int n = 0;
    if (!spread) {
      n = clusters_at_once(f, slices, t.threads(), t.smem_bytes());
    } else {
      const int half = smem_per_sm_ / 2 + 1;
      if (half > t.smem_bytes() && half <= smem_optin_ &&
          cu_.FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, half) == CUDA_SUCCESS) {
        n = clusters_at_once(f, slices, t.threads(), half);
        cu_check(cu_.FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, t.smem_bytes()),
                 "cuFuncSetAttribute(max dynamic shared memory)", where_);
      }
      if (n <= 0) n = static_cast<int>(cluster_room(t, slices, false) / std::max(1, t.min_blocks));
    }
    return (room = n > 0 ? n : -1) > 0 ? room : 0;
  }

  // How many clusters of `slices` blocks of thin kernel f run at once (asked of the driver once;
  // 0 where it says none or fails).
  std::int64_t thin_cluster_room(CUfunction f, bool dots, int sc_index, int slices) {
    int& room = thin_cluster_room_[dots][sc_index][slices - 1];
    if (room != 0) return std::max(room, 0);
    const int n = clusters_at_once(f, slices, 256, 0);
    return (room = n > 0 ? n : -1) > 0 ? room : 0;
  }

  // The launch attribute of a grid whose clusters are `slices` blocks along y (a column of slices).
  static CUlaunchAttribute cluster_shape(int slices) {
    CUlaunchAttribute shape{};
    shape.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    shape.value.clusterDim.x = 1, shape.value.clusterDim.y = static_cast<unsigned>(slices);
    shape.value.clusterDim.z = 1;
    return shape;
  }

  // The driver's count of such clusters of kernel f (threads a block, smem bytes of dynamic shared
  // memory) that run at once; 0 where it says none or fails.
  int clusters_at_once(CUfunction f, int slices, int threads, int smem) {
    CUlaunchAttribute shape = cluster_shape(slices);
    CUlaunchConfig config{};
    config.gridDimX = 1, config.gridDimY = static_cast<unsigned>(slices), config.gridDimZ = 1;
    config.blockDimX = static_cast<unsigned>(threads), config.blockDimY = 1, config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(smem);
    config.attrs = &shape, config.numAttrs = 1;
    int n = 0;
    return cu_.OccupancyMaxActiveClusters(&n, f, &config) == CUDA_SUCCESS ? n : 0;
  }

  // What the knobs force on the float32 kernel families (choose_f32_plan):
  //  - PORTMAT_CUDA_THIN, _RESIDENT, _SHORT_K: unset, the model decides; 0 never; 1 wherever the
  //    family can run (measurements, tests); all three 0 where PORTMAT_CUDA_TILE or
  //    PORTMAT_CUDA_SPLIT_K forces the tiles;
  //  - PORTMAT_CUDA_THIN_WK=0: thin_dots where the model would take thin_dots_wk;
  //  - PORTMAT_CUDA_THIN_SLICES=S: a thin product's k in about S slices, whatever the model says;
  //  - PORTMAT_CUDA_RESIDENT_COLS: the resident form's columns (64 or 32).
  FamilyForce family_force() const {
    FamilyForce f;
    if (knob_text("PORTMAT_CUDA_TILE") || knob("PORTMAT_CUDA_SPLIT_K", 0) > 1) {
      f.thin = f.short_k = f.resident = 0;
    } else {
      auto family = [&](const char* name) {
        const long v = knob(name, -1);
        return v == 0 || v == 1 ? static_cast<int>(v) : -1;
      };
      f.thin = family("PORTMAT_CUDA_THIN");
      f.short_k = family("PORTMAT_CUDA_SHORT_K");
      f.resident = family("PORTMAT_CUDA_RESIDENT");
    }
    f.resident_cols = static_cast<int>(knob("PORTMAT_CUDA_RESIDENT_COLS", 0));
    f.thin_wk = knob("PORTMAT_CUDA_THIN_WK", 1) != 0;
    f.thin_slices = knob("PORTMAT_CUDA_THIN_SLICES", 0);
    return f;
  }

  // The data-parallel kernel of a stream-K tile's shape: _ws for _wsk, _fp for the _sk ones.
  static const GemmTile& data_parallel_partner(const GemmTile& t) {
    const GemmTile& dp = &t == &kF32_128x256_wsk ? kF32_128x256_ws
                         : &t == &kF32_128x256_sk ? kF32_128x256_fp
                         : &t == &kF32_64x128_sk  ? kF32_64x128_fp
                         : &t == &kF32_128x64_sk  ? kF32_128x64_fp
                                                  : t;
    if (&dp == &t || dp.bm != t.bm || dp.bn != t.bn) throw std::logic_error("CUDA gemm: no data-parallel partner");
    return dp;
  }

  // The warp-specialized kernels (_ws, _wsk: setmaxnreg) exist as sm_90a machine code only: H100
  // and H200. PORTMAT_CUDA_WS=0 turns them off there.
  bool ws_capable() const { return cc_major_ == 9 && cc_minor_ == 0; }
  bool warp_specialized() const { return ws_capable() && knob("PORTMAT_CUDA_WS", 1) != 0; }

  CUfunction module_function(const std::string& name) {
    CUfunction f = nullptr;
    cu_check(cu_.ModuleGetFunction(&f, module_, name.c_str()),
             ("cuModuleGetFunction(" + name + ")").c_str(), where_);
    return f;
  }

  // A kernel of the module by name, looked up once.
  CUfunction named_function(const std::string& name) {
    if (auto it = functions_.find(name); it != functions_.end()) return it->second;
    return functions_.emplace(name, module_function(name)).first->second;
  }

  // A kernel of the module that takes `smem_bytes` of dynamic shared memory, looked up, checked
  // against the device and granted its shared memory the first time it is asked for (cached only
  // then: a kernel the device cannot run fails every time). sm90_only: it exists as sm_90a machine
  // code only (setmaxnreg, wgmma).
  CUfunction smem_function(const std::string& name, int smem_bytes, bool sm90_only = false) {
    if (auto it = functions_.find(name); it != functions_.end()) return it->second;
    if (sm90_only && !ws_capable())
      throw DeviceError(name + " needs an sm_90 GPU (H100, H200); " + where_ + " is sm_" +
                        std::to_string(cc_major_) + std::to_string(cc_minor_));
    CUfunction f = module_function(name);
    if (smem_bytes > smem_optin_)
      throw DeviceError(name + " needs " + std::to_string(smem_bytes) + " bytes of shared memory; " + where_ +
                        " allows " + std::to_string(smem_optin_));
    cu_check(cu_.FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
             "cuFuncSetAttribute(max dynamic shared memory)", where_);
    return functions_.emplace(name, f).first->second;
  }

  // A gemm kernel of tile t and layout (smem_function), also cached by tile.
  CUfunction function(const GemmTile& t, bool a_col, bool b_col) {
    CUfunction& cached = tile_functions_[{&t, a_col * 2 + b_col}];
    if (cached) return cached;
    const std::string name = std::string(t.name) + "_" + (a_col ? "c" : "r") + (b_col ? "c" : "r");
    return cached = smem_function(name, t.smem_bytes(), t.producer_warps != 0);
  }

  // c (row-major, ldc) = a @ b on device pointers that already include the offsets. whole: the
  // launch is the whole product, alone on the GPU (device-resident), not one of the NumPy path's
  // row chunks, whose kernels overlap on two streams. accumulate: c += a @ b (float32 only; the
  // NumPy path's k-split pieces).
  // The kernels' arguments for tile t over (m x k) @ (k x n), matrices x_step elements apart in a
  // stack: vector loads where the pointers, leading dimensions and steps allow, the block swizzle's
  // group (PORTMAT_CUDA_GROUP_M), no stream-K part (sk_first = every tile, which launch() changes).
  GemmArgs gemm_args(const GemmTile& t, CUdeviceptr a, const core::DeviceMatrix& am, std::int64_t a_step,
                     CUdeviceptr b, const core::DeviceMatrix& bm, std::int64_t b_step, CUdeviceptr c,
                     std::int64_t ldc, std::int64_t c_step, std::int64_t m, std::int64_t n, std::int64_t k) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
      throw std::invalid_argument("CUDA gemm: dimensions beyond 2^31 - 1 are not supported");
    const std::size_t es = dtype_size(am.dtype);
    auto aligned = [&](CUdeviceptr p, std::int64_t ld, std::int64_t step) {
      return p % 16 == 0 && (ld * es) % 16 == 0 && (step * es) % 16 == 0;
    };
    GemmArgs args{};
    args.a = reinterpret_cast<const void*>(a);
    args.b = reinterpret_cast<const void*>(b);
    args.c = reinterpret_cast<void*>(c);
    args.lda = am.ld, args.ldb = bm.ld, args.ldc = ldc;
    args.m = static_cast<int>(m), args.n = static_cast<int>(n), args.k = static_cast<int>(k);
    args.a_vec = aligned(a, am.ld, a_step), args.b_vec = aligned(b, bm.ld, b_step);
    args.c_vec = aligned(c, ldc, c_step);
    args.group_m = static_cast<int>(std::max(1L, knob("PORTMAT_CUDA_GROUP_M", 8)));
    args.stride_a = a_step, args.stride_b = b_step, args.stride_c = c_step;
    const std::int64_t tiles = ((m + t.bm - 1) / t.bm) * ((n + t.bn - 1) / t.bn);
    if (tiles > INT32_MAX) throw std::invalid_argument("CUDA gemm: too many tiles");
    args.sk_first = static_cast<int>(tiles), args.sk_tiles = 0, args.sk_blocks = 0;
    return args;
  }

  void launch(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, CUdeviceptr b,
              const core::DeviceMatrix& bm, CUdeviceptr c, std::int64_t ldc, std::int64_t m,
              std::int64_t n, std::int64_t k, bool whole = false, bool accumulate = false) {
    const std::size_t es = dtype_size(am.dtype);
    if (accumulate && am.dtype != DType::f32)
      throw std::logic_error("CUDA gemm: accumulating launches are float32 only");
    if (am.dtype == DType::f32 && core::current_precision() != Precision::float32)
      return launch_tc(stream, a, am, 0, b, bm, 0, c, ldc, 0, m, n, k, 1, accumulate);
    const Plan planned = plan(am.dtype, m, n, k, am.col_major, bm.col_major, whole);
    if (!accumulate && planned.thin.use) return launch_thin(stream, a, am, b, bm, c, ldc, m, n, k, planned.thin);
    if (!accumulate && planned.resident.use)
      return launch_resident(stream, a, am, b, bm, c, ldc, m, n, k, planned.resident);
    if (!accumulate && planned.short_k.use)
      return launch_short_k(stream, a, am, b, bm, c, ldc, m, n, k, planned.short_k);
    const TileChoice choice = accumulate ? TileChoice{&kF32_128x256_fpa, false, 0, 0.0} : planned.tile;
    if (choice.split > 1 && am.dtype == DType::f32 && launch_split(stream, a, am, b, bm, c, ldc, m, n, k, choice))
      return;
    const GemmTile& t = batched_partner(*choice.tile);  // a cluster kernel's slices came to one
    GemmArgs args = gemm_args(t, a, am, 0, b, bm, 0, c, ldc, 0, m, n, k);
    const std::int64_t tiles = args.sk_first;
    auto run = [&](const GemmTile& tile, std::int64_t blocks, CUstream on) {
      if (blocks <= 0) return;
      void* params[] = {&args};
      if (const CUresult r = launch_kernel(function(tile, am.col_major, bm.col_major), static_cast<unsigned>(blocks), 1,
                                           tile.threads(), tile.smem_bytes(), on, params))
        cu_check(r, "cuLaunchKernel(gemm)", product_text(where_, m, n, k, std::string(" with ") + tile.name));
    };
    if (!t.stream_k) return run(t, tiles, stream);
    // Hybrid grid against wave quantization (gemm_tiles.h): with w SMs and r = tiles % w > 0, the
    // last r tiles (swizzled indices) are shared slab by slab by the w blocks of the stream-K
    // kernel; the tiles before them (whole waves) are one launch of the data-parallel kernel of the
    // same shape, whose blocks compute tile blockIdx.x. Two launches rather than one kernel with
    // both kinds of block: the data-parallel blocks then run _fp's own code. Measured on the H200
    // (docs/cuda.md, session 4) against three variants: the stream-K launch on a second
    // stream, overlapping the last data-parallel wave (-1% at n = 4096); stream-K blocks sharing a
    // wave more (r + w tiles: -2% at 4096, -0.2% at 8192); the stream-K launch first (the same).
    // A whole product of at most kSkAllWaves waves shares every tile instead (one launch of the
    // stream-K kernel): there the boundary between two launches (the stream-K kernel starts only
    // once the slowest data-parallel block has ended) costs more than the stream-K blocks lose by
    // working at unrelated k (fewer shared panels in L2). H200, 2026-11-29, same run
    // (record 2026-11-29_h200_s6_sk_all_rule.json), every tile shared against the two
    // launches: 3072 (2.2 waves) 1162 / 1198 us, 4096 (3.9) 2703 / 2730, 5120 (6.1) 5291 / 5350,
    // 8192 (15.5) 21470 / 21358; 6144 (8.7 waves, another run) +1.5%. Measured and dropped
    // (record 2026-11-29_h200_s6_pdl_layout.json, _dp_first.json): the stream-K kernel as a programmatic
    // dependent launch (sm_90; its blocks may start as the last data-parallel ones end): 1%
    // slower at 4096; one launch that runs the whole tiles first, k in step, then the stream-K
    // parts: slower code for the stream-K kernel (227 registers against 247, 2% slower).
    // PORTMAT_CUDA_SK_UNITS replaces the SM count (tests: small shapes through the stream-K path);
    // PORTMAT_CUDA_SK_ALL=1 shares every tile of any product, 0 none (measurements).
    const GemmTile& dp = data_parallel_partner(t);
    const std::int64_t w = knob("PORTMAT_CUDA_SK_UNITS", choice.sk_blocks > 0 ? choice.sk_blocks
                                                                                 : info_.compute_units * t.min_blocks);
    const std::int64_t k_tiles = (k + t.bk - 1) / t.bk;
    const long all_env = knob("PORTMAT_CUDA_SK_ALL", -1);
    const std::int64_t all_waves = t.producer_warps ? kWsSkAllWaves : kSkAllWaves;
    const bool all = all_env == 1 || (all_env == -1 && (choice.share_all ||
                                                        (whole && tiles > w && tiles <= all_waves * w)));
    const std::int64_t sk_tiles = all ? tiles : w > 0 ? tiles % w : 0;  // w <= 0: data-parallel below
    // A block's run must be worth a pipeline's start and end: at least kMinSkSlabs slabs. Less
    // than a wave of tiles stays data-parallel (the NumPy path's row chunks, whose kernels
    // overlap on two streams, are such problems).
    if (es != 4 || w <= 0 || w > kMaxSkBlocks || sk_tiles == 0 || (tiles <= w && !all) ||
        sk_tiles * k_tiles < w * kMinSkSlabs)
      return run(dp, tiles, stream);
    // Every tile shared: groups of 4 tile rows (kSkAllGroupM) rather than 8, unless
    // PORTMAT_CUDA_GROUP_M sets a positive one. H200, 4096, same run
    // (record 2026-11-29_h200_s6_group_m_skall.json), twice each: 50.97 / 51.01 TFLOP/s against 50.77 /
    // 50.82 (2: 51.01; 16, 32: 50.8-50.9).
    if (all && knob("PORTMAT_CUDA_GROUP_M", 0) <= 0) args.group_m = kSkAllGroupM;
    const std::int64_t first = tiles - sk_tiles;
    args.sk_first = static_cast<int>(first);
    args.sk_tiles = static_cast<int>(sk_tiles);
    args.sk_blocks = static_cast<int>(w);
    args.sk_flags = sk_flags(stream, w);
    run(dp, first, stream);
    run(t, w, stream);
  }

  // Split-K (TileChoice::split): a product too small to fill the GPU with its tiles, or with a long
  // k, runs as a stack of products over slices of k (kc deep, a multiple of the 16-deep slab; the
  // last slice shorter when k asks for it: GemmArgs::k_last), each a full-size partial result in a
  // workspace of this stream, in one launch of a batched kernel (blockIdx.y the slice); a second
  // launch (split_sum, gemm_batched.cuh) adds the parts into c in slice order: deterministic, no
  // waiting between blocks, no zeroing of c. H200, session 14 (docs/cuda.md): a shorter last slice
  // as a launch of its own ran after the stack, not beside it (n = 512 in 3 slices 33.5 us, in 4
  // 17.0); the sum in each tile's last block instead of a second launch was slower everywhere
  // (n = 256: 14.3 against 10.2 us; (64 x 65536) @ (65536 x 64): 137 against 36 us).
  // False (nothing launched) when the workspace would pass kSplitMaxBytes.
  bool launch_split(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, CUdeviceptr b,
                    const core::DeviceMatrix& bm, CUdeviceptr c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                    std::int64_t k, const TileChoice& choice) {
    const std::int64_t kc = split_depth(k, choice.split);
    const std::int64_t full = k / kc, rest = k - full * kc, parts = full + (rest > 0 ? 1 : 0);
    if (parts < 2) return false;
    const std::int64_t a_step = am.col_major ? kc * am.ld : kc, b_step = bm.col_major ? kc : kc * bm.ld;
    auto what = [&](const char* kernel) {
      return product_text(where_, m, n, k, " split in " + std::to_string(parts) + " with " + kernel);
    };
    // One launch: clusters of the parts of a tile (1 x parts x 1 blocks) sum them in shared memory
    // and write c (kernels/gemm_common.cuh, cluster_sum_store). A cluster kernel asked for more
    // slices than a cluster holds (a knob), or on a GPU without clusters, runs as its batched
    // partner below.
    const GemmTile& t = !choice.tile->cluster || (parts <= kClusterMaxSlices && clusters())
                            ? *choice.tile
                            : batched_partner(*choice.tile);
    if (t.cluster) {
      GemmArgs args = gemm_args(t, a, am, a_step, b, bm, b_step, c, ldc, 0, m, n, kc);
      args.k_last = static_cast<int>(rest);
      const CUlaunchAttribute cluster = cluster_shape(static_cast<int>(parts));
      void* params[] = {&args};
      if (const CUresult r = launch_kernel(function(t, am.col_major, bm.col_major), static_cast<unsigned>(args.sk_first),
                                           static_cast<unsigned>(parts), t.threads(), t.smem_bytes(), stream, params,
                                           &cluster))
        cu_check(r, "cuLaunchKernelEx(split-K gemm in clusters)", what(t.name));
      return true;
    }
    const std::size_t part_bytes = static_cast<std::size_t>(m * n) * sizeof(float);
    if (part_bytes * parts > static_cast<std::size_t>(kSplitMaxBytes)) return false;
    const CUdeviceptr w = split_workspace(stream, part_bytes * parts);
    GemmArgs args = gemm_args(t, a, am, a_step, b, bm, b_step, w, n, m * n, m, n, kc);
    const std::int64_t tiles = args.sk_first;
    args.k_last = static_cast<int>(rest);
    void* params[] = {&args};
    if (const CUresult r = launch_kernel(function(t, am.col_major, bm.col_major), static_cast<unsigned>(tiles),
                                         static_cast<unsigned>(parts), t.threads(), t.smem_bytes(), stream, params))
      cu_check(r, "cuLaunchKernel(split-K gemm)", what(t.name));
    SplitSumArgs sum{};
    sum.parts = reinterpret_cast<const void*>(w);
    sum.c = reinterpret_cast<void*>(c);
    sum.ldc = ldc, sum.part_stride = m * n;
    sum.m = static_cast<int>(m), sum.n = static_cast<int>(n), sum.count = static_cast<int>(parts);
    sum.vec = n % 4 == 0 && c % 16 == 0 && ldc % 4 == 0;
    sum.groups = split_sum_groups(sum.count);
    const std::int64_t units = sum.vec ? m * (n / 4) : m * n, per_block = kSplitSumThreads / sum.groups;
    void* sum_params[] = {&sum};
    if (const CUresult r = launch_kernel(named_function("split_sum_f32"),
                                         static_cast<unsigned>((units + per_block - 1) / per_block), 1,
                                         kSplitSumThreads, 0, stream, sum_params))
      cu_check(r, "cuLaunchKernel(split_sum)", what("split_sum_f32"));
    return true;
  }

  // c = a @ b as out (r x s) = L (r x k) . Sh (k x s), the view the thin and resident kernels take,
  // into their arguments (l, ldl, sh, sk, ss, r, s, ors, oss): few columns of c, L = a, Sh = b and
  // out = c; few rows, L = b^T, Sh = a^T and out = c^T. Returns L's pointer.
  template <class Args>
  static CUdeviceptr long_short_view(Args& args, bool few_rows, CUdeviceptr a, const core::DeviceMatrix& am,
                                     CUdeviceptr b, const core::DeviceMatrix& bm, std::int64_t ldc, std::int64_t m,
                                     std::int64_t n) {
    const core::DeviceMatrix& lm = few_rows ? bm : am;
    const CUdeviceptr l = few_rows ? b : a;
    args.l = reinterpret_cast<const void*>(l);
    args.ldl = lm.ld;
    if (few_rows) {  // L(r, kk) = b(kk, r); Sh(kk, s) = a(s, kk); out(r, s) = c(s, r)
      args.sh = reinterpret_cast<const void*>(a);
      args.sk = am.col_major ? am.ld : 1, args.ss = am.col_major ? 1 : am.ld;
      args.r = static_cast<int>(n), args.s = static_cast<int>(m);
      args.ors = 1, args.oss = ldc;
    } else {  // L = a; Sh = b; out = c
      args.sh = reinterpret_cast<const void*>(b);
      args.sk = bm.col_major ? 1 : bm.ld, args.ss = bm.col_major ? bm.ld : 1;
      args.r = static_cast<int>(m), args.s = static_cast<int>(n);
      args.ors = ldc, args.oss = 1;
    }
    return l;
  }

  // A thin product (ThinChoice; kernels/gemm_thin.cuh): c = a @ b as out = L . Sh, in one launch
  // of thin_dots or thin_axpy whose grid rows are slices of k; with more than one slice the
  // partial results go to the split-K workspace (the launches of one stream use it in turn), and
  // the launch's own last blocks (thin_sum_fused) or a second launch, thin_sum, add them into c.
  void launch_thin(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, CUdeviceptr b,
                   const core::DeviceMatrix& bm, CUdeviceptr c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                   std::int64_t k, const ThinChoice& t) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
      throw std::invalid_argument("CUDA gemm: dimensions beyond 2^31 - 1 are not supported");
    ThinArgs args{};
    const CUdeviceptr l = long_short_view(args, t.few_rows, a, am, b, bm, ldc, m, n);
    args.k = static_cast<int>(k);
    args.kslice = static_cast<int>(t.kslice);
    args.vec = l % 16 == 0 && args.ldl % 4 == 0;
    const std::int64_t R = args.r, S = args.s;
    const int sc_index = t.sc == 1 ? 0 : t.sc == 2 ? 1 : t.sc == 4 ? 2 : t.sc == 8 ? 3 : 4;
    CUfunction& f = thin_functions_[t.wk ? 2 : t.dots][sc_index];
    if (!f)
      f = named_function(std::string("thin_") + (t.wk ? "dots_wk" : t.dots ? "dots" : "axpy") + "_f32_s" + std::to_string(t.sc));
    auto what = [&](const char* kernel) {
      return product_text(where_, m, n, k, std::string(" with ") + kernel + (t.dots ? " (dots, " : " (axpy, ") +
                                               std::to_string(t.sc) + " short columns)");
    };
    ThinSumArgs sum{};
    // Where thin_sum_fused says so, the slices are added in the same launch, by the last block of
    // each row of blocks (ThinArgs::counter: the stream's zeroed stream-K flags, one a row of
    // blocks, left cleared); else by a second launch, thin_sum. PORTMAT_CUDA_THIN_FUSED=0: always
    // thin_sum (measurements).
    const std::int64_t row_blocks = (R + t.rows_per_block - 1) / t.rows_per_block;
    // Two or three slices (kThinClusterSlices) of a row of blocks as a cluster (sm_90), where all of
    // the grid's clusters run at once: the parts are added in the blocks' shared memory
    // (thin_cluster_sum), with no count, fences or trip through L2. PORTMAT_CUDA_THIN_CLUSTER=S: up
    // to S slices (at most 8), 0 never (measurements).
    const long cluster_most = std::min<long>(knob("PORTMAT_CUDA_THIN_CLUSTER", kThinClusterSlices), kClusterMaxSlices);
    const bool cluster = t.slices > 1 && t.slices <= cluster_most && !t.wk && clusters() &&
                         thin_cluster_room(f, t.dots, sc_index, static_cast<int>(t.slices)) >= row_blocks;
    const bool fused = !cluster && thin_sum_fused(t, S) && row_blocks <= kMaxSkBlocks &&
                       knob("PORTMAT_CUDA_THIN_FUSED", 1) != 0;
    if (cluster || fused) {  // the launch adds the slices into c itself
      args.cluster = cluster;
      if (fused) args.counter = sk_flags(stream, row_blocks);
      args.c = reinterpret_cast<void*>(c);
      args.crs = args.ors, args.css = args.oss;
    }
    if (t.slices > 1 && !cluster) {  // the parts: [slice][r][s], r contiguous where c's r is
      const CUdeviceptr w = split_workspace(stream, static_cast<std::size_t>(t.slices * R * S) * sizeof(float));
      sum.parts = reinterpret_cast<const void*>(w);
      sum.c = reinterpret_cast<void*>(c);
      sum.part_stride = R * S;
      sum.prs = args.ors == 1 ? 1 : S, sum.pss = args.ors == 1 ? R : 1;
      sum.ors = args.ors, sum.oss = args.oss;
      sum.r = args.r, sum.s = args.s, sum.count = static_cast<int>(t.slices);
      // PORTMAT_CUDA_THIN_SUM_GROUPS=0: every part in one thread's turn (measurements).
      sum.group = knob("PORTMAT_CUDA_THIN_SUM_GROUPS", 1) != 0 ? thin_sum_group(sum.count) : sum.count;
      args.out = reinterpret_cast<void*>(w);
      args.ors = sum.prs, args.oss = sum.pss, args.out_step = R * S;
    } else {
      args.out = reinterpret_cast<void*>(c);
    }
    void* params[] = {&args};
    const CUlaunchAttribute shape = cluster_shape(static_cast<int>(t.slices));
    if (const CUresult r = launch_kernel(f, static_cast<unsigned>(row_blocks), static_cast<unsigned>(t.slices), 256, 0,
                                         stream, params, cluster ? &shape : nullptr))
      cu_check(r, "cuLaunchKernel(thin gemm)", what("a thin kernel"));
    if (t.slices <= 1 || fused || cluster) return;
    void* sum_params[] = {&sum};
    const std::int64_t per_block = thin_sum_block_elements(sum.group < sum.count);
    if (const CUresult r = launch_kernel(named_function("thin_sum_f32"), static_cast<unsigned>((R * S + per_block - 1) / per_block),
                                         1, kThinSumThreads, 0, stream, sum_params))
      cu_check(r, "cuLaunchKernel(thin_sum)", what("thin_sum_f32"));
  }

  // A product with a short k (ShortKChoice; kernels/gemm_short_k.cuh): one launch, blocks of
  // rt * 256 / ct rows by 4 * ct columns of c.
  void launch_short_k(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, CUdeviceptr b,
                      const core::DeviceMatrix& bm, CUdeviceptr c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                      std::int64_t k, const ShortKChoice& t) {
    if (m > INT32_MAX || n > INT32_MAX || k > kShortKMax)
      throw std::logic_error("CUDA gemm: a short-k product out of the kernel's range");
    ShortKArgs args{};
    args.a = reinterpret_cast<const void*>(a);
    args.b = reinterpret_cast<const void*>(b);
    args.c = reinterpret_cast<void*>(c);
    args.lda = am.ld, args.ldb = bm.ld, args.ldc = ldc;
    args.m = static_cast<int>(m), args.n = static_cast<int>(n), args.k = static_cast<int>(k);
    args.a_col = am.col_major, args.b_col = bm.col_major;
    args.c_vec = c % 16 == 0 && ldc % 4 == 0;
    // 16-byte loads: aligned, and k a multiple of 4 where k is the operand's contiguous index.
    args.a_vec = a % 16 == 0 && am.ld % 4 == 0 && (am.col_major || k % 4 == 0);
    args.b_vec = b % 16 == 0 && bm.ld % 4 == 0 && (!bm.col_major || k % 4 == 0);
    const int kind = t.ct == 32 ? (t.rt == 2 ? 2 : 1) : 0;
    CUfunction& f = short_k_functions_[kind];
    if (!f) f = named_function(kind == 2 ? "short_k_f32_c32_r2" : kind == 1 ? "short_k_f32_c32" : "short_k_f32_c4");
    const std::int64_t tm = t.rt * (256 / t.ct), tn = 4 * t.ct;
    void* params[] = {&args};
    if (const CUresult r = launch_kernel(f, static_cast<unsigned>((m + tm - 1) / tm),
                                         static_cast<unsigned>((n + tn - 1) / tn), 256, 0, stream, params))
      cu_check(r, "cuLaunchKernel(short-k gemm)", product_text(where_, m, n, k, " with short_k"));
  }

  // A product with k at most kResidentMaxK and a side of c at most kResidentMax (ResidentChoice; kernels/
  // gemm_resident.cuh): one launch of t.blocks blocks walking L's 128-row tiles. The views as in
  // launch_thin: few columns, L = a and out = c; few rows, L = b^T and out = c^T.
  void launch_resident(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, CUdeviceptr b,
                       const core::DeviceMatrix& bm, CUdeviceptr c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                       std::int64_t k, const ResidentChoice& t) {
    if (m > INT32_MAX || n > INT32_MAX || k > kResidentMaxK || std::min(m, n) > t.sc || t.blocks <= 0)
      throw std::logic_error("CUDA gemm: a resident-operand product out of the kernel's range");
    ResidentArgs args{};
    const CUdeviceptr l = long_short_view(args, t.few_rows, a, am, b, bm, ldc, m, n);
    args.out = reinterpret_cast<void*>(c);
    args.k = static_cast<int>(k);
    args.vec = l % 16 == 0 && args.ldl % 4 == 0;
    args.out_vec = c % 16 == 0 && ldc % 4 == 0;
    const bool s32 = t.sc == 32;
    const char* name = t.lk ? (s32 ? "resident_f32_lk_s32" : "resident_f32_lk") : (s32 ? "resident_f32_lr_s32" : "resident_f32_lr");
    CUfunction f = smem_function(name, resident_smem_bytes(t.lk, kResidentMaxK, t.sc));  // the most any k takes
    void* params[] = {&args};
    if (const CUresult r = launch_kernel(f, static_cast<unsigned>(t.blocks), 1, 256,
                                         resident_smem_bytes(t.lk, static_cast<int>(k), t.sc), stream, params))
      cu_check(r, "cuLaunchKernel(resident gemm)", product_text(where_, m, n, k, std::string(" with ") + name));
  }

  // The split-K workspace of launches on `stream` (one per stream, like the stream-K flags: the
  // launches of one stream run one after the other). It grows to what a product needs (at most
  // kSplitMaxBytes, tile_choice.hpp); before a larger one replaces it, the stream's earlier work (which may still
  // use it) is waited for.
  CUdeviceptr split_workspace(CUstream stream, std::size_t bytes) {
    std::unique_ptr<CuBuffer>& ws = stream == kstream_[0]   ? split_ws_[0]
                                    : stream == kstream_[1] ? split_ws_[1]
                                                            : foreign_split_ws_[stream];
    if (!ws || ws->bytes() < bytes) {
      if (ws) cu_check(cu_.StreamSynchronize(stream), "cuStreamSynchronize (split-K workspace)", where_);
      ws.reset();
      ws = create_buffer(std::min(static_cast<std::size_t>(kSplitMaxBytes), std::max(bytes, std::size_t(4) << 20)));
    }
    return ws->ptr();
  }

  // c[i] = a[i] @ b[i] for i < count, matrices x_step elements apart (0: the same matrix for
  // every i), in as few launches as the grid allows (gemm_batched.cuh): the small kernel when c's
  // matrices are at most kSmallMax square (one 32x32 tile per block: a 64x64 tile would idle over
  // a 32x32 product), else the data-parallel tiles with blockIdx.y choosing the matrix; 128x256
  // (_fpb) once the stack has two waves of them, 64x64 before. One matrix: launch().
  void launch_batch(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, std::int64_t a_step,
                    CUdeviceptr b, const core::DeviceMatrix& bm, std::int64_t b_step, CUdeviceptr c,
                    std::int64_t ldc, std::int64_t c_step, std::int64_t m, std::int64_t n, std::int64_t k,
                    std::int64_t count, bool whole) {
    if (count == 1) return launch(stream, a, am, b, bm, c, ldc, m, n, k, whole);
    if (count <= 0) return;
    if (am.dtype == DType::f32 && core::current_precision() != Precision::float32)
      return launch_tc(stream, a, am, a_step, b, bm, b_step, c, ldc, c_step, m, n, k, count, false);
    const bool f64 = am.dtype == DType::f64;
    const bool integer = am.dtype == DType::u32 || am.dtype == DType::u64;
    const std::size_t es = dtype_size(am.dtype);
    const bool small = m <= kSmallMax && n <= kSmallMax && !integer;
    const std::int64_t wide_tiles = ((m + 127) / 128) * ((n + 255) / 256);
    const GemmTile& t = am.dtype == DType::u32 ? kU32_64x64b
                        : am.dtype == DType::u64 ? kU64_64x64b
                        : small ? (f64 ? kF64_small : kF32_small)
                        : f64 ? kF64_64x64b
                        : wide_tiles * count >= 2 * info_.compute_units ? kF32_128x256_fpb
                                                                       : kF32_64x64b;
    GemmArgs args = gemm_args(t, a, am, a_step, b, bm, b_step, c, ldc, c_step, m, n, k);
    const std::int64_t tiles = args.sk_first;
    // Matrices per launch: the small kernel's 1-D grid holds 2^31 - 1 blocks, gridDim.y 65535.
    const std::int64_t per_launch = small ? INT32_MAX / tiles : 65535;
    CUfunction f = function(t, am.col_major, bm.col_major);
    for (std::int64_t i0 = 0; i0 < count; i0 += per_launch) {
      const std::int64_t nm = std::min(per_launch, count - i0);
      args.a = reinterpret_cast<const void*>(a + static_cast<std::size_t>(i0 * a_step) * es);
      args.b = reinterpret_cast<const void*>(b + static_cast<std::size_t>(i0 * b_step) * es);
      args.c = reinterpret_cast<void*>(c + static_cast<std::size_t>(i0 * c_step) * es);
      void* params[] = {&args};
      if (const CUresult r = launch_kernel(f, static_cast<unsigned>(small ? nm * tiles : tiles),
                                           small ? 1 : static_cast<unsigned>(nm), t.threads(), t.smem_bytes(), stream,
                                           params))
        cu_check(r, "cuLaunchKernel(batched gemm)", product_text(where_, m, n, k, std::string(" with ") + t.name, count));
    }
  }

  // The precision modes (issue 18): c[i] (+)= a[i] @ b[i] for i < count on the tensor-core kernels
  // (kernels/gemm_tc.cuh; gemm_tc_{tf32,f32x3,bf16}_{rr,rc,cr,cc}), one kTc tile per block on a 1-D
  // swizzled grid, blockIdx.y the matrix (count 1: one product; x_step 0: the same matrix). The
  // mode is core::current_precision() (backend.hpp: read here, on the calling thread). No thin,
  // split-K or stream-K path yet: every product, however shaped, takes these tiles.
  // accumulate: c += a @ b (matmul_host's k-split pieces).
  void launch_tc(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, std::int64_t a_step, CUdeviceptr b,
                 const core::DeviceMatrix& bm, std::int64_t b_step, CUdeviceptr c, std::int64_t ldc,
                 std::int64_t c_step, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count,
                 bool accumulate) {
    const Precision mode = core::current_precision();
    if (!supports(mode))  // the core checks first (require_precision); this is the backstop
      throw DeviceError(std::string("precision '") + precision_name(mode) + "' is not available on " + where_ + ": " +
                        precision_note(mode));
    // Read (and a bad value refused) for every float32_tc product, whichever kernel then runs it.
    const F32tcKernel f32tc = mode == Precision::float32_tc ? f32tc_kernel() : F32tcKernel::regs128;
    if (const int wg = use_wgmma(mode, m, n, k, count)) {
      const std::size_t es = sizeof(float);
      try {
        for (std::int64_t i = 0; i < count; ++i)  // stacks only when forced (use_wgmma): one product each
          launch_wgmma(stream, a + static_cast<std::size_t>(i * a_step) * es, am,
                       b + static_cast<std::size_t>(i * b_step) * es, bm, c + static_cast<std::size_t>(i * c_step) * es,
                       ldc, m, n, k, mode, f32tc, accumulate);
        return;
      } catch (const OutOfDeviceMemory&) {
        // No room for the pre-pass's copies (wg_workspace fails before anything is launched):
        // gemm_tc needs none. Forced, the error stands.
        if (wg == 2) throw;
      }
    }
    const char* kind = mode == Precision::tf32 ? "tf32" : mode == Precision::float32_tc ? "f32x3" : "bf16";
    const std::string name = std::string("gemm_tc_") + kind + "_" + (am.col_major ? "c" : "r") + (bm.col_major ? "c" : "r");
    CUfunction f = smem_function(name, kTc.smem_bytes());
    const GemmTile shape{"", kTc.bm, kTc.bn, kTc.bk, 0, 0, 0, 0, kTc.stages, 4, kTc.min_blocks};  // gemm_args' tile count
    GemmArgs args = gemm_args(shape, a, am, a_step, b, bm, b_step, c, ldc, c_step, m, n, k);
    args.accumulate = accumulate ? 1 : 0;
    const std::int64_t tiles = args.sk_first;
    const std::size_t es = sizeof(float);
    for (std::int64_t i0 = 0; i0 < count; i0 += 65535) {  // gridDim.y holds 65535 matrices
      const std::int64_t nm = std::min<std::int64_t>(65535, count - i0);
      args.a = reinterpret_cast<const void*>(a + static_cast<std::size_t>(i0 * a_step) * es);
      args.b = reinterpret_cast<const void*>(b + static_cast<std::size_t>(i0 * b_step) * es);
      args.c = reinterpret_cast<void*>(c + static_cast<std::size_t>(i0 * c_step) * es);
      void* params[] = {&args};
      if (const CUresult r = launch_kernel(f, static_cast<unsigned>(tiles), static_cast<unsigned>(nm), kTc.threads(),
                                           kTc.smem_bytes(), stream, params))
        cu_check(r, "cuLaunchKernel(tensor-core gemm)", product_text(where_, m, n, k, " with " + name, count));
    }
  }

  // ---- the Hopper tensor-core kernels (kernels/gemm_wgmma.cuh) --------------------------------------
  // sm_90 (the fatbin's sm_90a code: wgmma, TMA, setmaxnreg) and a driver with cuTensorMapEncodeTiled.
  bool wgmma_capable() const { return cc_major_ == 9 && cc_minor_ == 0 && cu_.TensorMapEncodeTiled != nullptr; }

  // float32_tc's wgmma kernel, by PORTMAT_CUDA_F32TC_KERNEL: `regs` (the default: kWgF32tcDefaultBn),
  // `regs128` or `regs192` (gemm_wgmma_f32tc_n128 / _n192, gemm_wgmma_f32tc.cuh: the tensor cores'
  // sums promoted into a second accumulator set in registers every PORTMAT_CUDA_TC_PROMOTE chunks),
  // `global` (gemm_wgmma_tf32 on the [lo, hi, hi] x [hi, lo, hi] split, the sums added into c every
  // PORTMAT_CUDA_TC_PROMOTE chunks: the first design, 0.97x cuBLAS float32 on the H200).
  enum class F32tcKernel { regs128, regs192, global };
  F32tcKernel f32tc_kernel() const {
    const char* e = knob_text("PORTMAT_CUDA_F32TC_KERNEL");
    const F32tcKernel regs = kWgF32tcDefaultBn == 192 ? F32tcKernel::regs192 : F32tcKernel::regs128;
    if (!e || !*e) return regs;
    const std::string v = e;
    if (v == "regs") return regs;
    if (v == "regs128") return F32tcKernel::regs128;
    if (v == "regs192") return F32tcKernel::regs192;
    if (v == "global") return F32tcKernel::global;
    throw std::invalid_argument("PORTMAT_CUDA_F32TC_KERNEL must be 'regs', 'regs128', 'regs192' or 'global', not '" + v +
                                "'");
  }

  // Whether launch_tc runs a product on the wgmma kernels rather than gemm_tc. PORTMAT_CUDA_TC_KERNEL
  // = mma | wgmma forces one (wgmma refused where it cannot run; a stack then runs one product at a
  // time). Otherwise: sm_90, one product (stacks stay on gemm_tc's one launch), and large enough
  // that the pre-pass's launches and the 128 x 256 tiles pay: kWgMinMacs multiply-adds and both
  // sides of c at least 256 (a GUESS, to be measured: bench/diagnostics/cuda_tc_sweep.py).
  // 0: gemm_tc; 1: wgmma by default; 2: wgmma forced.
  int use_wgmma(Precision mode, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count) {
    const bool fits = m <= kWgMaxRows && n <= kWgMaxRows && k <= kWgMaxRows;
    if (const char* e = knob_text("PORTMAT_CUDA_TC_KERNEL"); e && *e) {
      const std::string v = e;
      if (v == "mma") return 0;
      if (v != "wgmma")
        throw std::invalid_argument("PORTMAT_CUDA_TC_KERNEL must be 'mma' or 'wgmma', not '" + v + "'");
      if (!wgmma_capable())
        throw DeviceError("PORTMAT_CUDA_TC_KERNEL=wgmma: the wgmma kernels need an sm_90 GPU (H100, H200) and a "
                          "driver with cuTensorMapEncodeTiled; " + where_ + " is sm_" + std::to_string(cc_major_) +
                          std::to_string(cc_minor_));
      if (!fits)
        throw std::invalid_argument("PORTMAT_CUDA_TC_KERNEL=wgmma: sides beyond " + std::to_string(kWgMaxRows) +
                                    " are not supported by the wgmma kernels");
      return 2;
    }
    (void)mode;  // every mode: the three share one pipeline (gemm_wgmma.cuh)
    return wgmma_capable() && count == 1 && fits && m >= 256 && n >= 256 &&
                   static_cast<double>(m) * n * k >= kWgMinMacs
               ? 1
               : 0;
  }

  // The wgmma pre-pass's scratch on `stream` (one per stream, as split_workspace), grown on demand
  // after the stream's earlier work (which may still read it) is done. Kept for the device's life.
  CUdeviceptr wg_workspace(CUstream stream, std::size_t bytes) {
    std::unique_ptr<CuBuffer>& ws = stream == kstream_[0]   ? wg_ws_[0]
                                    : stream == kstream_[1] ? wg_ws_[1]
                                                            : foreign_wg_ws_[stream];
    if (!ws || ws->bytes() < bytes) {
      if (ws) cu_check(cu_.StreamSynchronize(stream), "cuStreamSynchronize (wgmma workspace)", where_);
      ws.reset();
      ws = create_buffer(std::max(bytes, std::size_t(4) << 20));
    }
    return ws->ptr();
  }

  // The NumPy path's b, converted once per product. Every row chunk of matmul_host multiplies
  // the same b, and the pre-pass used to convert it again for each (16 chunks at n = 8192: b's
  // pre-pass, ~0.3 ms in tf32, was a third of the 12 ms NumPy-in/out product). While matmul_host
  // runs (wg_b_.whole_src set), a whole-K, non-accumulating launch on its b converts b into
  // wg_b_.buf once, recording `ready` on that stream; the other chunks, on either kernel stream,
  // wait for the event and read the copy. The k-split start's pieces (other k, accumulating) and
  // every other caller keep converting into their stream's workspace. Returns the copy's address,
  // or 0 where the cache does not apply (or its buffer cannot be had: the workspace then serves).
  template <class Prep>
  CUdeviceptr wg_b_copy(CUstream stream, CUdeviceptr b, const core::DeviceMatrix& bm, std::int64_t n, std::int64_t k,
                        Precision mode, int kind, bool accumulate, std::size_t bytes, Prep&& prep) {
    WgB& w = wg_b_;
    if (!w.whole_src || b != w.whole_src || k != w.whole_k || accumulate) return 0;
    if (w.valid && w.n == n && w.ld == bm.ld && w.col_major == bm.col_major && w.mode == mode && w.kind == kind) {
      cu_check(cu_.StreamWaitEvent(stream, w.ready, 0), "cuStreamWaitEvent (wgmma b copy)", where_);
      return w.buf->ptr();
    }
    if (w.valid) return 0;  // another shape or mode of the same b in one product: not cached
    if (!w.buf || w.buf->bytes() < bytes) {
      w.buf.reset();  // nothing reads it: the last matmul_host waited for all its work
      try {
        w.buf = create_buffer(bytes);
      } catch (const OutOfDeviceMemory&) {
        return 0;
      }
    }
    if (!w.ready) w.ready = event();
    prep(w.buf->ptr());
    cu_check(cu_.EventRecord(w.ready, stream), "cuEventRecord", where_);
    w.valid = true, w.n = n, w.ld = bm.ld, w.col_major = bm.col_major, w.mode = mode, w.kind = kind;
    return w.buf->ptr();
  }

  // A 2-D TMA map of a k-major copy (rows x kext elements, dense), box: one 128-byte slab x box_rows,
  // 128-byte swizzle, zero fill outside.
  TmaMap tma_map(CUdeviceptr base, std::int64_t kext, std::int64_t rows, int box_rows, bool bf16) {
    static_assert(sizeof(TmaMap) == sizeof(CUtensorMap) && alignof(TmaMap) == alignof(CUtensorMap),
                  "TmaMap stands for CUtensorMap");
    const std::size_t es = bf16 ? 2 : 4;
    CUtensorMap map{};
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kext), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kext) * es};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(kWg.slab_bytes / es), static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    cu_check(cu_.TensorMapEncodeTiled(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2,
                                      reinterpret_cast<void*>(base), dims, strides, box, elem_strides,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled", where_);
    TmaMap out;
    std::memcpy(&out, &map, sizeof out);
    return out;
  }

  // c (+)= a @ b in `mode` on the wgmma kernels: the pre-pass writes a's and b's k-major copies
  // (rounded, split or bfloat16; gemm_tiles.h, WgPrepArgs) into the stream's workspace, then one
  // launch of the main kernel, persistent (a block per SM): gemm_wgmma_tf32 (tf32; float32_tc with
  // f32tc global) or gemm_wgmma_bf16 over 128 x 256 tiles, or for float32_tc (regs128 / regs192)
  // gemm_wgmma_f32tc_n128 / _n192 over 128 x 128 / 128 x 192 tiles on the [lo, hi] split.
  void launch_wgmma(CUstream stream, CUdeviceptr a, const core::DeviceMatrix& am, CUdeviceptr b,
                    const core::DeviceMatrix& bm, CUdeviceptr c, std::int64_t ldc, std::int64_t m, std::int64_t n,
                    std::int64_t k, Precision mode, F32tcKernel f32tc, bool accumulate) {
    if (m <= 0 || n <= 0) return;
    const bool bf16 = mode == Precision::bfloat16, split = mode == Precision::float32_tc;
    const bool regs = split && f32tc != F32tcKernel::global;  // the register-promotion kernels
    const WgTile& tile = !regs ? kWg : f32tc == F32tcKernel::regs192 ? kWgF32tc192 : kWgF32tc128;
    const std::int64_t es = bf16 ? 2 : 4, slab = kWg.slab_bytes / es;
    const std::int64_t kp = std::max<std::int64_t>(1, (k + slab - 1) / slab) * slab;  // k = 0: one slab of zeros
    const std::int64_t kext = regs ? 2 * kp : split ? 3 * kp : kp;
    const std::size_t a_bytes = (static_cast<std::size_t>(m * kext * es) + 255) / 256 * 256;
    const std::size_t b_bytes = static_cast<std::size_t>(n * kext * es);
    const std::string what = product_text(where_, m, n, k, std::string(" in ") + precision_name(mode) + " (wgmma)");
    // The pre-pass: a as (m x k) rows, b as (n x k) rows (b's columns).
    auto prep = [&](CUdeviceptr src, std::int64_t ld, bool k_contig, std::int64_t rows, int kind, CUdeviceptr dst) {
      WgPrepArgs pa{};
      pa.src = reinterpret_cast<const void*>(src), pa.dst = reinterpret_cast<void*>(dst);
      pa.ld_src = ld, pa.ld_dst = kext;
      pa.rows = static_cast<int>(rows), pa.k = static_cast<int>(k), pa.kp = static_cast<int>(kp);
      pa.k_contig = k_contig ? 1 : 0, pa.kind = kind;
      void* params[] = {&pa};
      if (const CUresult r = launch_kernel(named_function("wg_prep"), static_cast<unsigned>(kp / 32),
                                           static_cast<unsigned>((rows + 31) / 32), kWgPrepThreads, 0, stream, params))
        cu_check(r, "cuLaunchKernel(wg_prep)", what);
    };
    const int a_kind = bf16 ? 4 : regs ? 5 : split ? 2 : 1, b_kind = bf16 ? 4 : regs ? 5 : split ? 3 : 1;
    // b's copy: once per NumPy-path product where wg_b_copy applies, else in the stream's workspace.
    const CUdeviceptr once = wg_b_copy(stream, b, bm, n, k, mode, b_kind, accumulate, b_bytes, [&](CUdeviceptr dst) {
      prep(b, bm.ld, bm.col_major, n, b_kind, dst);
    });
    const CUdeviceptr ws = wg_workspace(stream, a_bytes + (once ? 0 : b_bytes)), ap = ws;
    const CUdeviceptr bp = once ? once : ws + a_bytes;
    prep(a, am.ld, !am.col_major, m, a_kind, ap);
    if (!once) prep(b, bm.ld, bm.col_major, n, b_kind, bp);

    WgArgs args{};
    args.ta = tma_map(ap, kext, m, tile.bm, bf16);
    args.tb = tma_map(bp, kext, n, tile.bn, bf16);
    args.c = reinterpret_cast<void*>(c);
    args.ldc = ldc;
    args.m = static_cast<int>(m), args.n = static_cast<int>(n);
    args.k_slabs = static_cast<int>(kext / slab);
    args.group_m = static_cast<int>(std::max(1L, knob("PORTMAT_CUDA_GROUP_M", 8)));
    args.c_vec = c % 8 == 0 && ldc % 2 == 0;
    args.accumulate = accumulate ? 1 : 0;
    // float32_tc: every PORTMAT_CUDA_TC_PROMOTE chunks of 32 k the tensor cores' chain is cut (their
    // accumulation is not round-to-nearest: one chain over the whole k gave 11x float32's max error
    // on the H200, 3.5e-6 against FFMA's 3.2e-7 at n = 4096). regs: the kernel counts chunks, adding
    // its temporaries into the main set in registers (default kWgF32tcPromoteChunks); global: the
    // kernel counts slabs (3 a chunk), adding its sums into c (default kTcPromoteChunks).
    if (regs)
      args.promote_slabs = static_cast<int>(std::max(0L, knob("PORTMAT_CUDA_TC_PROMOTE", kWgF32tcPromoteChunks)));
    else if (split)
      args.promote_slabs = static_cast<int>(3 * std::max(0L, knob("PORTMAT_CUDA_TC_PROMOTE", kTcPromoteChunks)));
    const std::string name = bf16                                ? "gemm_wgmma_bf16"
                             : !regs                             ? "gemm_wgmma_tf32"
                             : f32tc == F32tcKernel::regs192 ? "gemm_wgmma_f32tc_n192"
                                                                 : "gemm_wgmma_f32tc_n128";
    CUfunction f = smem_function(name, tile.smem_bytes());
    // Persistent: one block per SM (~200-226 KiB of shared memory each), walking the tiles.
    const std::int64_t tiles = ((m + tile.bm - 1) / tile.bm) * ((n + tile.bn - 1) / tile.bn);
    if (tiles > INT32_MAX) throw std::invalid_argument("CUDA gemm: too many tiles");
    const std::int64_t blocks = std::min<std::int64_t>(tiles, std::max(1, info_.compute_units));
    void* params[] = {&args};
    if (const CUresult r = launch_kernel(f, static_cast<unsigned>(blocks), 1, WgTile::kThreads, tile.smem_bytes(),
                                         stream, params))
      cu_check(r, ("cuLaunchKernel(" + name + ")").c_str(), what);
  }

  // dst = src cast from one dtype to the other (count elements, kernels/casts.cuh), on stream.
  void launch_cast(CUstream stream, std::uintptr_t src, DType from, std::uintptr_t dst, DType to, std::int64_t count) {
    if (count <= 0) return;
    CUfunction f = named_function("cast_elements");
    CastArgs args{};
    args.src = reinterpret_cast<const void*>(src), args.dst = reinterpret_cast<void*>(dst);
    args.count = count, args.from = static_cast<int>(from), args.to = static_cast<int>(to);
    const std::int64_t blocks = std::min<std::int64_t>((count + 255) / 256, 65535);
    void* params[] = {&args};
    cu_check(launch_kernel(f, static_cast<unsigned>(blocks), 1, 256, 0, stream, params),
             "cuLaunchKernel(cast_elements)", where_ + " from " + dtype_name(from) + " to " + dtype_name(to));
  }

  // B'' (real, row-major 2K x 2N) of each of `count` complex (K x N) matrices of b, step elements
  // apart, into out (gemm_batched.cuh, complex_b_body).
  void complex_b(CUstream stream, CUdeviceptr b, const core::DeviceMatrix& bm, std::int64_t step,
                 std::int64_t count, CUdeviceptr out) {
    const bool f64 = bm.dtype == DType::c128;
    const std::size_t es = dtype_size(bm.dtype);
    const std::int64_t K = bm.rows, N = bm.cols;
    if (K > INT32_MAX || N > INT32_MAX || (K * N + 255) / 256 > INT32_MAX)
      throw std::invalid_argument("CUDA complex gemm: b is too large");
    CUfunction f = named_function(f64 ? "complex_b_f64" : "complex_b_f32");
    ComplexBArgs args{};
    args.ldb = bm.ld, args.k = static_cast<int>(K), args.n = static_cast<int>(N), args.b_col = bm.col_major;
    args.stride_b = step, args.stride_out = 2 * K * N;  // complex elements: 4KN reals
    for (std::int64_t i0 = 0; i0 < count; i0 += 65535) {
      const std::int64_t nm = std::min<std::int64_t>(65535, count - i0);
      args.b = reinterpret_cast<const void*>(b + static_cast<std::size_t>(i0 * step) * es);
      args.out = reinterpret_cast<void*>(out + static_cast<std::size_t>(i0 * 2 * K * N) * es);
      void* params[] = {&args};
      cu_check(launch_kernel(f, static_cast<unsigned>((K * N + 255) / 256), static_cast<unsigned>(nm), 256, 0, stream,
                             params),
               "cuLaunchKernel(complex_b)", where_);
    }
  }

  // The NumPy paths' guard (matmul_host, matmul_batch_host): on leaving the call, normally or by
  // an exception, waits for every stream, so that no copy or kernel outlives the staging, operands
  // and result it uses, and returns the events the call took.
  class InFlight {
   public:
    explicit InFlight(CudaDevice& d) : d_(d) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() {
      for (CUstream s : {d_.in_stream_, d_.kstream_[0], d_.kstream_[1], d_.out_stream_}) d_.cu_.StreamSynchronize(s);
      for (CUevent e : used_) d_.free_events_.push_back(e);
    }
    CUevent event() {  // an event, given back at the end of the call
      used_.push_back(d_.event());
      return used_.back();
    }

   private:
    CudaDevice& d_;
    std::vector<CUevent> used_;
  };

  const CuApi& cu_;
  CUdevice dev_;
  DeviceInfo info_;
  std::string where_;
  int cc_major_ = 0, cc_minor_ = 0, smem_optin_ = 0, smem_per_sm_ = 0;

  std::mutex mu_;  // one caller at a time per device: guards everything below
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUstream in_stream_ = nullptr, kstream_[2] = {nullptr, nullptr}, out_stream_ = nullptr;
  CUevent t0_ = nullptr, t1_ = nullptr;
  std::vector<CUevent> free_events_;
  std::map<std::string, CUfunction> functions_;
  std::map<std::pair<const GemmTile*, int>, CUfunction> tile_functions_;  // function(): tile, layout
  std::map<std::pair<const GemmTile*, int>, int> cluster_room_;  // cluster_room(): tile, 2 slices + spread; -1 none
  int thin_cluster_room_[2][5][kClusterMaxSlices] = {};  // thin_cluster_room(): [dots][short side][slices - 1]; -1 none
  CUfunction thin_functions_[3][5] = {};  // launch_thin: [axpy, dots, dots_wk][short side 1, 2, 4, 8, 16]
  CUfunction short_k_functions_[3] = {};  // launch_short_k: 16 columns a block, 128, 128 with 2 rows a thread
  core::EnvKnobs knobs_{"PORTMAT_CUDA_"};  // the launch knobs set at this call's start (ready())
  std::atomic<bool> pdl_works_{true};     // launch_kernel: the driver took the PDL attribute ...
  std::atomic<bool> pdl_with_more_works_{true};  // ... and beside a cluster shape
  struct PlanKey {
    std::int64_t m, n, k;
    int flags;
    bool operator<(const PlanKey& o) const {
      return std::tie(m, n, k, flags) < std::tie(o.m, o.n, o.k, o.flags);
    }
  };
  static constexpr std::size_t kMaxPlans = 256;
  std::map<PlanKey, Plan> plans_;  // plan(): the recent shapes' plans under the knobs of ready()
  core::BufferPool<CuBuffer> pool_;  // keeps at most a quarter of the device (constructor)
  std::unique_ptr<HostPool> pool_threads_;
  Pinned in_stage_, out_stage_;
  std::shared_ptr<core::HostBlockPool> pinned_pool_;
  std::shared_ptr<HostPins> pins_;
  static constexpr std::int64_t kMaxSkBlocks = 4096;  // stream-K blocks per launch, at most
  // Products of up to this many flops run as stacks (matmul_batch_host): about n = 1260, past
  // which a product's own pipeline hides its transfers better than one stack copy can.
  static constexpr double kStackMaxFlops = 4e9;
  static constexpr std::int64_t kSkAllWaves = 7;      // launch(): every tile shared up to here
  static constexpr std::int64_t kSmallMax = 64;       // launch_batch(): the small kernel up to here
  static constexpr std::int64_t kWsSkAllWaves = 0;    // the same for _wsk: never (gemm_tiles.h)
  static constexpr long kEarlyRows = 2048;            // matmul_host: rows of a in the k-split start
  static constexpr int kSkAllGroupM = 4;              // ... and the block swizzle's group then
  std::unique_ptr<CuBuffer> sk_flags_[2];             // per kernel stream (sk_flags)
  std::map<CUstream, std::unique_ptr<CuBuffer>> foreign_sk_flags_;  // per stream of gemm_on_stream's callers
  std::unique_ptr<CuBuffer> split_ws_[2];             // per kernel stream (split_workspace)
  std::map<CUstream, std::unique_ptr<CuBuffer>> foreign_split_ws_;  // per stream of gemm_on_stream's callers
  std::unique_ptr<CuBuffer> wg_ws_[2];                // per kernel stream (wg_workspace)
  std::map<CUstream, std::unique_ptr<CuBuffer>> foreign_wg_ws_;  // per stream of gemm_on_stream's callers
  struct WgB {                     // wg_b_copy: b's converted copy, once per NumPy-path product
    CUdeviceptr whole_src = 0;     // matmul_host's b while it runs (0: the cache is off)
    std::int64_t whole_k = 0;      // ... and its K
    bool valid = false;            // buf holds b's copy for n, ld, col_major, mode
    std::int64_t n = 0, ld = 0;
    bool col_major = false;
    Precision mode = Precision::float32;
    int kind = 0;                  // the pre-pass's kind (WgPrepArgs)
    CUevent ready = nullptr;       // recorded after the conversion, on its stream
    std::unique_ptr<CuBuffer> buf;
  } wg_b_;
  // use_wgmma: the pre-pass grid holds 65535 x 32 rows; products of fewer multiply-adds stay on gemm_tc.
  static constexpr std::int64_t kWgMaxRows = 65535LL * 32;
  static constexpr double kWgMinMacs = 1 << 30;
  static constexpr long kTcPromoteChunks = 8;  // PORTMAT_CUDA_TC_PROMOTE's default (launch_wgmma)
  std::atomic<double> link_rate_{0};                  // host_bytes_per_s(), once measured
};

// ---- NumPy in, NumPy out ---------------------------------------------------------------------
// The work is cut along M into row chunks (c[i0:i1] = a[i0:i1] @ b). First b goes up, in pieces
// through a ring of pinned staging slots; then for each chunk: the host threads copy a's rows
// into a free staging slot, the copy engine moves them up (in_stream_), a kernel computes the
// chunk's rows of c (alternating two streams, so one chunk's tail overlaps the next's start), the
// other copy engine brings them down into an output slot (out_stream_), and the host threads copy
// them into the result array, which also faults its fresh pages in parallel. Host copies, both
// transfers and the kernels of different chunks all overlap; the host waits on an event only when
// it needs a slot back or a chunk's result. Small problems take the same path with one chunk.
// Operands and results in pinned memory (is_pinned) skip their host copy: the copy engines read
// and write them in place.
void CudaDevice::matmul_host(const core::HostMatrix& a, const core::HostMatrix& b,
                             const MatrixView& c) {
  std::lock_guard<std::mutex> lock(mu_);
  ready();
  const std::size_t es = dtype_size(c.dtype);
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;

  // Device buffers for the whole problem: dense a (its own layout), dense b, dense row-major c.
  Lease da = lease(static_cast<std::size_t>(M * K) * es);
  Lease db = lease(static_cast<std::size_t>(K * N) * es);
  Lease dc = lease(static_cast<std::size_t>(M * N) * es);

  // Whatever happens below, no copy or kernel may outlive this call: they read and write pinned
  // staging that the next call reuses, the operands and the result array.
  InFlight in_flight(*this);
  auto new_event = [&] { return in_flight.event(); };
  // The precision modes' wgmma kernels convert b once for every chunk (wg_b_copy), not per chunk.
  struct WgBScope {
    WgB& w;
    ~WgBScope() { w.whole_src = 0, w.whole_k = 0, w.valid = false; }
  } wg_b_scope{wg_b_};
  wg_b_.whole_src = db->ptr(), wg_b_.whole_k = K, wg_b_.valid = false;

  // Chunking (chunk_rows; PORTMAT_CUDA_THREADS sets the host copy threads).
  const std::size_t chunk_bytes = numpy_chunk_bytes();
  const std::int64_t rows_per_chunk = chunk_rows(M, N, K, static_cast<std::int64_t>(es));
  const std::int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  constexpr int kSlots = 3;  // staging slots per direction: fill one while two are in flight

  // Staging slots hold an a chunk or a piece of b (whole lines of b: rows of a row-major b, columns
  // of a column-major one); one chunk means one piece.
  const std::size_t a_chunk_bytes = static_cast<std::size_t>(rows_per_chunk * K) * es;
  const std::size_t b_line_bytes = static_cast<std::size_t>(b.col_major ? K : N) * es;
  const std::size_t in_slot =
      chunks == 1 ? std::max(a_chunk_bytes, static_cast<std::size_t>(K * N) * es)
                  : std::max(a_chunk_bytes, std::max(chunk_bytes / b_line_bytes, std::size_t(1)) * b_line_bytes);
  const std::size_t out_slot = static_cast<std::size_t>(rows_per_chunk * N) * es;
  const int in_slots = chunks == 1 ? 2 : kSlots, out_slots = chunks == 1 ? 1 : kSlots;
  unsigned char* in_base = nullptr;  // staging, allocated (or grown) at first use
  unsigned char* out_base = nullptr;
  std::vector<CUevent> in_free(in_slots, nullptr);  // recorded after the upload that read the slot
  int in_next = 0;
  auto take_in_slot = [&]() -> unsigned char* {
    const int s = in_next;
    in_next = (in_next + 1) % in_slots;
    if (in_free[s]) cu_check(cu_.EventSynchronize(in_free[s]), "host-to-device copy (cuEventSynchronize)", where_);
    if (!in_base) in_base = static_cast<unsigned char*>(pinned(in_stage_, in_slot * in_slots));
    return in_base + s * in_slot;
  };
  auto release_in_slot = [&](CUstream s) {
    const int slot = (in_next + in_slots - 1) % in_slots;
    in_free[slot] = new_event();
    cu_check(cu_.EventRecord(in_free[slot], s), "cuEventRecord", where_);
  };

  // Operands the copy engines read in place, without the host copy into staging: dense ones in
  // pinned memory (is_pinned: the pinned pool or arrays pinned by pin_host).
  // The result is written in place when it is pinned (alloc_host) and its rows are contiguous.
  const std::size_t a_bytes = static_cast<std::size_t>(M * K) * es;
  const std::size_t b_bytes = static_cast<std::size_t>(K * N) * es;
  auto in_place = [&](const core::HostMatrix& x, std::size_t bytes) {
    return x.ld == (x.col_major ? x.rows : x.cols) && is_pinned(x.data, bytes);
  };
  const bool a_direct = !a.col_major && in_place(a, a_bytes);  // row chunks are contiguous
  const bool b_direct = in_place(b, b_bytes);
  const bool c_direct = c.row_stride == N && is_pinned(c.data, static_cast<std::size_t>(M * N) * es);

  HostPool& pool = *pool_threads_;

  // b goes up in pieces of whole lines (rows of a row-major b, columns of a column-major one): a
  // staging slot's worth each, a multiple of the 16-deep slabs where it can be.
  const std::int64_t b_lines = b.col_major ? N : K, b_line = static_cast<std::int64_t>(b_line_bytes);
  std::int64_t per_piece = std::max<std::int64_t>(1, static_cast<std::int64_t>(in_slot) / b_line);
  if (per_piece >= 16) per_piece -= per_piece % 16;
  const std::int64_t pieces = (b_lines + per_piece - 1) / per_piece;

  // The k-split start. Every chunk's kernel needs all of b, so with b sent first the GPU would
  // idle while it crosses the link (1.2 ms of the 4.7 at n = 4096 on the H200). Instead the first
  // `early` chunks of a go up, then b's pieces (k ranges of a row-major b), and as each piece
  // lands those chunks multiply it: c[chunk] += a[chunk, piece's k] @ b[piece's k, :] (the first
  // piece stored, the others added by the accumulating kernel, in k order on the chunk's stream).
  // The GPU then keeps pace with the link when a piece's products take as long as its copy:
  // 2 * rows * N * k flops at F against 4 * N * k bytes at B, rows = 2F / B: ~1900 on the H200
  // (51 TFLOP/s, 55 GB/s), hence kEarlyRows = 2048 rows of a (PORTMAT_CUDA_EARLY_ROWS; 0: off).
  // float32 (the accumulating kernel's dtype) with a row-major b only (a column-major b's k
  // ranges are strided).
  const long early_rows = env_long("PORTMAT_CUDA_EARLY_ROWS", kEarlyRows);
  const std::int64_t early =
      (c.dtype == DType::f32 && !b.col_major && chunks >= 2 && pieces >= 2 && early_rows > 0)
          ? std::min<std::int64_t>(chunks - 1, (early_rows + rows_per_chunk - 1) / rows_per_chunk)
          : 0;

  CUevent b_ready = nullptr;
  // piece_up(l0, lines): called once piece [l0, l0 + lines) has been queued on in_stream_
  auto upload_b = [&](auto&& piece_up) {
    const auto* src = static_cast<const unsigned char*>(b.data);
    if (b_direct && !early) {  // dense in pinned memory: one copy
      cu_check(cu_.MemcpyHtoDAsync(db->ptr(), src, b_bytes, in_stream_), "cuMemcpyHtoDAsync(b)", where_);
    } else {
      for (std::int64_t l0 = 0; l0 < b_lines; l0 += per_piece) {
        const std::int64_t nl = std::min(per_piece, b_lines - l0);
        if (b_direct) {
          cu_check(cu_.MemcpyHtoDAsync(db->ptr() + l0 * b_line, src + l0 * b_line, nl * b_line, in_stream_),
                   "cuMemcpyHtoDAsync(b)", where_);
        } else {
          unsigned char* slot = take_in_slot();
          copy_2d(pool, slot, b_line, src + l0 * b.ld * es, b.ld * es, nl, b_line);
          cu_check(cu_.MemcpyHtoDAsync(db->ptr() + l0 * b_line, slot, nl * b_line, in_stream_),
                   "cuMemcpyHtoDAsync(b)", where_);
          release_in_slot(in_stream_);
        }
        piece_up(l0, nl);
      }
    }
    b_ready = new_event();
    cu_check(cu_.EventRecord(b_ready, in_stream_), "cuEventRecord", where_);
  };

  auto chunk_rows = [&](std::int64_t ci, std::int64_t& i0, std::int64_t& rows) {
    i0 = ci * rows_per_chunk, rows = std::min(rows_per_chunk, M - i0);
  };
  std::vector<CUevent> chunk_ready(chunks, nullptr);
  auto upload_chunk = [&](std::int64_t ci) {  // a's rows: lines of K, or K columns of `rows`
    std::int64_t i0, rows;
    chunk_rows(ci, i0, rows);
    const auto* asrc = static_cast<const unsigned char*>(a.data);
    const CUdeviceptr a_chunk = da->ptr() + static_cast<std::size_t>(i0 * K) * es;
    if (a_direct) {
      cu_check(cu_.MemcpyHtoDAsync(a_chunk, asrc + i0 * K * es, rows * K * es, in_stream_),
               "cuMemcpyHtoDAsync(a)", where_);
    } else {
      unsigned char* slot = take_in_slot();
      if (a.col_major)
        copy_2d(pool, slot, rows * es, asrc + i0 * es, a.ld * es, K, rows * es);
      else
        copy_2d(pool, slot, K * es, asrc + i0 * a.ld * es, a.ld * es, rows, K * es);
      cu_check(cu_.MemcpyHtoDAsync(a_chunk, slot, rows * K * es, in_stream_), "cuMemcpyHtoDAsync(a)", where_);
      release_in_slot(in_stream_);
    }
    chunk_ready[ci] = new_event();
    cu_check(cu_.EventRecord(chunk_ready[ci], in_stream_), "cuEventRecord", where_);
  };

  // Chunk ci's product over the k range [l0, l0 + nl) once b_part (those lines of b) is up:
  // c[chunk] = a[chunk, range] @ b[range, :] for the first range, += for the later ones (the
  // k-split start's pieces; every other chunk is one range, all of K). Kernels alternate two
  // streams so that one chunk's tail overlaps the next one's start; computed[ci], recorded after
  // the chunk's last range, is the event its download waits for.
  std::vector<CUevent> computed(chunks, nullptr);
  auto multiply = [&](std::int64_t ci, std::int64_t l0, std::int64_t nl, CUevent b_part) {
    std::int64_t i0, rows;
    chunk_rows(ci, i0, rows);
    CUstream ks = kstream_[ci % 2];
    if (l0 == 0) cu_check(cu_.StreamWaitEvent(ks, chunk_ready[ci], 0), "cuStreamWaitEvent", where_);
    cu_check(cu_.StreamWaitEvent(ks, b_part, 0), "cuStreamWaitEvent", where_);
    // The range's first element: column l0 of the chunk's rows (lines of K), or of its K columns
    // of `rows` (column-major); line l0 of b (rows of N), or row l0 of its columns of K.
    const std::int64_t a_at = i0 * K + l0 * (a.col_major ? rows : 1), b_at = l0 * (b.col_major ? 1 : N);
    core::DeviceMatrix am{nullptr, 0, rows, nl, a.col_major ? rows : K, a.col_major, a.dtype};
    core::DeviceMatrix bm{nullptr, 0, nl, N, b.col_major ? K : N, b.col_major, b.dtype};
    launch(ks, da->ptr() + static_cast<std::size_t>(a_at) * es, am, db->ptr() + static_cast<std::size_t>(b_at) * es,
           bm, dc->ptr() + static_cast<std::size_t>(i0 * N) * es, N, rows, N, nl, false, l0 > 0);
    if (l0 + nl == K) {
      computed[ci] = new_event();
      cu_check(cu_.EventRecord(computed[ci], ks), "cuEventRecord", where_);
    }
  };

  struct Pending {
    std::int64_t i0, rows;
    unsigned char* slot;
    CUevent ready;
  };
  std::deque<Pending> pending;
  auto copy_out = [&](const Pending& p) {
    cu_check(cu_.EventSynchronize(p.ready), "gemm or device-to-host copy (cuEventSynchronize)", where_);
    const std::int64_t line_stride = p.rows > 1 ? c.row_stride : N;
    copy_2d(pool, static_cast<unsigned char*>(c.data) + p.i0 * c.row_stride * es, line_stride * es,
            p.slot, N * es, p.rows, N * es);
  };
  auto download = [&](std::int64_t ci) {  // chunk ci's rows of c, once its kernel is done
    std::int64_t i0, rows;
    chunk_rows(ci, i0, rows);
    cu_check(cu_.StreamWaitEvent(out_stream_, computed[ci], 0), "cuStreamWaitEvent", where_);
    const CUdeviceptr c_chunk = dc->ptr() + static_cast<std::size_t>(i0 * N) * es;
    if (c_direct) {  // straight into the result's rows
      cu_check(cu_.MemcpyDtoHAsync(static_cast<unsigned char*>(c.data) + i0 * N * es, c_chunk,
                                   rows * N * es, out_stream_),
               "cuMemcpyDtoHAsync(c)", where_);
      return;
    }
    // The output slot this chunk uses must have been copied out: at most out_slots in flight.
    while (static_cast<int>(pending.size()) >= out_slots) {
      copy_out(pending.front());
      pending.pop_front();
    }
    if (!out_base) out_base = static_cast<unsigned char*>(pinned(out_stage_, out_slot * out_slots));
    unsigned char* oslot = out_base + (ci % out_slots) * out_slot;
    cu_check(cu_.MemcpyDtoHAsync(oslot, c_chunk, rows * N * es, out_stream_), "cuMemcpyDtoHAsync(c)", where_);
    CUevent c_ready = new_event();
    cu_check(cu_.EventRecord(c_ready, out_stream_), "cuEventRecord", where_);
    pending.push_back({i0, rows, oslot, c_ready});
    // Results that are already down go out now, between the copies in.
    while (!pending.empty() && cu_.EventQuery(pending.front().ready) == CUDA_SUCCESS) {
      copy_out(pending.front());
      pending.pop_front();
    }
  };

  // The early chunks' products, piece by piece (see `early` above).
  auto multiply_piece = [&](std::int64_t l0, std::int64_t nl) {
    if (!early) return;
    CUevent landed = new_event();
    cu_check(cu_.EventRecord(landed, in_stream_), "cuEventRecord", where_);
    for (std::int64_t ci = 0; ci < early; ++ci) multiply(ci, l0, nl, landed);
    if (l0 + nl == K)
      for (std::int64_t ci = 0; ci < early; ++ci) download(ci);
  };

  for (std::int64_t ci = 0; ci < early; ++ci) upload_chunk(ci);
  upload_b(multiply_piece);
  for (std::int64_t ci = early; ci < chunks; ++ci) {
    upload_chunk(ci);
    multiply(ci, 0, K, b_ready);
    download(ci);
  }
  while (!pending.empty()) {
    copy_out(pending.front());
    pending.pop_front();
  }
}


// ---- stacks, NumPy in, NumPy out -------------------------------------------------------------
// c[i] = a[i] @ b[i] for a stack of products each too small for matmul_host's own pipeline: the
// stack is cut into chunks of whole matrices (~16 MiB of operands or results each); for each chunk
// the host threads pack its matrices of a and b densely into a pinned staging slot (3 in a ring),
// the copy engine moves them up (in_stream_), one launch multiplies the chunk's matrices
// (launch_batch; kernels alternate two streams), the other copy engine brings the results down
// into an output slot, and the host threads copy them into c. Copies both ways, the kernels and
// the host copies of different chunks overlap, as in matmul_host. A broadcast operand (step 0)
// goes up once, with the first chunk. Dense stacks in pinned memory (pin_host, the pinned result
// pool) skip the host copies: the copy engines read and write them in place.
void CudaDevice::matmul_batch_host(const core::HostMatrix& a, std::int64_t a_step, const core::HostMatrix& b,
                                   std::int64_t b_step, const MatrixView& c, std::int64_t c_step,
                                   std::int64_t count) {
  const std::size_t es = dtype_size(c.dtype);
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  const std::size_t a_mat = static_cast<std::size_t>(M * K) * es, b_mat = static_cast<std::size_t>(K * N) * es,
                    c_mat = static_cast<std::size_t>(M * N) * es;
  const std::int64_t a_count = a_step == 0 ? 1 : count, b_count = b_step == 0 ? 1 : count;
  if (count <= 1 || 2.0 * M * N * K > kStackMaxFlops || a_step < 0 || b_step < 0 ||
      a_count * a_mat + b_count * b_mat + count * c_mat > info_.memory_bytes / 4)
    return core::Device::matmul_batch_host(a, a_step, b, b_step, c, c_step, count);
  std::lock_guard<std::mutex> lock(mu_);
  ready();
  Lease da = lease(a_count * a_mat), db = lease(b_count * b_mat), dc = lease(count * c_mat);

  InFlight in_flight(*this);  // no copy or kernel may outlive the call (staging, operands, result)
  auto record = [&](CUstream s) {
    CUevent e = in_flight.event();
    cu_check(cu_.EventRecord(e, s), "cuEventRecord", where_);
    return e;
  };

  // An operand's host lines: rows of a row-major matrix, columns of a column-major one; on the
  // device each matrix is dense in its own layout.
  struct Side {
    const unsigned char* p;
    std::size_t step, ld, lines, line, mat;  // bytes, but lines
    bool stacked, direct;
  };
  auto side = [&](const core::HostMatrix& x, std::int64_t step, std::size_t mat) {
    Side sd{static_cast<const unsigned char*>(x.data), static_cast<std::size_t>(step) * es,
            static_cast<std::size_t>(x.ld) * es, static_cast<std::size_t>(x.col_major ? x.cols : x.rows),
            static_cast<std::size_t>(x.col_major ? x.rows : x.cols) * es, mat, step != 0, false};
    const bool dense = sd.ld == sd.line && (!sd.stacked || sd.step == mat);
    sd.direct = dense && is_pinned(sd.p, sd.stacked ? count * mat : mat);
    return sd;
  };
  const Side sa = side(a, a_step, a_mat), sb = side(b, b_step, b_mat);
  const bool c_direct = (M == 1 || c.row_stride == N) && (count == 1 || c_step == M * N) &&
                        is_pinned(c.data, count * c_mat);
  const core::DeviceMatrix am{nullptr, 0, M, K, a.col_major ? M : K, a.col_major, a.dtype};
  const core::DeviceMatrix bm{nullptr, 0, K, N, b.col_major ? K : N, b.col_major, b.dtype};

  // Chunks of whole matrices: ~16 MiB of staged operands or results each (PORTMAT_CUDA_CHUNK_MB).
  const std::size_t chunk_bytes = numpy_chunk_bytes();
  const std::size_t per_in = (sa.stacked ? a_mat : 0) + (sb.stacked ? b_mat : 0);
  const std::int64_t per_chunk = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(chunk_bytes / std::max<std::size_t>({per_in, c_mat, 1})));
  const std::int64_t chunks = (count + per_chunk - 1) / per_chunk;
  constexpr int kSlots = 3;
  const std::size_t in_slot = per_chunk * per_in + (sa.stacked ? 0 : a_mat) + (sb.stacked ? 0 : b_mat);
  const std::size_t out_slot = per_chunk * c_mat;
  unsigned char* in_base = nullptr;
  unsigned char* out_base = nullptr;
  std::vector<CUevent> in_free(kSlots, nullptr);
  HostPool& pool = *pool_threads_;

  // Chunk ci's matrices [i0, i0 + nm) of an operand go to its device stack: in place from pinned
  // memory, else packed into `slot` at `at` first (a broadcast operand only with chunk 0).
  auto upload = [&](const Side& sd, CUdeviceptr dst, std::int64_t i0, std::int64_t nm, unsigned char*& slot,
                    std::size_t& at) {
    if (!sd.stacked && i0 > 0) return;
    const std::int64_t first = sd.stacked ? i0 : 0, n = sd.stacked ? nm : 1;
    const CUdeviceptr to = dst + static_cast<std::size_t>(first) * sd.mat;
    const std::size_t bytes = static_cast<std::size_t>(n) * sd.mat;
    if (sd.direct) {
      cu_check(cu_.MemcpyHtoDAsync(to, sd.p + first * sd.step, bytes, in_stream_), "cuMemcpyHtoDAsync(stack)", where_);
      return;
    }
    if (!slot) {  // this chunk's staging slot, once the upload that last read it is done
      const int si = static_cast<int>(i0 / per_chunk % kSlots);
      if (in_free[si]) cu_check(cu_.EventSynchronize(in_free[si]), "host-to-device copy (cuEventSynchronize)", where_);
      if (!in_base) in_base = static_cast<unsigned char*>(pinned(in_stage_, in_slot * kSlots));
      slot = in_base + si * in_slot;
    }
    copy_3d(pool, slot + at, sd.mat, sd.line, sd.p + first * sd.step, sd.step, sd.ld, n, sd.lines, sd.line);
    cu_check(cu_.MemcpyHtoDAsync(to, slot + at, bytes, in_stream_), "cuMemcpyHtoDAsync(stack)", where_);
    at += bytes;
  };

  struct Pending {
    std::int64_t i0, nm;
    unsigned char* slot;
    CUevent ready;
  };
  std::deque<Pending> pending;
  auto copy_out = [&](const Pending& p) {
    cu_check(cu_.EventSynchronize(p.ready), "batched gemm or device-to-host copy (cuEventSynchronize)", where_);
    copy_3d(pool, static_cast<unsigned char*>(c.data) + p.i0 * c_step * static_cast<std::int64_t>(es),
            static_cast<std::size_t>(c_step) * es, static_cast<std::size_t>(M > 1 ? c.row_stride : N) * es,
            p.slot, c_mat, static_cast<std::size_t>(N) * es, static_cast<std::size_t>(p.nm), static_cast<std::size_t>(M),
            static_cast<std::size_t>(N) * es);
  };

  for (std::int64_t ci = 0; ci < chunks; ++ci) {
    const std::int64_t i0 = ci * per_chunk, nm = std::min(per_chunk, count - i0);
    unsigned char* slot = nullptr;
    std::size_t at = 0;
    upload(sa, da->ptr(), i0, nm, slot, at);
    upload(sb, db->ptr(), i0, nm, slot, at);
    const CUevent up = record(in_stream_);
    if (slot) in_free[ci % kSlots] = up;
    const CUstream ks = kstream_[ci % 2];
    cu_check(cu_.StreamWaitEvent(ks, up, 0), "cuStreamWaitEvent", where_);
    launch_batch(ks, da->ptr() + (sa.stacked ? static_cast<std::size_t>(i0) * a_mat : 0), am, sa.stacked ? M * K : 0,
                 db->ptr() + (sb.stacked ? static_cast<std::size_t>(i0) * b_mat : 0), bm, sb.stacked ? K * N : 0,
                 dc->ptr() + static_cast<std::size_t>(i0) * c_mat, N, M * N, M, N, K, nm, false);
    cu_check(cu_.StreamWaitEvent(out_stream_, record(ks), 0), "cuStreamWaitEvent", where_);
    if (c_direct) {
      cu_check(cu_.MemcpyDtoHAsync(static_cast<unsigned char*>(c.data) + i0 * c_mat, dc->ptr() + i0 * c_mat,
                                   static_cast<std::size_t>(nm) * c_mat, out_stream_),
               "cuMemcpyDtoHAsync(stack)", where_);
      continue;
    }
    while (static_cast<int>(pending.size()) >= kSlots) {
      copy_out(pending.front());
      pending.pop_front();
    }
    if (!out_base) out_base = static_cast<unsigned char*>(pinned(out_stage_, out_slot * kSlots));
    unsigned char* oslot = out_base + (ci % kSlots) * out_slot;
    cu_check(cu_.MemcpyDtoHAsync(oslot, dc->ptr() + static_cast<std::size_t>(i0) * c_mat,
                                 static_cast<std::size_t>(nm) * c_mat, out_stream_),
             "cuMemcpyDtoHAsync(stack)", where_);
    pending.push_back({i0, nm, oslot, record(out_stream_)});
    while (!pending.empty() && cu_.EventQuery(pending.front().ready) == CUDA_SUCCESS) {
      copy_out(pending.front());
      pending.pop_front();
    }
  }
  while (!pending.empty()) {
    copy_out(pending.front());
    pending.pop_front();
  }
}

class CudaBackend final : public core::Backend {
 public:
  const char* name() const override { return "cuda"; }
  const char* label() const override { return "CUDA"; }

  std::vector<std::shared_ptr<core::Device>> devices() override {
    std::vector<std::shared_ptr<core::Device>> out;
    const CuApi* cu = cu_api();
    if (!cu) return out;
    int n = 0;
    if (cu->DeviceGetCount(&n) != CUDA_SUCCESS) return out;
    for (int i = 0; i < n; ++i) {
      CUdevice d = 0;
      if (cu->DeviceGet(&d, i) != CUDA_SUCCESS) continue;
      int major = 0;
      cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
      if (major < 8) continue;  // the kernels need cp.async (sm_80+); older GPUs stay with OpenCL
      // cuda:i is CUDA's ordinal i, as torch's and CuPy's device i (their arrays name it).
      out.push_back(std::make_shared<CudaDevice>(*cu, d, i));
    }
    return out;
  }
};

}  // namespace

}  // namespace portmat::cuda

namespace portmat::core {
std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }
}  // namespace portmat::core
