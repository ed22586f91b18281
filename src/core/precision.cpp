// The precision modes of float32 products (portmat.hpp, Precision; issue 18): names, the
// process-wide setting ($PORTMAT_PRECISION, set_precision), the per-call scope the core sets around
// its calls into a device (backend.hpp, PrecisionScope), and the check that a device can run a mode.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/backend.hpp"

namespace portmat {

namespace {
constexpr int kUnset = -1;
std::atomic<int> chosen{kUnset};  // set_precision(); kUnset: $PORTMAT_PRECISION, else float32
thread_local Precision scoped = Precision::float32;
}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::float32: return "float32";
    case Precision::float32_tc: return "float32_tc";
    case Precision::tf32: return "tf32";
    case Precision::bfloat16: return "bfloat16";
  }
  return "?";
}

Precision precision_from_name(const std::string& name) {
  for (Precision p : {Precision::float32, Precision::float32_tc, Precision::tf32, Precision::bfloat16})
    if (name == precision_name(p)) return p;
  throw std::invalid_argument("precision must be one of 'float32', 'float32_tc', 'tf32', 'bfloat16', not '" + name +
                              "'");
}

void set_precision(std::optional<Precision> p) { chosen = p ? static_cast<int>(*p) : kUnset; }

Precision get_precision() {
  if (const int c = chosen.load(); c != kUnset) return static_cast<Precision>(c);
  // Read at every call without a set_precision (as $PORTMAT_DEVICE is): a bad value raises at the
  // product that reads it, naming the variable.
  const char* env = std::getenv("PORTMAT_PRECISION");
  if (!env || !*env) return Precision::float32;
  try {
    return precision_from_name(env);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("PORTMAT_PRECISION: ") + e.what());
  }
}

namespace core {

Precision current_precision() { return scoped; }

PrecisionScope::PrecisionScope(std::optional<Precision> p) : saved_(scoped) { scoped = p ? *p : get_precision(); }
PrecisionScope::~PrecisionScope() { scoped = saved_; }

bool follows_precision(DType t) {
  return t == DType::f32 || t == DType::c64 || t == DType::f16 || t == DType::bf16;
}

void require_precision(const Device& dev, DType t) {
  const Precision p = scoped;
  if (p == Precision::float32 || !follows_precision(t) || dev.supports(p)) return;
  throw DeviceError(std::string("matmul: precision '") + precision_name(p) + "' is not available on " + dev.info().id() +
                    " (" + dev.info().name + "): " + dev.precision_note(p) +
                    "; use precision='float32' (exact float32) there");
}

}  // namespace core
}  // namespace portmat
