// Building OpenCL programs, with the driver's binaries cached on disk.
//
// Each (device, driver, source, options) combination is compiled once per process by the caller's
// in-memory cache; this layer adds a disk cache so later processes skip the driver's compiler
// (seconds on PoCL). Directory: $PORTMAT_CACHE_DIR, else $XDG_CACHE_HOME/portmat, else
// ~/.cache/portmat; PORTMAT_CACHE_DIR=off disables it. Any problem with the cache falls back to
// compiling from source.
//
// Drivers do not validate the binaries they are given: a truncated file crashed PoCL, and a file
// built for other options ran as if it were right, then corrupted the heap. Caches do get damaged
// (full disks, killed processes) and shared (NFS homes, copied containers, other drivers), so no
// byte of a file reaches clCreateProgramWithBinary until the whole entry has been checked. One
// entry per file, opencl-v2-<16 hex digits: FNV-1a of the key>.bin, integers little-endian:
//   bytes  0..7    magic "PMCLPRG\0"
//          8..11   format version (2; version 1 was the bare binary, named opencl-<hex>.bin)
//         12..15   key length in bytes
//         16..23   payload length in bytes
//         24..31   64-bit FNV-1a of the payload (finds damage; not a defence against forgery)
//         32..     the key, then the payload (the driver's binary)
// The key is text naming the platform (name, version), the device (name, version), the driver
// version, the build options, and the source's FNV-1a and length. An entry is used only if the
// magic and version match, the file is exactly 32 + key + payload bytes long, the stored key equals
// this build's key byte for byte and the checksum matches; anything else is a miss: the program is
// built from source and the entry rewritten. Entries are written to a mkstemp file in the same
// directory and renamed into place, so readers see a whole entry or none; a cache that cannot be
// written (read-only, missing, a file in its place, a full disk) just means no cache.
#pragma once

#include <string>
#include <vector>

#include "opencl/cl_api.hpp"

namespace portmat::opencl {

// portmat's cache directory: $PORTMAT_CACHE_DIR, else $XDG_CACHE_HOME/portmat, else
// ~/.cache/portmat; "" when PORTMAT_CACHE_DIR=off or no home is known. Shared with the tuning
// store (tuning_store.hpp).
std::string cache_dir();

// A built program; throws DeviceError with the build log on failure.
cl_program build_program(const ClApi& cl, cl_context ctx, cl_device_id dev, const std::string& where,
                         const char* source, const std::string& options);

// The entry file itself, for the tests (build_program is the interface).
namespace program_cache_detail {
// The payload of the entry at `path` if it is whole, undamaged and stored under `key`; else empty.
std::vector<unsigned char> read_entry(const std::string& path, const std::string& key);
// Writes the entry atomically; false, with nothing left behind, if it could not.
bool write_entry(const std::string& path, const std::string& key,
                 const std::vector<unsigned char>& payload);
}  // namespace program_cache_detail

}  // namespace portmat::opencl
