// The device memory cap (portmat.hpp, set_device_memory_limit; device_memory.hpp says why) and
// the per-device accounts the backends keep against it.
#include "core/device_memory.hpp"

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "core/backend.hpp"
#include "core/process.hpp"

namespace portmat {

namespace {

// set_device_memory_limit(): kFromEnvironment until called, and after a call with none.
constexpr std::uint64_t kFromEnvironment = ~std::uint64_t(0);
std::atomic<std::uint64_t> chosen{kFromEnvironment};

// $PORTMAT_DEVICE_MEMORY, parsed once per process: the limit, or the message of a bad value
// (thrown again at every product, so that it is never silently ignored).
struct EnvLimit {
  std::optional<std::uint64_t> bytes;
  std::string error;
};
const EnvLimit& env_limit() {
  static const EnvLimit v = [] {
    EnvLimit out;
    const char* e = std::getenv("PORTMAT_DEVICE_MEMORY");
    if (!e || !*e) return out;
    try {
      out.bytes = parse_memory_size(e);
    } catch (const std::invalid_argument& x) {
      out.error = std::string("PORTMAT_DEVICE_MEMORY: ") + x.what();
    }
    return out;
  }();
  return v;
}

}  // namespace

std::uint64_t parse_memory_size(const std::string& text) {
  auto bad = [&](const std::string& why) {
    std::string shown;
    for (unsigned char ch : text) shown += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '?';
    return std::invalid_argument("'" + shown + "' is not a memory size (" + why +
                                 "); give a positive number of bytes, optionally with K, M, G or T "
                                 "(powers of 1024), e.g. '8G', '512M', '1073741824'");
  };
  std::size_t i = 0, end = text.size();
  while (i < end && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (i == end) throw bad("empty");
  std::uint64_t value = 0;
  const std::size_t digits_from = i;
  for (; i < end && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const std::uint64_t d = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (~std::uint64_t(0) - d) / 10) throw bad("too large");
    value = value * 10 + d;
  }
  if (i == digits_from) throw bad("no number");
  std::string unit = text.substr(i, end - i);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  int shift = 0;
  if (!unit.empty() && unit[0] != 'B') {
    const std::string prefixes = "KMGT";
    const auto at = prefixes.find(unit[0]);
    if (at == std::string::npos) throw bad("unknown unit");
    shift = 10 * static_cast<int>(at + 1);
    unit.erase(0, 1);
    if (unit == "IB") unit = "B";
  }
  if (!unit.empty() && unit != "B") throw bad("unknown unit");
  if (value == 0) throw bad("zero");
  if (shift && value > (~std::uint64_t(0) >> shift)) throw bad("too large");
  return value << shift;
}

void set_device_memory_limit(std::optional<std::uint64_t> bytes) {
  if (bytes && *bytes == 0) throw std::invalid_argument("set_device_memory_limit: the limit must be positive (or none)");
  chosen.store(bytes ? std::min(*bytes, kFromEnvironment - 1) : kFromEnvironment);
  // From now on portmat holds no more than the cap: devices holding more in pooled buffers give
  // them back (buffers in use stay; the next allocation past the cap fails).
  std::optional<std::uint64_t> cap;
  try {
    cap = device_memory_limit();
  } catch (const std::invalid_argument&) {  // a bad $PORTMAT_DEVICE_MEMORY: the next product says so
  }
  if (!cap) return;
  core::with_enough_stack([&] {
    core::for_each_open_device([&](core::Device& d) {
      if (d.memory.in_use() > *cap) d.release_cached_memory();
    });
  });
}

std::optional<std::uint64_t> device_memory_limit() {
  const std::uint64_t c = chosen.load();
  if (c != kFromEnvironment) return c;
  const EnvLimit& e = env_limit();
  if (!e.error.empty()) throw std::invalid_argument(e.error);
  return e.bytes;
}

namespace core {

bool MemoryAccount::over_limit(std::size_t bytes) const {
  const auto cap = device_memory_limit();
  return cap && in_use_.load() + bytes > *cap;
}

void MemoryAccount::take(std::size_t bytes, bool enforce, const std::string& where) {
  const auto cap = enforce ? device_memory_limit() : std::nullopt;
  std::uint64_t now = in_use_.load();
  for (;;) {
    if (cap && now + bytes > *cap)
      throw OutOfDeviceMemory("device memory limit: " + where + " would hold " + std::to_string(now + bytes) +
                              " bytes with a buffer of " + std::to_string(bytes) + ", past portmat's limit of " +
                              std::to_string(*cap) +
                              " bytes (set_device_memory_limit / $PORTMAT_DEVICE_MEMORY); " + std::to_string(now) +
                              " bytes are in use");
    if (in_use_.compare_exchange_weak(now, now + bytes)) break;
  }
  std::uint64_t p = peak_.load();
  while (now + bytes > p && !peak_.compare_exchange_weak(p, now + bytes)) {
  }
}

void MemoryAccount::give(std::size_t bytes) noexcept { in_use_.fetch_sub(bytes); }

}  // namespace core

DeviceUsage device_usage(const std::string& device) {
  return core::with_enough_stack([&] {
    auto dev = core::open_device(device);
    DeviceUsage u;
    u.bytes_in_use = dev->memory.in_use();
    u.peak_bytes = dev->memory.peak();
    u.host_calls = dev->usage.host_calls.load();
    u.tiled_products = dev->usage.tiled_products.load();
    u.flops = static_cast<double>(dev->usage.flops.load());
    return u;
  });
}

void reset_device_usage(const std::string& device) {
  core::with_enough_stack([&] {
    auto dev = core::open_device(device);
    dev->memory.reset_peak();
    dev->usage.host_calls = 0;
    dev->usage.tiled_products = 0;
    dev->usage.flops = 0;
  });
}

}  // namespace portmat
