// See program_cache.hpp. C stdio rather than iostreams: see gemm_params.cpp.
#include "opencl/program_cache.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::opencl {

namespace {

std::string cache_dir() {
  if (const char* d = std::getenv("PORTMAT_CACHE_DIR")) return std::string(d) == "off" ? "" : d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/portmat";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/portmat";
  return {};
}

std::uint64_t fnv1a(const std::string& s) {  // 64-bit FNV-1a: a file name, not a security hash
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string info_string(const ClApi& cl, cl_device_id d, cl_device_info what) {
  char buf[512] = {0};
  cl.GetDeviceInfo(d, what, sizeof buf - 1, buf, nullptr);
  return buf;
}

std::string build_log(const ClApi& cl, cl_program prog, cl_device_id dev) {
  std::size_t n = 0;
  cl.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) cl.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

void save_binary(const ClApi& cl, cl_program prog, const std::string& path) {
  std::size_t size = 0;
  if (cl.GetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS ||
      size == 0)
    return;
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (cl.GetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS) return;
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return;
  const bool ok = std::fwrite(bin.data(), 1, size, f) == size;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return;
  }
  std::rename(tmp.c_str(), path.c_str());  // atomic: readers never see half a file
}

cl_program load_binary(const ClApi& cl, cl_context ctx, cl_device_id dev, const std::string& path,
                       const std::string& options) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return nullptr;
  std::vector<unsigned char> bin;
  unsigned char chunk[1 << 16];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) bin.insert(bin.end(), chunk, chunk + n);
  std::fclose(f);
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

}  // namespace

cl_program build_program(const ClApi& cl, cl_context ctx, cl_device_id dev, const std::string& where,
                         const char* source, const std::string& options) {
  std::string path;
  if (const std::string dir = cache_dir(); !dir.empty()) {
    const std::string key = info_string(cl, dev, CL_DEVICE_NAME) + '\n' +
                            info_string(cl, dev, CL_DEVICE_VERSION) + '\n' +
                            info_string(cl, dev, CL_DRIVER_VERSION) + '\n' + options + '\n' + source;
    char name[32];
    std::snprintf(name, sizeof name, "/opencl-%016llx.bin", static_cast<unsigned long long>(fnv1a(key)));
    path = dir + name;
    for (std::size_t slash = dir.find('/', 1); ; slash = dir.find('/', slash + 1)) {  // mkdir -p
      ::mkdir(dir.substr(0, slash).c_str(), 0755);  // failures show up as no cache, never as errors
      if (slash == std::string::npos) break;
    }
    if (cl_program prog = load_binary(cl, ctx, dev, path, options)) return prog;
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
  if (!path.empty()) save_binary(cl, prog, path);
  return prog;
}

}  // namespace portmat::opencl
