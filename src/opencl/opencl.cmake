# The OpenCL backend: sources, the embedded kernels, and its tests. Included by the root
# CMakeLists.txt. Needs only the Khronos headers at build time; the ICD loader is opened at run time.
find_path(OPENCL_HEADERS_DIR CL/cl.h REQUIRED
  HINTS ENV CPATH
  DOC "Khronos OpenCL headers (Debian: opencl-c-headers)")
# Each kernel file becomes a C++ file defining portmat::kernels::<name>_cl (cmake/Embed.cmake).
set(embedded_kernels)
foreach(kernel gemm gemm_direct casts)
  set(kernel_cl ${CMAKE_CURRENT_LIST_DIR}/kernels/${kernel}.cl)
  set(kernel_cl_cpp ${CMAKE_CURRENT_BINARY_DIR}/embedded/${kernel}_cl.cpp)
  add_custom_command(OUTPUT ${kernel_cl_cpp}
    COMMAND ${CMAKE_COMMAND} -DIN=${kernel_cl} -DOUT=${kernel_cl_cpp} -DNAME=${kernel}_cl
            -P ${PROJECT_SOURCE_DIR}/cmake/Embed.cmake
    DEPENDS ${kernel_cl} ${PROJECT_SOURCE_DIR}/cmake/Embed.cmake
    COMMENT "Embedding ${kernel}.cl")
  list(APPEND embedded_kernels ${kernel_cl_cpp})
endforeach()
target_sources(portmat_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cl_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_params.cpp
  ${CMAKE_CURRENT_LIST_DIR}/opencl_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/program_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tuning_store.cpp
  ${embedded_kernels})
target_include_directories(portmat_core PUBLIC $<BUILD_INTERFACE:${OPENCL_HEADERS_DIR}>)
target_compile_definitions(portmat_core PUBLIC PORTMAT_WITH_OPENCL)
list(APPEND PORTMAT_CPP_TESTS tests/cpp/test_opencl.cpp tests/cpp/test_program_cache.cpp)
