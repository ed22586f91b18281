// Device memory that portmat itself holds, per device, against the cap (issue 20):
// set_device_memory_limit(), else $PORTMAT_DEVICE_MEMORY (read once per process), else none.
//
// Why a cap of our own: it lets CI (PoCL run as a discrete device) and one H200 exercise the
// out-of-core path (out_of_core.cpp) with products several times "the device", and it lets a
// user keep room on a GPU for another library. Each discrete device's backend counts every buffer
// it allocates (pooled ones too: they are still allocated) in its MemoryAccount; an allocation
// past the cap throws OutOfDeviceMemory after the backend has given its pooled buffers back.
// Devices that use host memory in place (the CPU backend, OpenCL devices sharing host memory)
// have no device memory to cap.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace portmat::core {

class MemoryAccount {
 public:
  // Counts a new buffer of `bytes`; with `enforce`, throws OutOfDeviceMemory naming `where` when
  // that would pass device_memory_limit() (nothing counted then).
  void take(std::size_t bytes, bool enforce, const std::string& where);
  void give(std::size_t bytes) noexcept;
  // Whether a buffer of `bytes` more would pass the cap (false without one).
  bool over_limit(std::size_t bytes) const;
  std::uint64_t in_use() const { return in_use_.load(); }
  std::uint64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }

 private:
  std::atomic<std::uint64_t> in_use_{0}, peak_{0};
};

// What the core's NumPy path did on a device (counted in out_of_core.cpp): matmul_host calls,
// products it ran in blocks, their flops. portmat::device_usage() reads them (tests, benchmarks).
struct UsageCounters {
  std::atomic<std::uint64_t> host_calls{0}, tiled_products{0}, flops{0};
};

// bytes - used, or 0 when used >= bytes.
inline std::uint64_t room(std::uint64_t bytes, std::uint64_t used) { return bytes > used ? bytes - used : 0; }

}  // namespace portmat::core
