// The CUDA driver-API entry points portmat uses, loaded from libcuda.so.1 at first use.
//
// Loading at run time rather than linking keeps `import portmat` working on machines without the
// NVIDIA driver: the CUDA backend then lists no devices. At build time only cuda.h is needed (for
// the types); the kernels ship as an embedded fatbin (see cuda.cmake), so neither the CUDA runtime
// nor NVRTC is needed at run time either.
#pragma once

#include <cuda.h>

#include <string>

namespace portmat::cuda {

// The versioned symbols (cuMemAlloc_v2, ...) are what cuda.h's macros name; the table holds the
// functions under their unversioned names.
struct CuApi {
  decltype(&::cuInit) Init;
  decltype(&::cuDriverGetVersion) DriverGetVersion;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetName) DeviceGetName;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDeviceTotalMem_v2) DeviceTotalMem;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxPushCurrent_v2) CtxPushCurrent;
  decltype(&::cuCtxPopCurrent_v2) CtxPopCurrent;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuMemAlloc_v2) MemAlloc;
  decltype(&::cuMemFree_v2) MemFree;
  decltype(&::cuMemGetInfo_v2) MemGetInfo;
  decltype(&::cuMemHostAlloc) MemHostAlloc;
  decltype(&::cuMemFreeHost) MemFreeHost;
  decltype(&::cuMemHostRegister_v2) MemHostRegister;
  decltype(&::cuMemHostUnregister) MemHostUnregister;
  decltype(&::cuMemcpyHtoD_v2) MemcpyHtoD;
  decltype(&::cuMemcpyDtoH_v2) MemcpyDtoH;
  decltype(&::cuMemcpyHtoDAsync_v2) MemcpyHtoDAsync;
  decltype(&::cuMemcpyDtoHAsync_v2) MemcpyDtoHAsync;
  decltype(&::cuMemsetD32Async) MemsetD32Async;
  decltype(&::cuMemsetD2D8Async) MemsetD2D8Async;
  decltype(&::cuStreamCreate) StreamCreate;
  decltype(&::cuStreamSynchronize) StreamSynchronize;
  decltype(&::cuStreamWaitEvent) StreamWaitEvent;
  decltype(&::cuEventCreate) EventCreate;
  decltype(&::cuEventDestroy_v2) EventDestroy;
  decltype(&::cuEventRecord) EventRecord;
  decltype(&::cuEventSynchronize) EventSynchronize;
  decltype(&::cuEventQuery) EventQuery;
  decltype(&::cuEventElapsedTime) EventElapsedTime;  // _v2 where the driver has it
  decltype(&::cuPointerGetAttribute) PointerGetAttribute;
  decltype(&::cuGetErrorName) GetErrorName;
  // Optional (CUDA 12.0+ drivers): null where the driver lacks it; then the Hopper tensor-core
  // kernels (TMA) are not used and the mma.sync ones run instead.
  decltype(&::cuTensorMapEncodeTiled) TensorMapEncodeTiled;
  // Optional (CUDA 12.0+ drivers): launches with thread-block clusters (split-K's one-launch
  // kernels); without it split-K takes its two launches.
  decltype(&::cuLaunchKernelEx) LaunchKernelEx;
  decltype(&::cuOccupancyMaxActiveClusters) OccupancyMaxActiveClusters;
  // Optional: CUDA graphs, for benchmarks only (PORTMAT_CUDA_TIME_GRAPH: time_gemm's products
  // captured once and replayed, as vendor libraries are timed through CUDA graphs).
  decltype(&::cuStreamBeginCapture) StreamBeginCapture;
  decltype(&::cuStreamEndCapture) StreamEndCapture;
  decltype(&::cuGraphInstantiate) GraphInstantiate;
  decltype(&::cuGraphLaunch) GraphLaunch;
  decltype(&::cuGraphExecDestroy) GraphExecDestroy;
  decltype(&::cuGraphDestroy) GraphDestroy;
};

// The loaded table, or nullptr when libcuda.so.1 is missing, lacks a symbol, or cuInit fails
// (no device, driver/kernel module mismatch). Loaded once, thread-safely.
const CuApi* cu_api();

// Why cu_api() is null ("libcuda.so.1 not found", "cuInit failed: CUDA_ERROR_NO_DEVICE"), or "".
const std::string& cu_unavailable_reason();

// "CUDA_ERROR_OUT_OF_MEMORY" etc. (the driver's own name when it is loaded).
std::string cu_error_name(CUresult code);

// Throws DeviceError "<what> failed on <where>: <code name>", or OutOfDeviceMemory for
// CUDA_ERROR_OUT_OF_MEMORY.
void cu_check(CUresult code, const char* what, const std::string& where);

}  // namespace portmat::cuda
