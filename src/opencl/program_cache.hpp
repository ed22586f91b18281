// Building OpenCL programs, with the driver's binaries cached on disk.
//
// Each (device, driver, source, options) combination is compiled once per process by the caller's
// in-memory cache; this layer adds a disk cache so later processes skip the driver's compiler
// (seconds on PoCL). Directory: $PORTMAT_CACHE_DIR, else $XDG_CACHE_HOME/portmat, else
// ~/.cache/portmat; PORTMAT_CACHE_DIR=off disables it. Any problem with the cache falls back to
// compiling from source.
#pragma once

#include <string>

#include "opencl/cl_api.hpp"

namespace portmat::opencl {

// A built program; throws DeviceError with the build log on failure.
cl_program build_program(const ClApi& cl, cl_context ctx, cl_device_id dev, const std::string& where,
                         const char* source, const std::string& options);

}  // namespace portmat::opencl
