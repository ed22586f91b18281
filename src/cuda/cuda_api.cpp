// See cuda_api.hpp.
#include "cuda/cuda_api.hpp"

#include <dlfcn.h>

#include "portmat/portmat.hpp"

namespace portmat::cuda {

namespace {
std::string& reason() {
  static std::string r;
  return r;
}

template <class F>
bool load(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) reason() = std::string("libcuda.so.1 lacks ") + name;
  return fn != nullptr;
}

CuApi* load_api() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    reason() = "libcuda.so.1 not found (no NVIDIA driver)";
    return nullptr;
  }
  auto* api = new CuApi;  // lives as long as the process, like the driver
  // cuEventElapsedTime_v2 (CUDA 12.8+) has the same signature and meaning for timing events.
  if (!dlsym(lib, "cuEventElapsedTime_v2"))
    api->EventElapsedTime = reinterpret_cast<decltype(api->EventElapsedTime)>(dlsym(lib, "cuEventElapsedTime"));
  else
    api->EventElapsedTime = reinterpret_cast<decltype(api->EventElapsedTime)>(dlsym(lib, "cuEventElapsedTime_v2"));
  const bool ok =
      api->EventElapsedTime &&
      load(lib, "cuInit", api->Init) &&
      load(lib, "cuDriverGetVersion", api->DriverGetVersion) &&
      load(lib, "cuDeviceGetCount", api->DeviceGetCount) &&
      load(lib, "cuDeviceGet", api->DeviceGet) &&
      load(lib, "cuDeviceGetName", api->DeviceGetName) &&
      load(lib, "cuDeviceGetAttribute", api->DeviceGetAttribute) &&
      load(lib, "cuDeviceTotalMem_v2", api->DeviceTotalMem) &&
      load(lib, "cuDevicePrimaryCtxRetain", api->DevicePrimaryCtxRetain) &&
      load(lib, "cuCtxSetCurrent", api->CtxSetCurrent) &&
      load(lib, "cuCtxPushCurrent_v2", api->CtxPushCurrent) &&
      load(lib, "cuCtxPopCurrent_v2", api->CtxPopCurrent) &&
      load(lib, "cuModuleLoadData", api->ModuleLoadData) &&
      load(lib, "cuModuleGetFunction", api->ModuleGetFunction) &&
      load(lib, "cuFuncSetAttribute", api->FuncSetAttribute) &&
      load(lib, "cuLaunchKernel", api->LaunchKernel) &&
      load(lib, "cuMemAlloc_v2", api->MemAlloc) &&
      load(lib, "cuMemFree_v2", api->MemFree) &&
      load(lib, "cuMemGetInfo_v2", api->MemGetInfo) &&
      load(lib, "cuMemHostAlloc", api->MemHostAlloc) &&
      load(lib, "cuMemFreeHost", api->MemFreeHost) &&
      load(lib, "cuMemHostRegister_v2", api->MemHostRegister) &&
      load(lib, "cuMemHostUnregister", api->MemHostUnregister) &&
      load(lib, "cuMemcpyHtoD_v2", api->MemcpyHtoD) &&
      load(lib, "cuMemcpyDtoH_v2", api->MemcpyDtoH) &&
      load(lib, "cuMemcpyHtoDAsync_v2", api->MemcpyHtoDAsync) &&
      load(lib, "cuMemcpyDtoHAsync_v2", api->MemcpyDtoHAsync) &&
      load(lib, "cuMemsetD32Async", api->MemsetD32Async) &&
      load(lib, "cuMemsetD2D8Async", api->MemsetD2D8Async) &&
      load(lib, "cuStreamCreate", api->StreamCreate) &&
      load(lib, "cuStreamSynchronize", api->StreamSynchronize) &&
      load(lib, "cuStreamWaitEvent", api->StreamWaitEvent) &&
      load(lib, "cuEventCreate", api->EventCreate) &&
      load(lib, "cuEventDestroy_v2", api->EventDestroy) &&
      load(lib, "cuEventRecord", api->EventRecord) &&
      load(lib, "cuEventSynchronize", api->EventSynchronize) &&
      load(lib, "cuEventQuery", api->EventQuery) &&
      load(lib, "cuPointerGetAttribute", api->PointerGetAttribute) &&
      load(lib, "cuGetErrorName", api->GetErrorName);
  api->TensorMapEncodeTiled =
      reinterpret_cast<decltype(api->TensorMapEncodeTiled)>(dlsym(lib, "cuTensorMapEncodeTiled"));
  api->LaunchKernelEx = reinterpret_cast<decltype(api->LaunchKernelEx)>(dlsym(lib, "cuLaunchKernelEx"));
  api->OccupancyMaxActiveClusters =
      reinterpret_cast<decltype(api->OccupancyMaxActiveClusters)>(dlsym(lib, "cuOccupancyMaxActiveClusters"));
  api->StreamBeginCapture = reinterpret_cast<decltype(api->StreamBeginCapture)>(dlsym(lib, "cuStreamBeginCapture_v2"));
  api->StreamEndCapture = reinterpret_cast<decltype(api->StreamEndCapture)>(dlsym(lib, "cuStreamEndCapture"));
  api->GraphInstantiate = reinterpret_cast<decltype(api->GraphInstantiate)>(dlsym(lib, "cuGraphInstantiateWithFlags"));
  api->GraphLaunch = reinterpret_cast<decltype(api->GraphLaunch)>(dlsym(lib, "cuGraphLaunch"));
  api->GraphExecDestroy = reinterpret_cast<decltype(api->GraphExecDestroy)>(dlsym(lib, "cuGraphExecDestroy"));
  api->GraphDestroy = reinterpret_cast<decltype(api->GraphDestroy)>(dlsym(lib, "cuGraphDestroy"));
  if (!ok) {
    if (!api->EventElapsedTime) reason() = "libcuda.so.1 lacks cuEventElapsedTime";
    delete api;
    return nullptr;
  }
  if (CUresult r = api->Init(0); r != CUDA_SUCCESS) {
    const char* name = nullptr;
    api->GetErrorName(r, &name);
    reason() = std::string("cuInit failed: ") + (name ? name : "unknown CUDA error");
    delete api;
    return nullptr;
  }
  return api;
}
}  // namespace

const CuApi* cu_api() {
  static const CuApi* api = load_api();
  return api;
}

const std::string& cu_unavailable_reason() {
  cu_api();
  return reason();
}

std::string cu_error_name(CUresult code) {
  const char* name = nullptr;
  if (const CuApi* api = cu_api()) api->GetErrorName(code, &name);
  if (name) return name;
  if (code == CUDA_ERROR_OUT_OF_MEMORY) return "CUDA_ERROR_OUT_OF_MEMORY";
  return "CUDA error " + std::to_string(static_cast<int>(code));
}

void cu_check(CUresult code, const char* what, const std::string& where) {
  if (code == CUDA_SUCCESS) return;
  const std::string msg = std::string(what) + " failed on " + where + ": " + cu_error_name(code);
  if (code == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfDeviceMemory(msg);
  throw DeviceError(msg);
}

}  // namespace portmat::cuda
