# The native CPU backend: blocking/packing driver, thread pool, per-ISA micro-kernels. Included by
# the root CMakeLists.txt. One build runs on every x86-64 CPU: only the kernel files get ISA flags
# (-mavx512f, -mavx2), and kernel_table.cpp calls them only where the CPU supports them. AArch64
# builds add the NEON kernels, which every AArch64 CPU runs.
set(cpu_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(portmat_core PRIVATE
  ${cpu_dir}/boolean.cpp
  ${cpu_dir}/cpu_backend.cpp
  ${cpu_dir}/gemm_driver.cpp
  ${cpu_dir}/kernel_table.cpp
  ${cpu_dir}/skinny.cpp
  ${cpu_dir}/small.cpp
  ${cpu_dir}/thread_pool.cpp)
set(cpu_hot_files ${cpu_dir}/boolean.cpp ${cpu_dir}/gemm_driver.cpp ${cpu_dir}/skinny.cpp ${cpu_dir}/small.cpp)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  target_sources(portmat_core PRIVATE ${cpu_dir}/kernels/gemm_avx512.cpp ${cpu_dir}/kernels/gemm_avx512_int.cpp
                 ${cpu_dir}/kernels/gemm_complex_avx512.cpp ${cpu_dir}/kernels/gemm_avx2.cpp
                 ${cpu_dir}/kernels/gemm_complex_avx2.cpp)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set_source_files_properties(${cpu_dir}/kernels/gemm_avx512.cpp ${cpu_dir}/kernels/gemm_complex_avx512.cpp
                                PROPERTIES COMPILE_OPTIONS "-mavx512f;-mfma")
    set_source_files_properties(${cpu_dir}/kernels/gemm_avx512_int.cpp PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512dq")
    set_source_files_properties(${cpu_dir}/kernels/gemm_avx2.cpp ${cpu_dir}/kernels/gemm_complex_avx2.cpp
                                PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  elseif(MSVC)
    set_source_files_properties(${cpu_dir}/kernels/gemm_avx512.cpp ${cpu_dir}/kernels/gemm_avx512_int.cpp
                                ${cpu_dir}/kernels/gemm_complex_avx512.cpp PROPERTIES COMPILE_OPTIONS "/arch:AVX512")
    set_source_files_properties(${cpu_dir}/kernels/gemm_avx2.cpp ${cpu_dir}/kernels/gemm_complex_avx2.cpp
                                PROPERTIES COMPILE_OPTIONS "/arch:AVX2")
  endif()
  list(APPEND cpu_hot_files ${cpu_dir}/kernels/gemm_avx512.cpp ${cpu_dir}/kernels/gemm_avx512_int.cpp
       ${cpu_dir}/kernels/gemm_complex_avx512.cpp ${cpu_dir}/kernels/gemm_avx2.cpp
       ${cpu_dir}/kernels/gemm_complex_avx2.cpp)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  # NEON is part of the AArch64 baseline: no ISA flags and no run-time check. The file and the
  # table entry in kernel_table.cpp are both guarded by __aarch64__ (GCC, Clang), so a compiler
  # without it (MSVC) compiles an empty file and keeps the scalar kernel.
  target_sources(portmat_core PRIVATE ${cpu_dir}/kernels/gemm_neon.cpp)
  list(APPEND cpu_hot_files ${cpu_dir}/kernels/gemm_neon.cpp)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  # -O3 on the hot files whatever the build type (the ISA flags above are appended, not replaced).
  set_property(SOURCE ${cpu_hot_files} APPEND PROPERTY COMPILE_OPTIONS "-O3")
  # skinny.cpp's and small.cpp's kernels are plain vector arithmetic: contracting a * b + c into
  # an FMA (on the clones for CPUs that have one) is what makes them fast, and only more accurate.
  set_property(SOURCE ${cpu_dir}/skinny.cpp ${cpu_dir}/small.cpp APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=fast")
  # Their vector helpers (vector_ext.hpp) are static and always inlined into each clone, so the
  # note that a 32- or 64-byte vector's calling convention differs between ISAs concerns no call.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set_property(SOURCE ${cpu_dir}/boolean.cpp ${cpu_dir}/skinny.cpp ${cpu_dir}/small.cpp APPEND PROPERTY COMPILE_OPTIONS "-Wno-psabi")
  endif()
  # Under sanitizers small.cpp drops back to the sanitizer build's -O1 (appended last, so it wins),
  # and GCC keeps its line tables but not its variables' locations: each of its call sites inlines
  # every row-tile variant of every clone, and with ASan + UBSan and -g, GCC 12 compiled it alone
  # in 665 s and 3.0 GB at -O3 (16 minutes on CI's 2 cores beside other files), 391 s at -O1, and
  # about 300 s at -O1 without variable tracking, which at -O3 overflowed and was run twice. Its
  # products are small, so the tests that reach it stay short at -O1.
  if(PORTMAT_SANITIZE)
    set_property(SOURCE ${cpu_dir}/small.cpp APPEND PROPERTY COMPILE_OPTIONS "-O1")
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      set_property(SOURCE ${cpu_dir}/small.cpp APPEND PROPERTY COMPILE_OPTIONS "-fno-var-tracking-assignments")
    endif()
  endif()
endif()
target_compile_definitions(portmat_core PUBLIC PORTMAT_WITH_CPU)
list(APPEND PORTMAT_CPP_TESTS tests/cpp/test_cpu.cpp)
