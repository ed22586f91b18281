// See tuning_store.hpp.
#include "opencl/tuning_store.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "opencl/program_cache.hpp"

namespace portmat::opencl {

std::string tuning_key(const DeviceInfo& info) {
  return info.vendor + " | " + info.name + " | " + info.driver_version;
}

std::string tuning_path() {
  const std::string dir = cache_dir();
  return dir.empty() ? std::string() : dir + "/opencl-tuning.txt";
}

namespace {

// The entries of `path` for `key`: element size -> parameters. Plain C I/O (gemm_params.cpp says
// why the library avoids iostreams).
std::map<std::size_t, GemmParams> read_entries(const std::string& path, const std::string& key) {
  std::map<std::size_t, GemmParams> out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (std::size_t(1) << 20);)
    text.append(buf, n);
  std::fclose(f);
  std::size_t pos = 0;
  bool header = false;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!header) {  // the first line names the format; any other file is not ours
      if (line != "# portmat OpenCL tuning 1") return out;
      header = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const std::size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1),
                      t3 = t2 == std::string::npos ? t2 : line.find('\t', t2 + 1);
    if (t2 == std::string::npos || line.compare(0, t1, key) != 0 || t1 != key.size()) continue;
    const std::string dtype = line.substr(t1 + 1, t2 - t1 - 1);
    const std::size_t elem = dtype == "float32" ? 4 : dtype == "float64" ? 8 : 0;
    if (!elem) continue;
    try {
      const GemmParams p = parse_params(line.substr(t2 + 1, t3 == std::string::npos ? t3 : t3 - t2 - 1), GemmParams{});
      if (p.invalid_reason().empty()) out[elem] = p;
    } catch (const std::invalid_argument&) {  // a damaged line: skipped
    }
  }
  return out;
}

}  // namespace

std::optional<GemmParams> TunedParams::get(std::size_t elem_bytes) {
  if (const char* e = std::getenv("PORTMAT_OPENCL_TUNING"); e && std::string(e) == "off") return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = tuning_path();
  struct stat st {};
  const bool exists = !path.empty() && ::stat(path.c_str(), &st) == 0;
  const std::timespec mtime = exists ? st.st_mtim : std::timespec{};
  if (!loaded_ || path != path_ || mtime.tv_sec != mtime_.tv_sec || mtime.tv_nsec != mtime_.tv_nsec) {
    params_ = exists ? read_entries(path, key_) : std::map<std::size_t, GemmParams>{};
    path_ = path, mtime_ = mtime, loaded_ = true;
  }
  const auto it = params_.find(elem_bytes);
  if (it == params_.end()) return std::nullopt;
  return it->second;
}

}  // namespace portmat::opencl
