// Device registry: probes every backend once, keeps the opened devices, and resolves device specs
// ("", "opencl:1", "gpu", "cpu", "opencl") including the default-device rules.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "core/backend.hpp"

namespace portmat::core {

std::vector<std::unique_ptr<Backend>> make_backends() {
  // Order matters (see preference()): for one GPU, CUDA beats OpenCL; among CPUs the native
  // backend beats OpenCL's CPU device (PoCL), which stays usable by name.
  std::vector<std::unique_ptr<Backend>> out;
#ifdef PORTMAT_WITH_CUDA
  out.push_back(make_cuda_backend());
#endif
#ifdef PORTMAT_WITH_CPU
  out.push_back(make_cpu_backend());
#endif
#ifdef PORTMAT_WITH_OPENCL
  out.push_back(make_opencl_backend());
#endif
  return out;
}

namespace {

struct Registry {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::shared_ptr<Device>> devices;
};

Registry& registry() {
  static Registry* reg = [] {
    auto* r = new Registry;  // leaked on purpose: drivers must not be torn down at exit
    r->backends = make_backends();
    for (auto& b : r->backends)
      for (auto& d : b->devices()) r->devices.push_back(d);
    return r;
  }();
  return *reg;
}

std::mutex default_mutex;
std::string default_spec;  // set_default_device(); empty = automatic

// Lower is preferred: GPUs first, then the backends' own order (make_backends), so that a native
// backend listed before OpenCL wins for the same hardware; PoCL-like OpenCL CPUs come last.
int preference(const Device& d, std::size_t position) {
  const int kind = d.info().kind == DeviceKind::gpu ? 0 : d.info().kind == DeviceKind::cpu ? 1 : 2;
  return kind * 1000 + static_cast<int>(position);
}

std::string known_ids() {
  std::string s;
  for (auto& d : registry().devices) s += (s.empty() ? "" : ", ") + d->info().id();
  return s.empty() ? "none (no OpenCL platform was found)" : s;
}

std::shared_ptr<Device> best_of(DeviceKind* kind, const std::string* backend) {
  auto& devs = registry().devices;
  std::shared_ptr<Device> best;
  int best_pref = 0;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    const DeviceInfo& info = devs[i]->info();
    if (kind && info.kind != *kind) continue;
    if (backend && info.backend != *backend) continue;
    const int p = preference(*devs[i], i);
    if (!best || p < best_pref) best = devs[i], best_pref = p;
  }
  return best;
}

std::shared_ptr<Device> resolve(const std::string& spec) {
  if (spec.empty()) {
    auto best = best_of(nullptr, nullptr);
    if (!best) throw DeviceError("portmat: no device is available; devices found: " + known_ids());
    return best;
  }
  for (auto& d : registry().devices)
    if (d->info().id() == spec) return d;
  if (spec == "gpu" || spec == "cpu") {
    DeviceKind k = spec == "gpu" ? DeviceKind::gpu : DeviceKind::cpu;
    if (auto d = best_of(&k, nullptr)) return d;
  } else if (spec.find(':') == std::string::npos) {
    if (auto d = best_of(nullptr, &spec)) return d;
  }
  throw std::invalid_argument("portmat: no device matches '" + spec + "'; available: " +
                              known_ids() + " (or 'gpu', 'cpu', a backend name)");
}

}  // namespace

// The user's choice of default (set_default_device, else $PORTMAT_DEVICE), or nothing.
std::shared_ptr<Device> chosen_default() {
  std::string chosen;
  {
    std::lock_guard<std::mutex> lock(default_mutex);
    chosen = default_spec;
  }
  if (!chosen.empty()) return resolve(chosen);
  const char* env = std::getenv("PORTMAT_DEVICE");
  if (env && *env) {
    try {
      return resolve(env);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("PORTMAT_DEVICE: ") + e.what());
    }
  }
  return nullptr;
}

std::shared_ptr<Device> open_device(const std::string& spec) {
  if (!spec.empty()) return resolve(spec);
  if (auto d = chosen_default()) return d;
  return resolve("");
}

// Below this many flops (2*m*n*k) a GPU loses to the host: on the H200 machine, NumPy in and out,
// the GPU first won at n ~ 450-512, about 2.5e8 flops (bench/results/cuda_h200.md, crossover).
// $PORTMAT_GPU_MIN_FLOP overrides it (0: always the GPU).
double gpu_min_flop() {
  static const double v = [] {
    const char* e = std::getenv("PORTMAT_GPU_MIN_FLOP");
    char* end = nullptr;
    const double x = e && *e ? std::strtod(e, &end) : -1.0;
    return end && *end == '\0' && x >= 0 ? x : 2.5e8;
  }();
  return v;
}

std::shared_ptr<Device> open_device_for(const std::string& spec, std::int64_t m, std::int64_t n,
                                        std::int64_t k) {
  if (!spec.empty()) return resolve(spec);
  if (auto d = chosen_default()) return d;
  auto best = resolve("");
  if (best->info().kind == DeviceKind::gpu && 2.0 * m * n * k < gpu_min_flop()) {
    const std::string native = "cpu";
    if (auto cpu = best_of(nullptr, &native)) return cpu;
  }
  return best;
}

}  // namespace portmat::core

namespace portmat {

std::vector<std::string> backend_notes() {
  std::vector<std::string> out;
  for (auto& b : core::registry().backends)
    for (auto& n : b->notes()) out.push_back(std::string(b->name()) + ": " + n);
  return out;
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  for (auto& d : core::registry().devices) out.push_back(d->info());
  return out;
}

DeviceInfo find_device(const std::string& spec) { return core::open_device(spec)->info(); }

DeviceInfo device_for(const std::string& spec, std::int64_t m, std::int64_t n, std::int64_t k) {
  return core::open_device_for(spec, m, n, k)->info();
}

DeviceInfo default_device() { return core::open_device("")->info(); }

void set_default_device(const std::string& spec) {
  if (!spec.empty()) core::open_device(spec);  // validate now, not at the next matmul
  std::lock_guard<std::mutex> lock(core::default_mutex);
  core::default_spec = spec;
}

}  // namespace portmat
