// Kernel parameters found by run-time tuning (issue 19), stored on disk per device.
//
// `python -m portmat tune` (python/portmat/_tune.py) searches gemm.cl's and gemm_direct.cl's
// tunables on the device in hand, verifies each candidate against a float64 reference, and
// stores the fastest here; every later product on that device and driver uses them
// (gemm_params.cpp, choose_params), in every process, C++ callers included. Nothing is ever tuned
// inside matmul: an untuned device runs the shipped defaults at once.
//
// File: <cache_dir()>/opencl-tuning.txt (program_cache.hpp says where cache_dir() is), UTF-8 text:
//   # portmat OpenCL tuning 1
//   <key> TAB <float32|float64> TAB <MWG=...,NWG=...> TAB <GFLOP/s measured> TAB <size>
// The key names the device and its driver (tuning_key), so a new driver or another machine's
// device sharing the home directory finds no entry and keeps the defaults. The file is read again
// when its modification time changes; a line that does not parse, names another format or holds
// parameters the kernels reject is skipped (a damaged file never breaks a product).
// PORTMAT_OPENCL_TUNING=off ignores the file (the tuner's baseline, tests).
#pragma once

#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "opencl/gemm_params.hpp"
#include "portmat/portmat.hpp"

namespace portmat::opencl {

// "vendor | device name | driver version": what an entry is stored under.
std::string tuning_key(const DeviceInfo& info);

// The file's path, or "" when there is no cache directory.
std::string tuning_path();

// The stored parameters of one device, read from the file and cached until it changes.
class TunedParams {
 public:
  explicit TunedParams(std::string key) : key_(std::move(key)) {}
  // The stored parameters for this element size (4: float32 and the 32-bit integers; 8: float64
  // and the 64-bit ones), if any.
  std::optional<GemmParams> get(std::size_t elem_bytes);

 private:
  std::string key_;
  std::mutex mu_;
  std::string path_;
  std::timespec mtime_{};
  bool loaded_ = false;
  std::map<std::size_t, GemmParams> params_;
};

}  // namespace portmat::opencl
