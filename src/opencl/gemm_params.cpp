// See gemm_params.hpp. The numbers: a 128x128 block with 8x8 per work-item is the classic GPU
// SGEMM shape (64 FMAs per 4 vector loads from local memory); when fewer than ~2 blocks per
// compute unit exist (n <= 1024 on a 132-SM H200), 64x64 blocks with 4x4 per work-item keep every
// unit busy. float64 halves the vector width so a local read stays 16 bytes, and uses 64x64
// blocks so two double slices fit in 48 KiB of local memory.
#include "opencl/gemm_params.hpp"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace portmat::opencl {

std::string GemmParams::invalid_reason() const {
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
  return {};
}

std::string GemmParams::defines() const {
  std::ostringstream s;
  s << "-DMWG=" << mwg << " -DNWG=" << nwg << " -DKWG=" << kwg << " -DMDIMC=" << mdimc
    << " -DNDIMC=" << ndimc << " -DVWM=" << vwm << " -DVWN=" << vwn << " -DPADA=" << pada
    << " -DPADB=" << padb;
  return s.str();
}

std::string GemmParams::str() const {
  std::ostringstream s;
  s << "MWG=" << mwg << ",NWG=" << nwg << ",KWG=" << kwg << ",MDIMC=" << mdimc
    << ",NDIMC=" << ndimc << ",VWM=" << vwm << ",VWN=" << vwn << ",PADA=" << pada
    << ",PADB=" << padb << ",GVW=" << gvw;
  return s.str();
}

GemmParams parse_params(const std::string& text, GemmParams p) {
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("kernel parameter '" + item + "' is not KEY=VALUE");
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* end = nullptr;
    const long v = std::strtol(val.c_str(), &end, 10);
    if (val.empty() || *end != '\0' || v < 0 || v > 4096)
      throw std::invalid_argument("kernel parameter " + key + " has bad value '" + val + "'");
    const int iv = static_cast<int>(v);
    if (key == "MWG") p.mwg = iv;
    else if (key == "NWG") p.nwg = iv;
    else if (key == "KWG") p.kwg = iv;
    else if (key == "MDIMC") p.mdimc = iv;
    else if (key == "NDIMC") p.ndimc = iv;
    else if (key == "VWM") p.vwm = iv;
    else if (key == "VWN") p.vwn = iv;
    else if (key == "PADA") p.pada = iv;
    else if (key == "PADB") p.padb = iv;
    else if (key == "GVW") p.gvw = iv;
    else throw std::invalid_argument("unknown kernel parameter '" + key + "'");
  }
  return p;
}

GemmParams choose_params(const DeviceTraits& dev, DType dtype, long m, long n) {
  GemmParams p;  // GPU float32 defaults: 128x128x16, 16x16 work-items, 8x8 each
  if (dev.kind == DeviceKind::cpu) {
    // CPU OpenCL (PoCL): work-groups become loops; 64x64 blocks of 8x8 keep the tile in cache.
    p.mwg = p.nwg = 64;
    p.mdimc = p.ndimc = 8;
  }
  const long blocks = ((m + p.mwg - 1) / p.mwg) * ((n + p.nwg - 1) / p.nwg);
  if (dev.kind != DeviceKind::cpu && blocks < 2L * dev.compute_units) {
    p.mwg = p.nwg = 64;  // 16x16 work-items of 4x4
  }
  if (dtype == DType::f64) {
    p.mwg = std::min(p.mwg, 64);
    p.nwg = std::min(p.nwg, 64);
    p.vwm = p.vwn = 2;
    p.pada = 2;
    p.gvw = 2;
  }
  if (const char* env = std::getenv("PORTMAT_OPENCL_PARAMS")) p = parse_params(env, p);
  return p;
}

}  // namespace portmat::opencl
