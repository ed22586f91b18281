// Device registry: probes each backend the first time something asks for it, keeps the opened
// devices, and resolves device specs ("", "opencl:1", "gpu", "cpu", "opencl") including the
// default-device rules.
//
// Probing is lazy and isolated: "cpu:0" never starts the OpenCL or CUDA driver, a backend whose
// probe throws becomes a note instead of breaking the others, probes run on a big-stack thread
// (core/process.hpp) whatever the caller's stack, and the environment drivers edit while they
// start is put back, so that child processes see the same devices under the same ids. Devices of a backend probed before a fork() stay
// listed under the same ids in the child, but a backend whose driver cannot survive fork() refuses
// to run there with an error that says why and what to do instead.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

#include <unistd.h>

#include "core/backend.hpp"
#include "core/process.hpp"

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

struct Slot {
  std::unique_ptr<Backend> backend;
  std::atomic<bool> probed{false};  // set (release) once the fields below are final
  std::vector<std::shared_ptr<Device>> devices;
  std::vector<std::string> notes;
  std::uint32_t generation = 0;  // fork generation of the probe
  long probe_pid = 0;
};

struct Registry {
  std::vector<std::unique_ptr<Slot>> slots;  // make_backends() order, fixed
};

// Held while a backend is probed, while the registry is built and while set_default_device()
// changes the default; taken around fork() as well, so that a child never inherits it held.
std::mutex registry_mutex;
std::string default_spec;  // set_default_device(); empty = automatic
std::atomic<Registry*> g_registry{nullptr};

// The fork handlers are installed when the library is loaded, not at the first call: glibc runs
// neither side of a handler installed while a fork() is under way (another thread's prepare
// handlers run with its lock released), so a first matmul in one thread racing os.fork() in
// another left registry_mutex held in the child by a thread it does not have (CI, session 30: a
// forked child hung in open_device_for).
const bool registry_fork_handlers = [] {
  on_fork([] { registry_mutex.lock(); }, [] { registry_mutex.unlock(); }, [] { registry_mutex.unlock(); });
  return true;
}();

// Built under registry_mutex (never a function-local static, whose guard a fork() in the middle of
// its initialisation would leave taken in the child).
Registry& registry() {
  if (Registry* r = g_registry.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (Registry* r = g_registry.load(std::memory_order_relaxed)) return *r;
  auto* r = new Registry;  // leaked on purpose: drivers must not be torn down at exit
  for (auto& b : make_backends()) {
    r->slots.push_back(std::make_unique<Slot>());
    r->slots.back()->backend = std::move(b);
  }
  g_registry.store(r, std::memory_order_release);
  return *r;
}

// Printable in an error message: bytes outside printable ASCII (a non-UTF-8 environment value,
// say) become \xNN, so that the message itself can always be shown.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out;
}

// The process environment as NAME -> value.
std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), eq + 1);
  }
  return env;
}

// Drivers edit the environment while they start: PoCL sets HWLOC_PLUGINS_PATH=/dev/null (to keep
// hwloc from loading PoCL again through its OpenCL plugin), and on the H200 machine's image
// OCL_ICD_FILENAMES lost libnvidia-opencl.so.1 while the ICD loader started. Children inherit the
// environment, so every process started after a probe lost NVIDIA's OpenCL platform, and
// 'opencl:1' of the parent was no device in its pool workers. The environment is put back as it
// was once the probe is over (the drivers read those variables while starting, not later).
void restore_environment(const std::map<std::string, std::string>& before) {
  const auto after = environment();
  for (const auto& [name, value] : after)
    if (!before.count(name)) unsetenv(name.c_str());
  for (const auto& [name, value] : before) {
    const auto it = after.find(name);
    if (it == after.end() || it->second != value) setenv(name.c_str(), value.c_str(), 1);
  }
}

void probe(Slot& s) {
  if (s.probed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (s.probed.load(std::memory_order_relaxed)) return;
  const auto env = environment();
  on_big_stack([&] {
    try {
      s.devices = s.backend->devices();
    } catch (const std::exception& e) {
      s.devices.clear();
      s.notes.push_back(std::string("probing failed: ") + e.what());
    } catch (...) {
      s.devices.clear();
      s.notes.push_back("probing failed with an unknown exception");
    }
    for (auto& n : s.backend->notes()) s.notes.push_back(n);
  });
  restore_environment(env);
  s.generation = fork_generation();
  s.probe_pid = static_cast<long>(getpid());
  s.probed.store(true, std::memory_order_release);
}

struct Entry {
  std::shared_ptr<Device> device;
  const Slot* slot = nullptr;
};

// Lower is preferred: GPUs first, then the backends' own order (make_backends), so that a native
// backend listed before OpenCL wins for the same hardware; PoCL-like OpenCL CPUs come last.
int preference(const DeviceInfo& d, std::size_t slot) {
  const int kind = d.kind == DeviceKind::gpu ? 0 : d.kind == DeviceKind::cpu ? 1 : 2;
  return kind * 1000 + static_cast<int>(slot);
}

// The preferred device among those of `kind` (any if null) and `backend` (any if null). Backends
// are probed in order only as far as needed: once a candidate is found, a later backend can only
// win with a device of a better kind, so "cpu" never starts a GPU driver when the native CPU
// backend has its device.
Entry best_of(const DeviceKind* kind, const std::string* backend) {
  Entry best;
  int best_pref = 0;
  auto& slots = registry().slots;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Slot& s = *slots[i];
    if (backend && *backend != s.backend->name()) continue;
    if (best.device && (kind || best.device->info().kind == DeviceKind::gpu)) break;
    probe(s);
    for (auto& d : s.devices) {
      const DeviceInfo& info = d->info();
      if (kind && info.kind != *kind) continue;
      const int p = preference(info, i);
      if (!best.device || p < best_pref) best = {d, &s}, best_pref = p;
    }
  }
  return best;
}

std::string probe_notes() {
  std::string s;
  for (auto& slot : registry().slots)
    for (auto& n : slot->notes) s += std::string("; ") + slot->backend->name() + ": " + n;
  return s;
}

std::string known_ids() {
  std::string s;
  for (auto& slot : registry().slots) {
    probe(*slot);
    for (auto& d : slot->devices) s += (s.empty() ? "" : ", ") + d->info().id();
  }
  return s.empty() ? "none" : s;
}

Entry resolve(const std::string& spec) {
  if (spec.empty()) {
    Entry best = best_of(nullptr, nullptr);
    if (!best.device)
      throw DeviceError("portmat: no device is available; devices found: " + known_ids() + probe_notes());
    return best;
  }
  // "backend:index": only that backend is probed.
  if (const auto colon = spec.find(':'); colon != std::string::npos) {
    const std::string name = spec.substr(0, colon);
    for (auto& slot : registry().slots) {
      if (name != slot->backend->name()) continue;
      probe(*slot);
      for (auto& d : slot->devices)
        if (d->info().id() == spec) return {d, slot.get()};
    }
  } else if (spec == "gpu" || spec == "cpu") {
    const DeviceKind k = spec == "gpu" ? DeviceKind::gpu : DeviceKind::cpu;
    if (Entry e = best_of(&k, nullptr); e.device) return e;
  } else if (Entry e = best_of(nullptr, &spec); e.device) {
    return e;
  }
  throw std::invalid_argument("portmat: no device matches '" + printable(spec) + "'; available: " +
                              known_ids() + " (or 'gpu', 'cpu', a backend name)" + probe_notes());
}

// The device itself, once it is known to be usable in this process: a backend whose driver cannot
// survive fork() refuses in a child forked after the driver started (its threads and locks are
// gone there; a call would hang or crash inside the driver).
std::shared_ptr<Device> usable(const Entry& e) {
  const Slot& s = *e.slot;
  if (s.generation != fork_generation() && !s.backend->survives_fork()) {
    const DeviceInfo& info = e.device->info();
    throw DeviceError(
        "portmat: " + info.id() + " (" + info.name + ") cannot be used in this process: it was "
        "forked (os.fork(), or multiprocessing's default 'fork' start method on Linux) from process " +
        std::to_string(s.probe_pid) + " after that process had started the " + s.backend->label() +
        " driver, and " + s.backend->label() + " drivers do not survive fork(). Start worker "
        "processes with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), "
        "or use device='cpu' in forked processes.");
  }
  return e.device;
}

// The user's choice of default (set_default_device, else $PORTMAT_DEVICE), or nothing.
Entry chosen_default() {
  std::string chosen;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
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
  return {};
}

Entry choose(const std::string& spec) {
  if (!spec.empty()) return resolve(spec);
  if (Entry d = chosen_default(); d.device) return d;
  return resolve("");
}

}  // namespace

std::shared_ptr<Device> open_device(const std::string& spec) { return usable(choose(spec)); }

void for_each_open_device(const std::function<void(Device&)>& fn) {
  for (auto& slot : registry().slots)
    if (slot->probed.load(std::memory_order_acquire) && slot->generation == fork_generation())
      for (auto& d : slot->devices) fn(*d);
}

bool names_device_list(const std::string& spec) { return spec == "cuda" || spec.find(',') != std::string::npos; }

std::shared_ptr<Device> open_device_list(const std::string& spec) {
  std::vector<Entry> entries;
  std::vector<std::string> names;
  if (spec == "cuda") {
    // Every CUDA device of the process (one GPU: that device alone, as "cuda" always meant).
    for (auto& slot : registry().slots) {
      if (std::string(slot->backend->name()) != "cuda") continue;
      probe(*slot);
      for (auto& d : slot->devices) entries.push_back({d, slot.get()}), names.push_back(d->info().id());
    }
    if (entries.size() <= 1) return usable(resolve(spec));  // none: resolve's error, as before
  } else {
    std::size_t from = 0;
    for (;;) {
      const std::size_t comma = spec.find(',', from);
      const std::string one = spec.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      if (one.empty())
        throw std::invalid_argument("portmat: the device list '" + printable(spec) +
                                    "' has an empty entry; give device specs such as 'cuda:0', 'cpu'");
      Entry e = resolve(one);
      for (std::size_t i = 0; i < entries.size(); ++i)
        if (entries[i].device == e.device)
          throw std::invalid_argument("portmat: the device list '" + printable(spec) + "' names " +
                                      e.device->info().id() + " twice ('" + printable(names[i]) + "' and '" +
                                      printable(one) + "'); give each device once");
      entries.push_back(e), names.push_back(one);
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  std::vector<std::shared_ptr<Device>> devs;
  for (const Entry& e : entries) devs.push_back(usable(e));
  if (devs.size() == 1) return devs.front();
  return make_device_group(std::move(devs));
}

// $PORTMAT_GPU_MIN_FLOP: when set, products under this many flops (2*m*n*k) go to the CPU and the
// rest to the GPU, instead of the model (0: always the GPU). -1 when unset.
double gpu_min_flop() {
  static const double v = [] {
    const char* e = std::getenv("PORTMAT_GPU_MIN_FLOP");
    char* end = nullptr;
    const double x = e && *e ? std::strtod(e, &end) : -1.0;
    return end && *end == '\0' && x >= 0 ? x : -1.0;
  }();
  return v;
}

// The model's constants, from the H200 machine (NumPy in and out, docs/cuda.md, "Device choice"):
//  - a GPU call costs kGpuCallS on top of its transfers: (512 x 512) @ (512 x 512) took 0.212 ms
//    of which 0.063 ms moving 3.1 MB at 50 GB/s and 0.025 ms of kernel; 100 us also puts the
//    crossover against the 16-core host where session 1 measured it (n ~ 450-512);
//  - its kernels run small and mid-size products at about kGpuEfficiency of peak (28 TFLOP/s at
//    n = 1024 of 67), the CPU backend's at about kCpuEfficiency of its measured peak;
//  - a CPU call costs a few microseconds (the per-call path).
constexpr double kGpuCallS = 100e-6, kCpuCallS = 5e-6;
// Where the model cannot be used: session 1's measured crossover, in flops (2*m*n*k).
constexpr double kCrossoverFlops = 2.5e8;
constexpr double kGpuEfficiency = 0.4, kCpuEfficiency = 0.8;

double product_seconds(double flops, double bytes, const DeviceInfo& device, double bytes_per_s) {
  const bool gpu = device.kind == DeviceKind::gpu && !device.host_unified;
  const double rate = std::max(device.peak_gflops, 1.0) * 1e9 * (gpu ? kGpuEfficiency : kCpuEfficiency);
  const double move = bytes / std::max(bytes_per_s, 1.0);
  if (gpu) return kGpuCallS + move + flops / rate;  // the copies and the kernel, one after the other
  return kCpuCallS + std::max(move, flops / rate);  // arithmetic or memory, whichever binds
}

std::shared_ptr<Device> open_device_for(const std::string& spec, std::int64_t m, std::int64_t n,
                                        std::int64_t k, std::int64_t element_bytes) {
  if (!spec.empty()) return usable(resolve(spec));
  if (Entry d = chosen_default(); d.device) return usable(d);
  Entry best = resolve("");
  const DeviceInfo& info = best.device->info();
  if (info.kind != DeviceKind::gpu) return usable(best);
  const std::string native = "cpu";
  Entry cpu = best_of(nullptr, &native);
  if (!cpu.device) return usable(best);
  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(m * k + k * n + m * n) * static_cast<double>(element_bytes);
  const double threshold = gpu_min_flop();
  if (threshold >= 0) return usable(flops < threshold ? cpu : best);
  // Tiny products go to the CPU without asking the GPU anything. In a forked child the GPU's
  // driver must not be touched: products the GPU would clearly win (session 1's crossover,
  // kCrossoverFlops) get usable()'s error naming fork() and the cure, the rest go to the CPU.
  if (flops < 1e6) return usable(cpu);
  if (best.slot->generation != fork_generation()) return usable(flops < kCrossoverFlops ? cpu : best);
  const double gpu_rate = best.device->host_bytes_per_s(), cpu_rate = cpu.device->host_bytes_per_s();
  if (gpu_rate <= 0 || cpu_rate <= 0)  // a rate the device cannot tell: the crossover in flops
    return usable(flops < kCrossoverFlops ? cpu : best);
  const double gpu_s = product_seconds(flops, bytes, info, gpu_rate);
  const double cpu_s = product_seconds(flops, bytes, cpu.device->info(), cpu_rate);
  return usable(cpu_s <= gpu_s ? cpu : best);
}

}  // namespace portmat::core

namespace portmat {

std::vector<std::string> backend_notes() {
  std::vector<std::string> out;
  for (auto& slot : core::registry().slots) {
    core::probe(*slot);
    for (auto& n : slot->notes) out.push_back(std::string(slot->backend->name()) + ": " + n);
  }
  return out;
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  for (auto& slot : core::registry().slots) {
    core::probe(*slot);
    for (auto& d : slot->devices) out.push_back(d->info());
  }
  return out;
}

DeviceInfo find_device(const std::string& spec) { return core::open_device(spec)->info(); }

DeviceInfo device_for(const std::string& spec, std::int64_t m, std::int64_t n, std::int64_t k) {
  return core::open_device_for(spec, m, n, k)->info();
}

DeviceInfo default_device() { return core::open_device("")->info(); }

void set_default_device(const std::string& spec) {
  if (!spec.empty()) core::open_device(spec);  // validate now, not at the next matmul
  std::lock_guard<std::mutex> lock(core::registry_mutex);
  core::default_spec = spec;
}

}  // namespace portmat
