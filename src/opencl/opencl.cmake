# The OpenCL backend: sources, the embedded kernel, and its tests. Included by the root
# CMakeLists.txt. Needs only the Khronos headers at build time; the ICD loader is opened at run time.
find_path(OPENCL_HEADERS_DIR CL/cl.h REQUIRED
  HINTS ENV CPATH
  DOC "Khronos OpenCL headers (Debian: opencl-c-headers)")
set(gemm_cl ${CMAKE_CURRENT_LIST_DIR}/kernels/gemm.cl)
set(gemm_cl_cpp ${CMAKE_CURRENT_BINARY_DIR}/embedded/gemm_cl.cpp)
add_custom_command(OUTPUT ${gemm_cl_cpp}
  COMMAND ${CMAKE_COMMAND} -DIN=${gemm_cl} -DOUT=${gemm_cl_cpp} -DNAME=gemm_cl
          -P ${PROJECT_SOURCE_DIR}/cmake/Embed.cmake
  DEPENDS ${gemm_cl} ${PROJECT_SOURCE_DIR}/cmake/Embed.cmake
  COMMENT "Embedding gemm.cl")
set(gemm_direct_cl ${CMAKE_CURRENT_LIST_DIR}/kernels/gemm_direct.cl)
set(gemm_direct_cl_cpp ${CMAKE_CURRENT_BINARY_DIR}/embedded/gemm_direct_cl.cpp)
add_custom_command(OUTPUT ${gemm_direct_cl_cpp}
  COMMAND ${CMAKE_COMMAND} -DIN=${gemm_direct_cl} -DOUT=${gemm_direct_cl_cpp} -DNAME=gemm_direct_cl
          -P ${PROJECT_SOURCE_DIR}/cmake/Embed.cmake
  DEPENDS ${gemm_direct_cl} ${PROJECT_SOURCE_DIR}/cmake/Embed.cmake
  COMMENT "Embedding gemm_direct.cl")
target_sources(portmat_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cl_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_params.cpp
  ${CMAKE_CURRENT_LIST_DIR}/opencl_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/program_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tuning_store.cpp
  ${gemm_cl_cpp}
  ${gemm_direct_cl_cpp})
target_include_directories(portmat_core PUBLIC $<BUILD_INTERFACE:${OPENCL_HEADERS_DIR}>)
target_compile_definitions(portmat_core PUBLIC PORTMAT_WITH_OPENCL)
list(APPEND PORTMAT_CPP_TESTS tests/cpp/test_opencl.cpp tests/cpp/test_program_cache.cpp)
