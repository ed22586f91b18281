// Tunables of kernels/gemm.cl and how they are chosen per device and problem: a small database
// (vendor/kind -> defaults, and which of the two kernels), a switch to smaller tiles when a problem
// has too few blocks to fill the device, parameters found by run-time tuning (tuning_store.hpp),
// and an override ($PORTMAT_OPENCL_PARAMS="MWG=64,KWG=32,...") for tuning sweeps.
#pragma once

#include <string>

#include "portmat/portmat.hpp"

namespace portmat::opencl {

struct GemmParams {
  int mwg = 128, nwg = 128, kwg = 16;  // block tile of C and slice depth
  int mdimc = 16, ndimc = 16;          // work-group shape
  int vwm = 4, vwn = 4;                // local-memory vector widths
  int pada = 4, padb = 0;              // local row padding
  int gvw = 4;  // global load vector width, used when a problem has no edges and aligned rows
  // 1: kernels/gemm_direct.cl instead (CPU runtimes; no local memory): MWG rows of C per
  // work-item, work-groups NDIMC wide and MDIMC high. VECW = 1: one column per work-item, the
  // runtime vectorizing across work-items (MDIMC = 1); VECW > 1: NVEC vectors of VECW columns per
  // work-item, in the kernel's own vector types. Each kernel ignores the other's fields.
  int direct = 0;
  int vecw = 1, nvec = 1;
  // The vector form's operands copied into panels first (opencl_backend.cpp, pack_direct): 0 never,
  // 1 when the product is large enough, 2 always.
  int pack = 1;
  // 1: double-buffered fragments (gemm.cl's DBF): the next k step's local reads overlap this one's
  // multiply-adds, across slice ends too. Needs an even KWG.
  int dbf = 0;
  // > 0: registers per work-item, capped by NVIDIA's compiler (-cl-nv-maxrregcount; other drivers
  // refuse it). gemm.cl then leaves out reqd_work_group_size, since its .reqntid in the PTX makes
  // the JIT ignore the cap: so a 256-work-item group can fit twice on an SM (<= 128 registers).
  int maxregs = 0;
  // >= 2: gemm.cl's ASYNC: slices copied to local memory by cp.async (inline PTX; NVIDIA GPUs of
  // compute capability 8.0 or later, refused elsewhere) into a ring of this many slices.
  int async = 0;
  // > 1: gemm.cl's GROUPM: blocks launched in groups of this many block rows (L2 reuse).
  int groupm = 1;
  // A row-major a (with a row-major b) copied column-major on the device before the product, which
  // then runs with the parameters of that layout (opencl_backend.cpp, transpose_a_first): 0 never,
  // 1 when the product is large enough, 2 always.
  int transa = 0;

  int threads() const { return mdimc * ndimc; }
  // Columns of C per work-item of the direct kernel.
  int direct_cols() const { return vecw > 1 ? vecw * nvec : 1; }
  // Bytes of local memory the kernel declares (two slices of A and of B, or ASYNC of each; none for
  // the direct one).
  std::size_t local_bytes(std::size_t elem) const {
    const std::size_t slices = async ? static_cast<std::size_t>(async) : 2;
    return direct ? 0 : slices * static_cast<std::size_t>(kwg) * ((mwg + pada) + (nwg + padb)) * elem;
  }
  // Empty when the combination is valid, else why not (mirrors the #error checks in gemm.cl).
  std::string invalid_reason() const;
  std::string defines() const;  // "-DMWG=128 -DNWG=128 ..." (all but GVW: set per problem)
  std::string str() const;      // "MWG=128,NWG=128,..."
};

struct DeviceTraits {
  DeviceKind kind = DeviceKind::other;
  std::string vendor;
  int compute_units = 1;
  int vector_bytes = 32;  // the device's float vector, in bytes (its native SIMD width x 4)
  bool direct_ok = true;  // false: gemm.cl only (a product too large for gemm_direct.cl's int indices)
  bool cp_async = false;  // NVIDIA's driver on compute capability 8.0 or later: gemm.cl's ASYNC runs
};

// Parameters for an (m x k) @ (k x n) product of `dtype` on a device with these traits: `tuned`
// (what `portmat tune` stored for the device and this element size) where given, except for stacks
// of small matrices, which keep their own block; else the shipped defaults for the device. Then
// $PORTMAT_OPENCL_PARAMS on top. `untransposed`: a is column-major and b row-major, so that neither
// is transposed on its way into local memory (gemm.cl's cp.async ring copies both).
GemmParams choose_params(const DeviceTraits& dev, DType dtype, long m, long n, long count = 1,
                         const GemmParams* tuned = nullptr, bool untransposed = false);

// Applies "KEY=VALUE,..." on top of p; throws std::invalid_argument naming a bad key or value.
GemmParams parse_params(const std::string& text, GemmParams p);

}  // namespace portmat::opencl
