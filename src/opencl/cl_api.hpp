// The OpenCL entry points portmat uses, loaded from the ICD loader (libOpenCL.so.1) at run time.
//
// Loading at run time rather than linking lets `import portmat` work on machines without any
// OpenCL installed: the OpenCL backend then simply lists no devices. Build-time needs are only the
// Khronos headers.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <string>

namespace portmat::opencl {

struct ClApi {
  decltype(&::clGetPlatformIDs) GetPlatformIDs;
  decltype(&::clGetPlatformInfo) GetPlatformInfo;
  decltype(&::clGetDeviceIDs) GetDeviceIDs;
  decltype(&::clGetDeviceInfo) GetDeviceInfo;
  decltype(&::clCreateContext) CreateContext;
  decltype(&::clReleaseContext) ReleaseContext;
  decltype(&::clCreateCommandQueue) CreateCommandQueue;
  decltype(&::clReleaseCommandQueue) ReleaseCommandQueue;
  decltype(&::clCreateProgramWithSource) CreateProgramWithSource;
  decltype(&::clCreateProgramWithBinary) CreateProgramWithBinary;
  decltype(&::clBuildProgram) BuildProgram;
  decltype(&::clGetProgramBuildInfo) GetProgramBuildInfo;
  decltype(&::clGetProgramInfo) GetProgramInfo;
  decltype(&::clReleaseProgram) ReleaseProgram;
  decltype(&::clCreateKernel) CreateKernel;
  decltype(&::clReleaseKernel) ReleaseKernel;
  decltype(&::clSetKernelArg) SetKernelArg;
  decltype(&::clCreateBuffer) CreateBuffer;
  decltype(&::clReleaseMemObject) ReleaseMemObject;
  decltype(&::clEnqueueWriteBuffer) EnqueueWriteBuffer;
  decltype(&::clEnqueueWriteBufferRect) EnqueueWriteBufferRect;
  decltype(&::clEnqueueReadBuffer) EnqueueReadBuffer;
  decltype(&::clEnqueueReadBufferRect) EnqueueReadBufferRect;
  decltype(&::clEnqueueNDRangeKernel) EnqueueNDRangeKernel;
  decltype(&::clEnqueueMapBuffer) EnqueueMapBuffer;
  decltype(&::clEnqueueUnmapMemObject) EnqueueUnmapMemObject;
  decltype(&::clWaitForEvents) WaitForEvents;
  decltype(&::clGetEventProfilingInfo) GetEventProfilingInfo;
  decltype(&::clReleaseEvent) ReleaseEvent;
  decltype(&::clRetainEvent) RetainEvent;
  decltype(&::clFinish) Finish;
  decltype(&::clFlush) Flush;
  decltype(&::clGetEventInfo) GetEventInfo;
};

// The loaded table, or nullptr when no OpenCL loader is installed. Loaded once, thread-safely.
const ClApi* cl_api();

// "CL_OUT_OF_RESOURCES (-5)" etc.
std::string cl_error_name(cl_int code);

// Throws DeviceError "<what> failed on <where>: <code name>", or OutOfDeviceMemory for the codes
// that mean the device ran out of memory.
void cl_check(cl_int code, const char* what, const std::string& where);

}  // namespace portmat::opencl
