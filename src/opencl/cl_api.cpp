// See cl_api.hpp.
#include "opencl/cl_api.hpp"

#include <dlfcn.h>

#include "portmat/portmat.hpp"

namespace portmat::opencl {

namespace {
template <class F>
bool load(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

ClApi* load_api() {
  void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return nullptr;
  auto* api = new ClApi;  // lives as long as the process, like the library
  const bool ok =
      load(lib, "clGetPlatformIDs", api->GetPlatformIDs) &&
      load(lib, "clGetPlatformInfo", api->GetPlatformInfo) &&
      load(lib, "clGetDeviceIDs", api->GetDeviceIDs) &&
      load(lib, "clGetDeviceInfo", api->GetDeviceInfo) &&
      load(lib, "clCreateContext", api->CreateContext) &&
      load(lib, "clReleaseContext", api->ReleaseContext) &&
      load(lib, "clCreateCommandQueue", api->CreateCommandQueue) &&
      load(lib, "clReleaseCommandQueue", api->ReleaseCommandQueue) &&
      load(lib, "clCreateProgramWithSource", api->CreateProgramWithSource) &&
      load(lib, "clCreateProgramWithBinary", api->CreateProgramWithBinary) &&
      load(lib, "clBuildProgram", api->BuildProgram) &&
      load(lib, "clGetProgramBuildInfo", api->GetProgramBuildInfo) &&
      load(lib, "clGetProgramInfo", api->GetProgramInfo) &&
      load(lib, "clReleaseProgram", api->ReleaseProgram) &&
      load(lib, "clCreateKernel", api->CreateKernel) &&
      load(lib, "clReleaseKernel", api->ReleaseKernel) &&
      load(lib, "clSetKernelArg", api->SetKernelArg) &&
      load(lib, "clCreateBuffer", api->CreateBuffer) &&
      load(lib, "clReleaseMemObject", api->ReleaseMemObject) &&
      load(lib, "clEnqueueWriteBuffer", api->EnqueueWriteBuffer) &&
      load(lib, "clEnqueueWriteBufferRect", api->EnqueueWriteBufferRect) &&
      load(lib, "clEnqueueReadBuffer", api->EnqueueReadBuffer) &&
      load(lib, "clEnqueueReadBufferRect", api->EnqueueReadBufferRect) &&
      load(lib, "clEnqueueNDRangeKernel", api->EnqueueNDRangeKernel) &&
      load(lib, "clEnqueueMapBuffer", api->EnqueueMapBuffer) &&
      load(lib, "clEnqueueUnmapMemObject", api->EnqueueUnmapMemObject) &&
      load(lib, "clWaitForEvents", api->WaitForEvents) &&
      load(lib, "clGetEventProfilingInfo", api->GetEventProfilingInfo) &&
      load(lib, "clReleaseEvent", api->ReleaseEvent) &&
      load(lib, "clRetainEvent", api->RetainEvent) &&
      load(lib, "clFinish", api->Finish) &&
      load(lib, "clFlush", api->Flush) &&
      load(lib, "clGetEventInfo", api->GetEventInfo);
  if (!ok) {
    delete api;
    return nullptr;
  }
  return api;
}
}  // namespace

const ClApi* cl_api() {
  static const ClApi* api = load_api();
  return api;
}

std::string cl_error_name(cl_int code) {
  const char* name = "unknown OpenCL error";
  switch (code) {
    case CL_DEVICE_NOT_FOUND: name = "CL_DEVICE_NOT_FOUND"; break;
    case CL_DEVICE_NOT_AVAILABLE: name = "CL_DEVICE_NOT_AVAILABLE"; break;
    case CL_COMPILER_NOT_AVAILABLE: name = "CL_COMPILER_NOT_AVAILABLE"; break;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: name = "CL_MEM_OBJECT_ALLOCATION_FAILURE"; break;
    case CL_OUT_OF_RESOURCES: name = "CL_OUT_OF_RESOURCES"; break;
    case CL_OUT_OF_HOST_MEMORY: name = "CL_OUT_OF_HOST_MEMORY"; break;
    case CL_PROFILING_INFO_NOT_AVAILABLE: name = "CL_PROFILING_INFO_NOT_AVAILABLE"; break;
    case CL_BUILD_PROGRAM_FAILURE: name = "CL_BUILD_PROGRAM_FAILURE"; break;
    case CL_MAP_FAILURE: name = "CL_MAP_FAILURE"; break;
    case CL_MISALIGNED_SUB_BUFFER_OFFSET: name = "CL_MISALIGNED_SUB_BUFFER_OFFSET"; break;
    case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST:
      name = "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"; break;
    case CL_INVALID_VALUE: name = "CL_INVALID_VALUE"; break;
    case CL_INVALID_DEVICE_TYPE: name = "CL_INVALID_DEVICE_TYPE"; break;
    case CL_INVALID_PLATFORM: name = "CL_INVALID_PLATFORM"; break;
    case CL_INVALID_DEVICE: name = "CL_INVALID_DEVICE"; break;
    case CL_INVALID_CONTEXT: name = "CL_INVALID_CONTEXT"; break;
    case CL_INVALID_QUEUE_PROPERTIES: name = "CL_INVALID_QUEUE_PROPERTIES"; break;
    case CL_INVALID_COMMAND_QUEUE: name = "CL_INVALID_COMMAND_QUEUE"; break;
    case CL_INVALID_HOST_PTR: name = "CL_INVALID_HOST_PTR"; break;
    case CL_INVALID_MEM_OBJECT: name = "CL_INVALID_MEM_OBJECT"; break;
    case CL_INVALID_BINARY: name = "CL_INVALID_BINARY"; break;
    case CL_INVALID_BUILD_OPTIONS: name = "CL_INVALID_BUILD_OPTIONS"; break;
    case CL_INVALID_PROGRAM: name = "CL_INVALID_PROGRAM"; break;
    case CL_INVALID_PROGRAM_EXECUTABLE: name = "CL_INVALID_PROGRAM_EXECUTABLE"; break;
    case CL_INVALID_KERNEL_NAME: name = "CL_INVALID_KERNEL_NAME"; break;
    case CL_INVALID_KERNEL: name = "CL_INVALID_KERNEL"; break;
    case CL_INVALID_ARG_INDEX: name = "CL_INVALID_ARG_INDEX"; break;
    case CL_INVALID_ARG_VALUE: name = "CL_INVALID_ARG_VALUE"; break;
    case CL_INVALID_ARG_SIZE: name = "CL_INVALID_ARG_SIZE"; break;
    case CL_INVALID_KERNEL_ARGS: name = "CL_INVALID_KERNEL_ARGS"; break;
    case CL_INVALID_WORK_DIMENSION: name = "CL_INVALID_WORK_DIMENSION"; break;
    case CL_INVALID_WORK_GROUP_SIZE: name = "CL_INVALID_WORK_GROUP_SIZE"; break;
    case CL_INVALID_WORK_ITEM_SIZE: name = "CL_INVALID_WORK_ITEM_SIZE"; break;
    case CL_INVALID_GLOBAL_OFFSET: name = "CL_INVALID_GLOBAL_OFFSET"; break;
    case CL_INVALID_EVENT_WAIT_LIST: name = "CL_INVALID_EVENT_WAIT_LIST"; break;
    case CL_INVALID_EVENT: name = "CL_INVALID_EVENT"; break;
    case CL_INVALID_OPERATION: name = "CL_INVALID_OPERATION"; break;
    case CL_INVALID_BUFFER_SIZE: name = "CL_INVALID_BUFFER_SIZE"; break;
    case CL_INVALID_GLOBAL_WORK_SIZE: name = "CL_INVALID_GLOBAL_WORK_SIZE"; break;
    case -1001: name = "CL_PLATFORM_NOT_FOUND_KHR"; break;
    default: break;
  }
  return std::string(name) + " (" + std::to_string(code) + ")";
}

void cl_check(cl_int code, const char* what, const std::string& where) {
  if (code == CL_SUCCESS) return;
  const std::string msg = std::string(what) + " failed on " + where + ": " + cl_error_name(code);
  if (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_INVALID_BUFFER_SIZE ||
      code == CL_OUT_OF_HOST_MEMORY)
    throw OutOfDeviceMemory(msg);
  throw DeviceError(msg);
}

}  // namespace portmat::opencl
