// See gemm_params.hpp. The numbers: a 128x128 block with 8x8 per work-item is the classic GPU
// SGEMM shape (64 FMAs per 4 vector loads from local memory); when fewer than ~2 blocks per
// compute unit exist, smaller blocks keep every unit busy. float64 halves the vector width so a
// local read stays 16 bytes, and uses 64x64 blocks so two double slices fit in 48 KiB of local
// memory.
#include "opencl/gemm_params.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace portmat::opencl {

std::string GemmParams::invalid_reason() const {
  if (direct != 0 && direct != 1) return "DIRECT must be 0 or 1";
  // Checked for both kernels: a value the parser took must be refused whichever kernel runs.
  if (dbf != 0 && dbf != 1) return "DBF must be 0 or 1";
  if (maxregs != 0 && (maxregs < 32 || maxregs > 255)) return "MAXREGS must be 0 or 32-255";
  if (async != 0 && (async < 2 || async > 8)) return "ASYNC must be 0 (off) or 2-8 (slices in the ring)";
  if (groupm < 1 || groupm > 64) return "GROUPM must be 1-64";
  if (vecw != 1 && vecw != 2 && vecw != 4 && vecw != 8 && vecw != 16) return "VECW must be 1, 2, 4, 8 or 16";
  if (nvec < 1 || nvec > 8) return "NVEC must be 1-8";
  if (pack < 0 || pack > 2) return "PACK must be 0, 1 or 2";
  if (transa < 0 || transa > 2) return "TRANSA must be 0, 1 or 2";
  if (direct) {
    if (mwg < 1 || mwg > 32) return "MWG (rows per work-item of the direct kernel) must be 1-32";
    if (vecw == 1 && nvec != 1) return "NVEC needs VECW > 1 (the direct kernel's vector form)";
    if (vecw == 1 && (mdimc != 1 || ndimc < 1))
      return "the direct kernel's work-groups are NDIMC x 1 (MDIMC=1) when the runtime vectorizes (VECW=1)";
    if (mdimc < 1 || ndimc < 1 || mdimc * ndimc > 1024) return "work-groups of 1-1024 work-items (MDIMC x NDIMC)";
    if (vecw > 1 && mwg * nvec * vecw > 512) return "MWG*NVEC*VECW (a work-item's tile) must be at most 512";
    return {};
  }
  auto pow2 = [](int v) { return v == 2 || v == 4 || v == 8; };
  if (mwg <= 0 || nwg <= 0 || kwg <= 0 || mdimc <= 0 || ndimc <= 0) return "sizes must be positive";
  if (!pow2(vwm) || !pow2(vwn)) return "VWM and VWN must be 2, 4 or 8";
  if (mwg % (mdimc * vwm) != 0) return "MWG must be a multiple of MDIMC*VWM";
  if (nwg % (ndimc * vwn) != 0) return "NWG must be a multiple of NDIMC*VWN";
  if ((mwg * kwg) % threads() != 0 || (nwg * kwg) % threads() != 0)
    return "MWG*KWG and NWG*KWG must be multiples of MDIMC*NDIMC";
  if (gvw != 1 && gvw != 2 && gvw != 4 && gvw != 8) return "GVW must be 1, 2, 4 or 8";
  if (kwg % gvw != 0 || mwg % gvw != 0 || nwg % gvw != 0 || ((mwg * kwg) / threads()) % gvw != 0 ||
      ((nwg * kwg) / threads()) % gvw != 0)
    return "GVW must divide KWG, MWG, NWG and each work-item's share of a slice";
  if (pada < 0 || padb < 0 || pada % vwm != 0 || padb % vwn != 0)
    return "PADA/PADB must be non-negative multiples of VWM/VWN";
  if (dbf && kwg % 2 != 0) return "DBF (double-buffered fragments) needs an even KWG";
  return {};
}

// The library avoids iostreams: in some Python processes (seen on the H200 machine's image) an
// extension's std::ostringstream crashed in libstdc++'s locale code; plain strings are enough.
namespace {
struct Field {
  const char* key;
  int GemmParams::*member;
};
constexpr Field kFields[] = {{"MWG", &GemmParams::mwg},     {"NWG", &GemmParams::nwg},
                             {"KWG", &GemmParams::kwg},     {"MDIMC", &GemmParams::mdimc},
                             {"NDIMC", &GemmParams::ndimc}, {"VWM", &GemmParams::vwm},
                             {"VWN", &GemmParams::vwn},     {"PADA", &GemmParams::pada},
                             {"PADB", &GemmParams::padb},   {"GVW", &GemmParams::gvw},
                             {"DIRECT", &GemmParams::direct}, {"DBF", &GemmParams::dbf},
                             {"MAXREGS", &GemmParams::maxregs}, {"VECW", &GemmParams::vecw},
                             {"NVEC", &GemmParams::nvec}, {"PACK", &GemmParams::pack},
                             {"ASYNC", &GemmParams::async}, {"GROUPM", &GemmParams::groupm},
                             {"TRANSA", &GemmParams::transa}};
}  // namespace

std::string GemmParams::defines() const {
  std::string s;
  for (const Field& f : kFields)
    // GVW is decided per problem (alignment, edges); TRANSA is the host's alone.
    if (f.member != &GemmParams::gvw && f.member != &GemmParams::transa)
      s += std::string(s.empty() ? "" : " ") + "-D" + f.key + "=" + std::to_string(this->*f.member);
  return s;
}

std::string GemmParams::str() const {
  std::string s;
  for (const Field& f : kFields)
    s += std::string(s.empty() ? "" : ",") + f.key + "=" + std::to_string(this->*f.member);
  return s;
}

GemmParams parse_params(const std::string& text, GemmParams p) {
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("kernel parameter '" + item + "' is not KEY=VALUE");
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* stop = nullptr;
    const long v = std::strtol(val.c_str(), &stop, 10);
    if (val.empty() || *stop != '\0' || v < 0 || v > 4096)
      throw std::invalid_argument("kernel parameter " + key + " has bad value '" + val + "'");
    bool known = false;
    for (const Field& f : kFields)
      if (key == f.key) p.*f.member = static_cast<int>(v), known = true;
    if (!known) throw std::invalid_argument("unknown kernel parameter '" + key + "'");
  }
  return p;
}

GemmParams choose_params(const DeviceTraits& dev, DType dtype, long m, long n, long count, const GemmParams* tuned,
                         bool untransposed) {
  GemmParams p;  // GPU float32: 128x128x16 blocks, 16x16 work-items of 8x8
  const bool small_stack = count > 1 && m <= 32 && n <= 32;
  if (tuned && !small_stack) {
    // Run-time tuning's result for this device, driver and element size (tuning_store.hpp): the
    // tuner measured it at one size, and it is valid for every shape (edges are handled).
    p = *tuned;
  } else if (dev.kind == DeviceKind::cpu && dev.direct_ok) {
    // CPU runtimes: the direct kernel's vector form (gemm_direct.cl, VECW > 1): a work-item keeps
    // 6 rows x 2 vectors of the device's SIMD width (12 accumulators: AVX2's 16 registers,
    // or half of AVX-512's 32) in work-groups of 8 x 8. 2-core AMD EPYC (Zen 3), 2026-12-03,
    // float32 kernel-only, bench/diagnostics/tune_opencl.py: PoCL 74-83 GFLOP/s at n = 1024, 44-49
    // at 2048, 42 at 4096, against 4-5 for gemm.cl's 64x64 blocks (barriers split PoCL's
    // work-item loops); Intel's runtime 96 at 1024 and 52 at 2048 against 57 and 37 for the
    // scalar form it had (VECW = 1: the runtime packing neighbouring work-items into SIMD lanes).
    // One work-item a row of 8 x 8 groups (MDIMC = 1) ran 80 at 1024 but 14 at 2048 on PoCL: the
    // group's rows share B's columns in cache.
    const int elem = static_cast<int>(dtype_size(dtype));
    p.direct = 1;
    p.vecw = std::clamp(dev.vector_bytes / elem, 2, 16);
    while (p.vecw & (p.vecw - 1)) --p.vecw;  // a power of two
    p.nvec = 2;
    p.mwg = 6;
    p.mdimc = p.ndimc = 8;
  } else if (small_stack) {
    // A stack of small matrices: a 32x32 block of 8x8 work-items of 4x4 per matrix (a 64- or
    // 128-wide block would compute mostly padding), the stack filling the device.
    p.mwg = p.nwg = 32;
    p.mdimc = p.ndimc = 8;
    p.pada = 0;
  } else if (dev.kind == DeviceKind::cpu) {
    // CPU OpenCL, a product too large for the direct kernel: work-groups become loops; 64x64
    // blocks of 8x8 keep the tile in cache.
    p.mwg = p.nwg = 64;
    p.mdimc = p.ndimc = 8;
  } else if (dev.vendor.find("NVIDIA") != std::string::npos && dtype_size(dtype) == 4) {
    // NVIDIA's driver: `portmat tune` on an H200 (2026-12-02 13:30 UTC, n = 4096, blocks and
    // work-group shapes searched together, each candidate verified against float64): 128x128
    // blocks of 16x16 work-items (8x8 each) with k slices of 8 and unpadded A slices, 47.2 TFLOP/s
    // against 44.9 in the same run for the 64x128 blocks shipped before (45.0 when an earlier
    // 20-candidate run chose them). Where 128x128 blocks are too few to fill the device (n <= 2048
    // on 132 SMs), 64x128 blocks of 8x16 work-items, as for other GPUs below.
    // MAXREGS = 128: ptxas gives the kernels with edge code (sizes that are not whole blocks) 137-143
    // registers, one 256-work-item group per SM; capped, they keep two, as the whole-block kernels
    // (126-128 registers by themselves) do. (Session 20: one group per SM ran 28.6 TFLOP/s at 4096.)
    // TRANSA = 1: a large product with a row-major a runs on a column-major copy of it, in the
    // set chosen for that layout (the ring below; opencl_backend.cpp, transpose_a_first).
    p.kwg = 8;
    p.pada = 0;
    p.maxregs = 128;
    p.transa = 1;
    const long blocks = ((m + p.mwg - 1) / p.mwg) * ((n + p.nwg - 1) / p.nwg) * count;
    if (blocks < 2L * dev.compute_units) {
      p.mwg = 64;
      p.mdimc = 8;
    } else if (untransposed && dev.cp_async) {
      // A column-major a and a row-major b (a.T @ b, say): both slices go into local memory as
      // they are, by cp.async, into a ring of three 16-deep slices (48 KiB, which two slices
      // staged through registers cannot afford). H200, 2026-12-03, kernel-only, in the same
      // rounds: 49.3 / 50.2 TFLOP/s at n = 4096 / 8192 against 48.8 / 49.5 for the set above
      // (cuBLAS 51.3). With a row-major a, which is transposed on the way, the ring lost
      // (docs/opencl.md), so it is this layout's alone. Launched in groups of 8 block rows
      // (GROUPM): 49.4 / 50.2 against 49.0 / 49.8 in the same rounds (2026-12-03 22:10 UTC);
      // with a row-major a the grouping lost (47.0 / 47.7 against 47.5 / 48.1).
      p.async = 3;
      p.kwg = 16;
      p.groupm = 8;
    }
  } else {
    // Other GPUs: measured on an H200 through NVIDIA's driver (record 2026-11-29_h200_opencl_tune.txt):
    // unpadded A slices ran 32.9 -> 41.8 TFLOP/s at n = 4096.
    p.pada = 0;
    const long blocks = ((m + p.mwg - 1) / p.mwg) * ((n + p.nwg - 1) / p.nwg) * count;
    if (blocks < 2L * dev.compute_units) {
      // Too few 128x128 blocks to fill the device (n <= 2048 on 132 SMs): 64x128 blocks of
      // 8x16 work-items, still 8x8 each. The sweep measured them with PADA=4 (n = 1024: 26.3 ->
      // 31.2 TFLOP/s); with the PADA=0 shipped here the bench gave 29.2 (docs/opencl.md).
      p.mwg = 64;
      p.mdimc = 8;
    }
  }
  if (p.direct || (tuned && !small_stack)) {
    // The direct kernel: its vector width chosen above per element size (the scalar form: the
    // lanes hold half as many doubles, the rows stay). Tuned parameters were tuned for their
    // element size.
  } else if (dtype_size(dtype) == 8 && p.mwg > 32) {  // float64, and uint64 alike
    p.mwg = p.nwg = 64;
    if (dev.kind != DeviceKind::cpu) p.mdimc = p.ndimc = 16;  // 4x4 doubles per work-item
    p.vwm = p.vwn = 2;
    p.pada = 2;
    p.gvw = 2;
  } else if (dtype_size(dtype) == 8) {  // the small stack block in 8-byte elements: 16-byte local reads
    p.vwm = p.vwn = 2;
    p.gvw = 2;
  }
  if (const char* env = std::getenv("PORTMAT_OPENCL_PARAMS")) {
    try {
      p = parse_params(env, p);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("PORTMAT_OPENCL_PARAMS: ") + e.what());
    }
  }
  return p;
}

}  // namespace portmat::opencl
