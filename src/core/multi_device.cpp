// One NumPy product split across several devices (issue 20): matmul(..., devices={...}) or
// device="cuda" with more than one CUDA device. A DeviceGroup stands for the list in the core's
// routes (matmul.cpp: dtype conversions, complex, stacks), so that every dtype reaches it as for
// one device; its matmul_host cuts c into one block per device and runs each device's block on a
// host thread of its own through host_product (out_of_core.cpp: that device's pipelined
// matmul_host, in blocks where its memory asks for them). Each device has its own lock, streams
// and staging, so the blocks run side by side; all write disjoint parts of the one result.
//
// The split. c is cut along its longer side (rows when M >= N: each device then reads all of b
// and its own rows of a; columns otherwise), into one contiguous block per device, sized in
// proportion to the device's expected float32 rate for a large product: peak_gflops times
// kGpuEfficiency for a discrete GPU (its kernels' share of peak at n >= 4096: ~50 of 67 TFLOP/s
// on the H200, docs/cuda.md) or kCpuEfficiency for a CPU (the native backend's at large n). A
// device whose peak is unknown (0: OpenCL devices) is taken as the mean of the known ones of its
// kind, else of all, else all devices count alike. Transfers are left out: the pipelines overlap
// them with the kernels of large products, and those are the ones worth splitting. One block per
// device rather than many small ones: every call of a discrete device's pipeline sends its whole
// b and pays a start-up and a drain (out_of_core.cpp), so a work queue of small blocks would cost
// more than a misjudged split gains. Block edges fall on multiples of kAlign.
//
// Products under kSplitMinFlops run whole on the device of the highest rate: there the fixed
// costs rule (a thread start, ~20-50 us; each device's per-call cost, a GPU's ~0.1 ms; b crossing
// to every device), and the whole product takes ~0.1-0.2 ms on one H200.
// $PORTMAT_SPLIT_MIN_FLOP (flops, 2 m n k) replaces it, read at every call.
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/batch.hpp"
#include "core/layout.hpp"
#include "core/out_of_core.hpp"
#include "core/process.hpp"

namespace portmat::core {

namespace {

constexpr double kSplitMinFlops = 1e8;
constexpr double kGpuEfficiency = 0.75, kCpuEfficiency = 0.8;
constexpr std::int64_t kAlign = 128;

double split_min_flops() {
  const char* e = std::getenv("PORTMAT_SPLIT_MIN_FLOP");
  if (!e || !*e) return kSplitMinFlops;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (!end || *end != '\0' || !(v >= 0))
    throw std::invalid_argument(std::string("PORTMAT_SPLIT_MIN_FLOP: '") + e +
                                "' is not a number of flops (a non-negative number, e.g. 1e8)");
  return v;
}

class DeviceGroup final : public Device {
 public:
  explicit DeviceGroup(std::vector<std::shared_ptr<Device>> members) : members_(std::move(members)) {
    info_.backend = "devices";
    info_.index = 0;
    info_.kind = DeviceKind::other;
    info_.host_unified = true;
    for (const auto& d : members_) {
      const DeviceInfo& m = d->info();
      info_.name += (info_.name.empty() ? "" : " + ") + m.id();
      if (m.kind == DeviceKind::gpu) info_.kind = DeviceKind::gpu;
      info_.memory_bytes += m.memory_bytes;
      info_.host_unified = info_.host_unified && m.host_unified;
      info_.compute_units += m.compute_units;
      info_.supports_f64 = info_.supports_f64 || m.supports_f64;
      info_.peak_gflops += m.peak_gflops;
    }
    info_.vendor = "several";
  }

  const DeviceInfo& info() const override { return info_; }

  std::unique_ptr<Buffer> alloc(std::size_t) override { throw unsupported("device memory"); }
  void upload(Buffer&, const void*, std::size_t) override { throw unsupported("device memory"); }
  void download(void*, const Buffer&, std::size_t) override { throw unsupported("device memory"); }
  double gemm(const DeviceMatrix&, const DeviceMatrix&, const DeviceMatrix&) override {
    throw unsupported("device-resident products");
  }

  // A dtype the group computes where one of its devices does; only those get blocks of it.
  bool computes(DType t) const override {
    return std::any_of(members_.begin(), members_.end(), [&](const auto& d) { return d->computes(t); });
  }
  bool supports(Precision p) const override {
    return std::all_of(members_.begin(), members_.end(), [&](const auto& d) { return d->supports(p); });
  }
  std::string precision_note(Precision p) const override {
    for (const auto& d : members_)
      if (!d->supports(p)) return d->info().id() + ": " + d->precision_note(p);
    return "every device of the list supports it";
  }

  void matmul_host(const HostMatrix& a, const HostMatrix& b, const MatrixView& c) override {
    const std::int64_t M = a.rows, K = a.cols, N = b.cols;
    const auto able = computing(c.dtype);
    const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
    const std::vector<double> rates = expected_rates(able);
    if (able.size() == 1 || flops < split_min_flops()) {
      const auto fastest = std::max_element(rates.begin(), rates.end()) - rates.begin();
      return host_product(*able[static_cast<std::size_t>(fastest)], a, b, c);
    }
    const bool by_rows = M >= N;
    const auto edges = split(by_rows ? M : N, rates);
    const Precision mode = current_precision();  // thread-local: each thread sets it again
    std::vector<std::function<void()>> tasks;
    for (std::size_t i = 0; i < able.size(); ++i) {
      const std::int64_t from = edges[i], size = edges[i + 1] - edges[i];
      if (size == 0) continue;
      Device* dev = able[i].get();
      tasks.push_back([=] {
        const PrecisionScope scope(mode);
        if (by_rows)
          host_product(*dev, block_of(a, from, size, 0, a.cols), b, block_of(c, from, size, 0, c.cols));
        else
          host_product(*dev, a, block_of(b, 0, b.rows, from, size), block_of(c, 0, c.rows, from, size));
      });
    }
    run_concurrently(tasks);
  }

  // A stack: its products shared among the devices in proportion to their rates where there are
  // as many as devices and the stack is worth splitting, else product by product (each split).
  void matmul_batch_host(const HostMatrix& a, std::int64_t a_step, const HostMatrix& b, std::int64_t b_step,
                         const MatrixView& c, std::int64_t c_step, std::int64_t count) override {
    const auto able = computing(c.dtype);
    const double flops = 2.0 * static_cast<double>(count) * static_cast<double>(a.rows) *
                         static_cast<double>(b.cols) * static_cast<double>(a.cols);
    const std::vector<double> rates = expected_rates(able);
    if (able.size() == 1 || flops < split_min_flops()) {
      const auto fastest = std::max_element(rates.begin(), rates.end()) - rates.begin();
      return host_batch(*able[static_cast<std::size_t>(fastest)], a, a_step, b, b_step, c, c_step, count);
    }
    if (count < static_cast<std::int64_t>(able.size()))
      return Device::matmul_batch_host(a, a_step, b, b_step, c, c_step, count);
    const auto edges = split(count, rates, 1);
    const Precision mode = current_precision();
    std::vector<std::function<void()>> tasks;
    for (std::size_t i = 0; i < able.size(); ++i) {
      const std::int64_t from = edges[i], n = edges[i + 1] - edges[i];
      if (n == 0) continue;
      Device* dev = able[i].get();
      tasks.push_back([=] {
        const PrecisionScope scope(mode);
        host_batch(*dev, nth(a, a_step, from), a_step, nth(b, b_step, from), b_step, nth(c, c_step, from), c_step, n);
      });
    }
    run_concurrently(tasks);
  }

 private:
  DeviceError unsupported(const char* what) const {
    return DeviceError(std::string("a list of devices (") + info_.name + ") has no " + what +
                       " of its own; it only multiplies NumPy arrays");
  }

  // The devices that compute t, in the list's order.
  std::vector<std::shared_ptr<Device>> computing(DType t) const {
    std::vector<std::shared_ptr<Device>> out;
    for (const auto& d : members_)
      if (d->computes(t)) out.push_back(d);
    if (out.empty())
      throw DeviceError(std::string("matmul: no device of the list (") + info_.name + ") computes " + dtype_name(t));
    return out;
  }

  // Each device's expected rate (see the top of the file), in GFLOP/s.
  static std::vector<double> expected_rates(const std::vector<std::shared_ptr<Device>>& devs) {
    auto efficiency = [](const DeviceInfo& i) {
      return i.kind == DeviceKind::gpu && !i.host_unified ? kGpuEfficiency : kCpuEfficiency;
    };
    auto mean_known = [&](const DeviceKind* kind) {
      double sum = 0;
      int n = 0;
      for (const auto& d : devs)
        if (d->info().peak_gflops > 0 && (!kind || d->info().kind == *kind))
          sum += d->info().peak_gflops * efficiency(d->info()), ++n;
      return n ? sum / n : 0.0;
    };
    std::vector<double> rates;
    for (const auto& d : devs) {
      const DeviceInfo& i = d->info();
      double r = i.peak_gflops > 0 ? i.peak_gflops * efficiency(i) : mean_known(&i.kind);
      if (r <= 0) r = mean_known(nullptr);
      rates.push_back(r);
    }
    if (std::all_of(rates.begin(), rates.end(), [](double r) { return r <= 0; })) std::fill(rates.begin(), rates.end(), 1.0);
    return rates;
  }

  // Edges of one block per device along a side of `length`: edges[i], edges[i + 1] bound device
  // i's block, sized by rate in whole units of `align` (the fastest takes the remainder), and
  // at least one unit each where the side has one per device: a device the caller listed gets
  // work even when its rate is a few percent of the others'.
  static std::vector<std::int64_t> split(std::int64_t length, const std::vector<double>& rates,
                                         std::int64_t align = kAlign) {
    const std::int64_t n = static_cast<std::int64_t>(rates.size());
    if (length < align * n) align = 1;
    const std::int64_t units = length / align;
    const double total = std::accumulate(rates.begin(), rates.end(), 0.0);
    std::vector<std::int64_t> u(rates.size());
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < rates.size(); ++i) {
      u[i] = std::max<std::int64_t>(units >= n ? 1 : 0,
                                    static_cast<std::int64_t>(static_cast<double>(units) * rates[i] / total + 0.5));
      sum += u[i];
    }
    const std::size_t fastest = static_cast<std::size_t>(std::max_element(rates.begin(), rates.end()) - rates.begin());
    while (sum < units) ++u[fastest], ++sum;
    while (sum > units) {  // take from the largest block that can give
      const std::size_t big = static_cast<std::size_t>(std::max_element(u.begin(), u.end()) - u.begin());
      --u[big], --sum;
    }
    std::vector<std::int64_t> edges{0};
    for (std::size_t i = 0; i < rates.size(); ++i)  // what is left of a unit goes to the fastest
      edges.push_back(edges.back() + u[i] * align + (i == fastest ? length - units * align : 0));
    return edges;
  }

  std::vector<std::shared_ptr<Device>> members_;
  DeviceInfo info_;
};

}  // namespace

std::shared_ptr<Device> make_device_group(std::vector<std::shared_ptr<Device>> devices) {
  return std::make_shared<DeviceGroup>(std::move(devices));
}

}  // namespace portmat::core
