// What and why: a backend's launch knobs (environment variables under one prefix, such as
// PORTMAT_CUDA_), read at the start of every call in one pass over the environment. Measurements
// and tests set a knob between calls, so knobs are read every call; but getenv scans the whole
// environment for each name, and a backend that looks up eight of them a launch and plans every
// product again while any is set adds microseconds to a small product (about 3.6 us a queued
// 256^3 product on the H200, docs/cuda.md, "Host time of a launch"). Here one pass collects the
// prefix's variables, a knob is looked up among those few, and read() says whether they changed
// since the last call, so that a backend keeps its cached plans while they stay the same and a
// variant with a knob set pays about the default's host time.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

namespace portmat::core {

// A number from an environment value, or `fallback` where it is empty or not a whole decimal.
inline long parse_env_long(const char* text, long fallback) {
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return (end && *end == '\0') ? v : fallback;
}

// An integer environment variable read now (getenv): unset, empty or not a whole decimal means
// `fallback`. For settings read outside a backend's per-call knobs.
inline long env_long(const char* name, long fallback) { return parse_env_long(std::getenv(name), fallback); }

class EnvKnobs {
 public:
  explicit EnvKnobs(const char* prefix) : prefix_(prefix), prefix_len_(std::strlen(prefix)) {}

  // Collects the prefix's NAME=VALUE entries of the environment (in its order, each ending in a
  // NUL); true when they differ from the last read's (and on the first read that finds any).
  bool read() {
    scratch_.clear();
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, prefix_, prefix_len_) == 0) scratch_.append(*e).push_back('\0');
    if (scratch_ == entries_) return false;
    entries_.swap(scratch_);
    return true;
  }

  bool any() const { return !entries_.empty(); }

  // The value of `name` (the full name, prefix included) as of the last read, or nullptr where it
  // was not set; valid until the next read. The first entry of a name wins, as getenv's does.
  const char* text(const char* name) const {
    const std::size_t len = std::strlen(name);
    for (std::size_t i = 0; i < entries_.size();) {
      const char* entry = entries_.c_str() + i;
      const std::size_t entry_len = std::strlen(entry);
      if (entry_len > len && entry[len] == '=' && std::strncmp(entry, name, len) == 0) return entry + len + 1;
      i += entry_len + 1;
    }
    return nullptr;
  }

  long value(const char* name, long fallback) const { return parse_env_long(text(name), fallback); }

 private:
  const char* prefix_;
  std::size_t prefix_len_;
  std::string entries_, scratch_;  // scratch_ keeps its capacity: a read allocates nothing once warm
};

}  // namespace portmat::core
