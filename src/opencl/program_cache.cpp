// See program_cache.hpp. C stdio rather than iostreams: see gemm_params.cpp.
#include "opencl/program_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::opencl {

std::string cache_dir() {
  if (const char* d = std::getenv("PORTMAT_CACHE_DIR")) return std::string(d) == "off" ? "" : d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/portmat";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/portmat";
  return {};
}

namespace {

constexpr char kMagic[8] = {'P', 'M', 'C', 'L', 'P', 'R', 'G', '\0'};
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::size_t kHeaderBytes = 32;

// 64-bit FNV-1a: file names and damage detection, not security.
std::uint64_t fnv1a(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void put_le(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(p[i]) << (8 * i);
  return v;
}

// A device or platform info string, whole (no fixed buffer to truncate it); false if the driver
// will not say, in which case the program is not cached.
template <class Get, class Object>
bool info_string(Get get, Object obj, cl_uint what, std::string& out) {
  std::size_t n = 0;
  if (get(obj, what, 0, nullptr, &n) != CL_SUCCESS) return false;
  out.assign(n, '\0');
  if (n && get(obj, what, n, out.data(), nullptr) != CL_SUCCESS) return false;
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return true;
}

// The entry's key (see program_cache.hpp); false if some part of it cannot be queried.
bool entry_key(const ClApi& cl, cl_device_id dev, const char* source, const std::string& options,
               std::string& key) {
  cl_platform_id platform = nullptr;
  if (cl.GetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr) != CL_SUCCESS)
    return false;
  std::string platform_name, platform_version, device_name, device_version, driver_version;
  if (!info_string(cl.GetPlatformInfo, platform, CL_PLATFORM_NAME, platform_name) ||
      !info_string(cl.GetPlatformInfo, platform, CL_PLATFORM_VERSION, platform_version) ||
      !info_string(cl.GetDeviceInfo, dev, CL_DEVICE_NAME, device_name) ||
      !info_string(cl.GetDeviceInfo, dev, CL_DEVICE_VERSION, device_version) ||
      !info_string(cl.GetDeviceInfo, dev, CL_DRIVER_VERSION, driver_version))
    return false;
  const std::size_t source_len = std::strlen(source);
  char source_id[64];
  std::snprintf(source_id, sizeof source_id, "%016llx %llu",
                static_cast<unsigned long long>(fnv1a(source, source_len)),
                static_cast<unsigned long long>(source_len));
  // "name length value\n": the lengths keep the fields apart whatever bytes they hold.
  key.clear();
  auto field = [&key](const char* name, const std::string& value) {
    key += std::string(name) + ' ' + std::to_string(value.size()) + ' ' + value + '\n';
  };
  field("platform", platform_name);
  field("platform_version", platform_version);
  field("device", device_name);
  field("device_version", device_version);
  field("driver_version", driver_version);
  field("options", options);
  field("source_fnv1a_length", source_id);
  return true;
}

}  // namespace

namespace program_cache_detail {

namespace {
struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;
}  // namespace

// Reads and allocates nothing past the header until the file's size agrees with it.
std::vector<unsigned char> read_entry(const std::string& path, const std::string& key) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return {};
  struct stat st;
  if (::fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode)) return {};  // e.g. a directory
  unsigned char head[kHeaderBytes];
  if (std::fread(head, 1, kHeaderBytes, f.get()) != kHeaderBytes) return {};
  if (std::memcmp(head, kMagic, sizeof kMagic) != 0 || get_le(head + 8, 4) != kFormatVersion ||
      get_le(head + 12, 4) != key.size())
    return {};
  const std::uint64_t payload_size = get_le(head + 16, 8), checksum = get_le(head + 24, 8);
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  if (payload_size == 0 || file_size < kHeaderBytes + key.size() ||
      file_size - kHeaderBytes - key.size() != payload_size)
    return {};
  std::string stored(key.size(), '\0');
  if (std::fread(stored.data(), 1, stored.size(), f.get()) != stored.size() || stored != key)
    return {};
  std::vector<unsigned char> payload(payload_size);
  if (std::fread(payload.data(), 1, payload.size(), f.get()) != payload.size() ||
      std::fgetc(f.get()) != EOF)  // the file changed size since fstat: not the entry we checked
    return {};
  if (fnv1a(payload.data(), payload.size()) != checksum) return {};
  return payload;
}

// Writes the entry to a temporary file of its own (mkstemp: unique per process and thread), flushes
// it to disk and renames it over `path`; on any failure removes the temporary file and gives up.
bool write_entry(const std::string& path, const std::string& key,
                 const std::vector<unsigned char>& payload) {
  unsigned char head[kHeaderBytes];
  std::memcpy(head, kMagic, sizeof kMagic);
  put_le(head + 8, kFormatVersion, 4);
  put_le(head + 12, key.size(), 4);
  put_le(head + 16, payload.size(), 8);
  put_le(head + 24, fnv1a(payload.data(), payload.size()), 8);
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return false;
  FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    std::remove(tmp.c_str());
    return false;
  }
  bool ok = std::fwrite(head, 1, kHeaderBytes, f) == kHeaderBytes &&
            std::fwrite(key.data(), 1, key.size(), f) == key.size() &&
            (payload.empty() || std::fwrite(payload.data(), 1, payload.size(), f) == payload.size()) &&
            std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  std::remove(tmp.c_str());
  return false;
}

}  // namespace program_cache_detail

namespace {

void save_binary(const ClApi& cl, cl_program prog, const std::string& path,
                 const std::string& key) {
  std::size_t size = 0;
  if (cl.GetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS ||
      size == 0)
    return;
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (cl.GetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS) return;
  program_cache_detail::write_entry(path, key, bin);
}

// The cached program, or nullptr: no valid entry, or the driver refused the binary (then the
// caller builds from source and overwrites the entry).
cl_program load_binary(const ClApi& cl, cl_context ctx, cl_device_id dev, const std::string& path,
                       const std::string& key, const std::string& options) {
  const std::vector<unsigned char> bin = program_cache_detail::read_entry(path, key);
  if (bin.empty()) return nullptr;
  const unsigned char* ptr = bin.data();
  const std::size_t size = bin.size();
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program prog = cl.CreateProgramWithBinary(ctx, 1, &dev, &size, &ptr, &status, &err);
  if (err != CL_SUCCESS || status != CL_SUCCESS) {
    if (prog) cl.ReleaseProgram(prog);
    return nullptr;
  }
  if (cl.BuildProgram(prog, 1, &dev, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
    cl.ReleaseProgram(prog);
    return nullptr;
  }
  return prog;
}

std::string build_log(const ClApi& cl, cl_program prog, cl_device_id dev) {
  std::size_t n = 0;
  cl.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) cl.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

cl_program build_program(const ClApi& cl, cl_context ctx, cl_device_id dev, const std::string& where,
                         const char* source, const std::string& options) {
  std::string path, key;
  try {  // the cache never fails a build: any exception here (bad_alloc) is a miss
    if (const std::string dir = cache_dir();
        !dir.empty() && entry_key(cl, dev, source, options, key)) {
      char name[48];
      std::snprintf(name, sizeof name, "/opencl-v2-%016llx.bin",
                    static_cast<unsigned long long>(fnv1a(key.data(), key.size())));
      path = dir + name;
      for (std::size_t slash = dir.find('/', 1); ; slash = dir.find('/', slash + 1)) {  // mkdir -p
        ::mkdir(dir.substr(0, slash).c_str(), 0755);  // failures show up as no cache, never as errors
        if (slash == std::string::npos) break;
      }
      if (cl_program prog = load_binary(cl, ctx, dev, path, key, options)) return prog;
    }
  } catch (const std::exception&) {
    path.clear();
  }
  cl_int err = CL_SUCCESS;
  cl_program prog = cl.CreateProgramWithSource(ctx, 1, &source, nullptr, &err);
  cl_check(err, "clCreateProgramWithSource", where);
  err = cl.BuildProgram(prog, 1, &dev, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const std::string log = build_log(cl, prog, dev);
    cl.ReleaseProgram(prog);
    throw DeviceError("clBuildProgram failed on " + where + ": " + cl_error_name(err) +
                      "\noptions: " + options + "\nbuild log:\n" + log);
  }
  if (!path.empty()) {
    try {
      save_binary(cl, prog, path, key);
    } catch (const std::exception&) {  // e.g. bad_alloc: the program is built; the cache can wait
    }
  }
  return prog;
}

}  // namespace portmat::opencl
