// Which micro-kernel and block sizes each CPU uses: the per-ISA table, chosen at run time from the
// CPU's features (the BLIS "context" / OpenBLAS "dynamic arch" idea) so one build runs everywhere.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/gemm_driver.hpp"

namespace portmat::cpu {

struct KernelSet {
  const char* isa = "";  // "avx512", "avx2", "neon", "scalar"
  GemmConfig<float> f32;
  GemmConfig<double> f64;
  GemmConfig<std::uint32_t> u32;  // the products of every integer dtype (core/dtypes.cpp)
  GemmConfig<std::uint64_t> u64;
  // u64 for operands whose every value is a sign-extended 32-bit one: faster where the ISA has no
  // 64-bit multiply (AVX2), the same as u64 elsewhere.
  GemmConfig<std::uint64_t> u64_narrow;
  // complex64 / complex128 products as complex ones (ukernel.hpp, Complex64): only where the ISA
  // has complex kernels (ukernel null elsewhere: the backend then runs the real product with b's
  // real form, cpu_backend.cpp, matmul_complex_b_host).
  GemmConfig<Complex64> c64;
  GemmConfig<Complex128> c128;
};

// Every kernel set this CPU can run, best first.
const std::vector<KernelSet>& supported_kernel_sets();

// The set the backend uses: the best supported one, or the one $PORTMAT_CPU_ISA names
// ("avx512", "avx2", "neon", "scalar"; an unsupported or unknown name falls back to the best).
const KernelSet& active_kernel_set();

// Single-core float32 FMA throughput of `set` in flop/s, measured with a loop of ~0.55 ms per try (kernel_table.cpp); 0 if the set
// has no FMA loop (scalar).
double measure_core_peak(const KernelSet& set);

// Whether this core runs a 512-bit FMA at the rate of a 256-bit one, as two halves (AMD's Zen 4),
// so that AVX-512 gives the flops per cycle of AVX2: its measured AVX-512 FMA loop under 1.4x the
// AVX2 one's flop/s. False without AVX-512. Measured once per process (~6 ms; the device's peak
// reuses the AVX-512 figure).
bool wide_fma_at_half_rate();

}  // namespace portmat::cpu
