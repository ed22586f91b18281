// The CUDA gemm kernels: c = a @ b in exact float32 (FFMA, never TF32) and float64 (DFMA), and
// the wrapping 32- and 64-bit unsigned products that carry the integer dtypes, for any M, N, K and
// both operand layouts. Compiled ahead of time by nvcc into one fatbin (sm_80 and
// sm_90a machine code, compute_90 PTX) that the backend embeds and loads with cuModuleLoadData.
// The warp-specialized kernels (copying warps apart, mbarriers, setmaxnreg) exist as sm_90a code
// only; the others are the same everywhere.
//
// Contract of every kernel here (gemm_tiles.h has the argument block and the tile table):
//  - one block computes a bm x bn tile of c; blocks are numbered on a 1-D grid of
//    ceil(M/bm) * ceil(N/bn) and swizzled in groups of `group_m` tile rows, so that blocks running
//    together share operand panels in L2;
//  - k advances bk at a time through a `stages`-deep ring of shared-memory buffers filled by
//    cp.async (Ampere's asynchronous global->shared copy, also fast on Hopper): the copies for
//    step t + stages - 1 are in flight while step t computes; one barrier per step;
//  - shared memory holds both operands with their M (resp. N) index contiguous: As[k][m], Bs[k][n].
//    An operand whose global layout is already m-contiguous (column-major a, row-major b) is copied
//    16 bytes at a time; a k-contiguous one (row-major a, column-major b) is transposed on the way,
//    one element per copy, in an order that puts a warp's 32 stores in 32 distinct banks (rows
//    padded by kPad elements);
//  - each thread accumulates a (4 rm) x (4 rn) register tile, read from shared memory as 4-element
//    vectors (LDS.128): the lanes of a warp read at most 8 distinct 16-byte words of a row, so the
//    loads are free of bank conflicts;
//  - edges: out-of-range rows, columns and k are zero-filled by the copy (cp.async src-size) and
//    not stored, so no size needs to be a multiple of any tile.
//  - every entry point below calls wait_for_prior_grid() (gemm_common.cuh) before anything else:
//    the host launches each kernel as a programmatic dependent launch, so a kernel may be resident
//    before the one ahead of it on the stream has finished, and must not read or write global
//    memory until that wait returns (tests/python/test_cuda_sources.py holds the rule).
//
// Files: the device code is in headers, the shared pieces in one and then one per kernel family
// (each starts with what the family does and why it exists):
//  - gemm_common.cuh   what every family uses: cp.async, fragment loads, outer_fma, store_acc,
//                      the swizzle, SlabLoader, and the stream-K schedule of _sk and _wsk;
//  - gemm_body.cuh     gemm_body, the plain body: 128x256, 64x64 and float64's 64x64;
//  - gemm_body_db.cuh  gemm_body_db, fragments double-buffered in registers: _db, _ak;
//  - gemm_body_fp.cuh  gemm_body_fp, unchecked copies inside: _fp, 128x128_fp, 64x128_fp,
//                      128x64_fp, _fpa, the stream-K _sk of 128x256, 64x128 and 128x64, and
//                      64x128_sl, 128x64_sl (sliced k: two groups of warps over halves of each slab);
//  - gemm_body_ws.cuh  gemm_body_ws, warp-specialized (sm_90a): _ws, stream-K _wsk;
//  - gemm_batched.cuh  strided batches (_fpb, 64x128_fpb, 128x64_fpb, 64x128_slb, 128x64_slb, 64x64b, _small), split_sum
//                      (split-K's sum of parts) and complex_b (complex b as real);
//  - gemm_thin.cuh     thin products (a side of c at most 16): thin_dots, thin_axpy, thin_sum;
//  - gemm_short_k.cuh  short inner dimension (k at most 32), c large: short_k;
//  - gemm_resident.cuh k at most 256 and a side of c at most 64, the other side long: the short
//                      operand resident in shared memory, the long one streamed (resident_lk,
//                      _lr, and their 32-column _s32 forms);
//  - casts.cuh         cast_elements, dtype casts for products of dtypes the kernels lack;
//  - gemm_tc.cuh       gemm_tc_body, the tensor cores (mma.sync) for the precision modes tf32,
//                      float32_tc and bfloat16 (issue 18): its own tile (kTc) and shared-memory
//                      padding, the same GemmArgs contract otherwise.
//  - gemm_wgmma.cuh    gemm_wgmma_body, the Hopper tensor-core kernels (wgmma + TMA, sm_90a only)
//                      for the same modes, on k-major copies of the operands written by its
//                      pre-pass (wg_prep_body); its own argument block (WgArgs: TMA maps).
//  - gemm_wgmma_f32tc.cuh  gemm_wgmma_f32tc_body, float32_tc on Hopper with the tensor cores'
//                      sums promoted into a second accumulator set in registers (128 x 128 and
//                      128 x 192 tiles; the same pre-pass, TMA ring and WgArgs).
// This file is the one translation unit that includes them, with every kernel's entry point at its
// end. One unit, because the host loads one module from one fatbin: kernels in several units
// would need relocatable device code (-rdc) and a device link to become that module, another
// compilation path whose machine code is not guaranteed to stay the same. And the entry points
// stay in one list: every name that the host looks up (cuModuleGetFunction) is spelled out here,
// next to the body, tile and launch bounds that it is compiled with.
#include "gemm_common.cuh"
#include "gemm_body.cuh"
#include "gemm_body_db.cuh"
#include "gemm_body_fp.cuh"
#include "gemm_body_ws.cuh"
#include "gemm_batched.cuh"
#include "gemm_thin.cuh"
#include "gemm_short_k.cuh"
#include "gemm_resident.cuh"
#include "casts.cuh"
#include "gemm_tc.cuh"
#include "gemm_wgmma.cuh"
#include "gemm_wgmma_f32tc.cuh"

using portmat::cuda::GemmArgs;
using portmat::cuda::gemm_body;
using portmat::cuda::gemm_body_db;
using portmat::cuda::gemm_body_fp;
using portmat::cuda::gemm_body_ws;
using portmat::cuda::batch_member;
using portmat::cuda::gemm_small_body;
using portmat::cuda::complex_b_body;
using portmat::cuda::CastArgs;
using portmat::cuda::cast_body;
using portmat::cuda::ComplexBArgs;
using portmat::cuda::SplitSumArgs;
using portmat::cuda::kSplitSumThreads;
using portmat::cuda::split_sum_body;
using portmat::cuda::ThinArgs;
using portmat::cuda::ShortKArgs;
using portmat::cuda::short_k_body;
using portmat::cuda::ResidentArgs;
using portmat::cuda::resident_body;
using portmat::cuda::wait_for_prior_grid;
using portmat::cuda::ThinSumArgs;
using portmat::cuda::kThinSumThreads;
using portmat::cuda::thin_axpy_body;
using portmat::cuda::thin_dots_body;
using portmat::cuda::thin_sum_body;
using portmat::cuda::gemm_tc_body;
using portmat::cuda::gemm_wgmma_body;
using portmat::cuda::gemm_wgmma_f32tc_body;
using portmat::cuda::wg_prep_body;
using portmat::cuda::WgArgs;
using portmat::cuda::WgPrepArgs;
namespace tiles = portmat::cuda;

// The kernels, by element type, tile and layout of a and b ('r' row-major, 'c' column-major).
// Spelled out so each name can be grepped; the host builds the same names from GemmTile::name.
#define PM_BOUNDS(tile) __launch_bounds__(tiles::tile.threads(), tiles::tile.min_blocks)
extern "C" {

__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_128x256, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_128x256, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_128x256, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_128x256, false, true>(p); }

__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64, false, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_db, true, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_db, true, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_db, false, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_db, false, true, false>(p); }

__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_ak, true, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_ak, true, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_ak, false, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_db<float, tiles::kF32_128x256_ak, false, true, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fp, true, false, 5>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fp, true, true, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fp, false, false, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fp, false, true, 4>(p); }

__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpa, true, false, 5, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpa, true, true, 7, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpa, false, false, 7, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpa, false, true, 4, false, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_sk, true, false, 5, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_sk, true, true, 5, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_sk, false, false, 7, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_sk, false, true, 5, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_ws, true, false, 5>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_ws, true, true, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_ws, false, false, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_ws, false, true, 4>(p); }

__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_wsk, true, false, 5, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_wsk, true, true, 7, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_wsk, false, false, 7, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_ws<float, tiles::kF32_128x256_wsk, false, true, 4, true>(p); }

__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x128_fp, true, false, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x128_fp, true, true, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x128_fp, false, false, 3>(p); }
__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x128_fp, false, true, 2>(p); }

__global__ void PM_BOUNDS(kF32_64x128_fp) gemm_sm80_f32_64x128_fp_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fp, true, false, 2>(p); }
__global__ void PM_BOUNDS(kF32_64x128_fp) gemm_sm80_f32_64x128_fp_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fp, true, true, 2>(p); }
__global__ void PM_BOUNDS(kF32_64x128_fp) gemm_sm80_f32_64x128_fp_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fp, false, false, 3>(p); }
__global__ void PM_BOUNDS(kF32_64x128_fp) gemm_sm80_f32_64x128_fp_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fp, false, true, 2>(p); }

__global__ void PM_BOUNDS(kF32_64x128_sk) gemm_sm80_f32_64x128_sk_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sk, true, false, 2, true>(p); }
__global__ void PM_BOUNDS(kF32_64x128_sk) gemm_sm80_f32_64x128_sk_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sk, true, true, 2, true>(p); }
__global__ void PM_BOUNDS(kF32_64x128_sk) gemm_sm80_f32_64x128_sk_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sk, false, false, 3, true>(p); }
__global__ void PM_BOUNDS(kF32_64x128_sk) gemm_sm80_f32_64x128_sk_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sk, false, true, 2, true>(p); }

__global__ void PM_BOUNDS(kF32_128x64_fp) gemm_sm80_f32_128x64_fp_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fp, true, false, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x64_fp) gemm_sm80_f32_128x64_fp_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fp, true, true, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x64_fp) gemm_sm80_f32_128x64_fp_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fp, false, false, 3>(p); }
__global__ void PM_BOUNDS(kF32_128x64_fp) gemm_sm80_f32_128x64_fp_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fp, false, true, 2>(p); }

__global__ void PM_BOUNDS(kF32_128x64_sk) gemm_sm80_f32_128x64_sk_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sk, true, false, 2, true>(p); }
__global__ void PM_BOUNDS(kF32_128x64_sk) gemm_sm80_f32_128x64_sk_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sk, true, true, 2, true>(p); }
__global__ void PM_BOUNDS(kF32_128x64_sk) gemm_sm80_f32_128x64_sk_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sk, false, false, 3, true>(p); }
__global__ void PM_BOUNDS(kF32_128x64_sk) gemm_sm80_f32_128x64_sk_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sk, false, true, 2, true>(p); }

// Sliced k (gemm_tiles.h, kF32_64x128_sl): 64x128_fp's code in two groups of 4 warps over the two
// halves of each 32-deep slab.
__global__ void PM_BOUNDS(kF32_64x128_sl) gemm_sm80_f32_64x128_sl_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sl, true, false, 2>(p); }
__global__ void PM_BOUNDS(kF32_64x128_sl) gemm_sm80_f32_64x128_sl_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sl, true, true, 2>(p); }
__global__ void PM_BOUNDS(kF32_64x128_sl) gemm_sm80_f32_64x128_sl_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sl, false, false, 3>(p); }
__global__ void PM_BOUNDS(kF32_64x128_sl) gemm_sm80_f32_64x128_sl_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_sl, false, true, 2>(p); }

// 128x64_sl (gemm_tiles.h): the same sliced k on the 128x64 tile.
__global__ void PM_BOUNDS(kF32_128x64_sl) gemm_sm80_f32_128x64_sl_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sl, true, false, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x64_sl) gemm_sm80_f32_128x64_sl_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sl, true, true, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x64_sl) gemm_sm80_f32_128x64_sl_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sl, false, false, 3>(p); }
__global__ void PM_BOUNDS(kF32_128x64_sl) gemm_sm80_f32_128x64_sl_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_sl, false, true, 2>(p); }

__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64, false, true>(p); }

// Strided batches (gemm_batched.cuh): matrix blockIdx.y of the stack, or for _small a 1-D grid of
// matrices x 32x32 tiles.
__global__ void PM_BOUNDS(kF32_128x256_fpb) gemm_sm80_f32_128x256_fpb_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpb, true, false, 5>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x256_fpb) gemm_sm80_f32_128x256_fpb_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpb, true, true, 7>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x256_fpb) gemm_sm80_f32_128x256_fpb_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpb, false, false, 7>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x256_fpb) gemm_sm80_f32_128x256_fpb_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x256_fpb, false, true, 4>(batch_member<float>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF32_64x128_fpb) gemm_sm80_f32_64x128_fpb_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fpb, true, false, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x128_fpb) gemm_sm80_f32_64x128_fpb_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fpb, true, true, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x128_fpb) gemm_sm80_f32_64x128_fpb_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fpb, false, false, 3>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x128_fpb) gemm_sm80_f32_64x128_fpb_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_fpb, false, true, 2>(batch_member<float>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF32_128x64_fpb) gemm_sm80_f32_128x64_fpb_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fpb, true, false, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x64_fpb) gemm_sm80_f32_128x64_fpb_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fpb, true, true, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x64_fpb) gemm_sm80_f32_128x64_fpb_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fpb, false, false, 3>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x64_fpb) gemm_sm80_f32_128x64_fpb_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_fpb, false, true, 2>(batch_member<float>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF32_64x128_slb) gemm_sm80_f32_64x128_slb_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_slb, true, false, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x128_slb) gemm_sm80_f32_64x128_slb_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_slb, true, true, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x128_slb) gemm_sm80_f32_64x128_slb_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_slb, false, false, 3>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x128_slb) gemm_sm80_f32_64x128_slb_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_64x128_slb, false, true, 2>(batch_member<float>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF32_128x64_slb) gemm_sm80_f32_128x64_slb_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_slb, true, false, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x64_slb) gemm_sm80_f32_128x64_slb_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_slb, true, true, 2>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x64_slb) gemm_sm80_f32_128x64_slb_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_slb, false, false, 3>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_128x64_slb) gemm_sm80_f32_128x64_slb_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body_fp<float, tiles::kF32_128x64_slb, false, true, 2>(batch_member<float>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF32_64x64b) gemm_sm80_f32_64x64b_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64b, true, false>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x64b) gemm_sm80_f32_64x64b_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64b, true, true>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x64b) gemm_sm80_f32_64x64b_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64b, false, false>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x64b) gemm_sm80_f32_64x64b_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64b, false, true>(batch_member<float>(p, blockIdx.y)); }

// Split-K in one launch (sm_90 clusters: cluster_sum_store in gemm_common.cuh; traps elsewhere).
__global__ void PM_BOUNDS(kF32_64x64c) gemm_sm90_f32_64x64c_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64c, true, false>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x64c) gemm_sm90_f32_64x64c_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64c, true, true>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x64c) gemm_sm90_f32_64x64c_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64c, false, false>(batch_member<float>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF32_64x64c) gemm_sm90_f32_64x64c_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<float, tiles::kF32_64x64c, false, true>(batch_member<float>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF64_64x64b) gemm_sm80_f64_64x64b_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64b, true, false>(batch_member<double>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF64_64x64b) gemm_sm80_f64_64x64b_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64b, true, true>(batch_member<double>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF64_64x64b) gemm_sm80_f64_64x64b_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64b, false, false>(batch_member<double>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kF64_64x64b) gemm_sm80_f64_64x64b_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<double, tiles::kF64_64x64b, false, true>(batch_member<double>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kF32_small) gemm_sm80_f32_small_rr(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<float, true, false>(p); }
__global__ void PM_BOUNDS(kF32_small) gemm_sm80_f32_small_rc(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<float, true, true>(p); }
__global__ void PM_BOUNDS(kF32_small) gemm_sm80_f32_small_cr(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<float, false, false>(p); }
__global__ void PM_BOUNDS(kF32_small) gemm_sm80_f32_small_cc(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<float, false, true>(p); }

__global__ void PM_BOUNDS(kF64_small) gemm_sm80_f64_small_rr(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<double, true, false>(p); }
__global__ void PM_BOUNDS(kF64_small) gemm_sm80_f64_small_rc(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<double, true, true>(p); }
__global__ void PM_BOUNDS(kF64_small) gemm_sm80_f64_small_cr(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<double, false, false>(p); }
__global__ void PM_BOUNDS(kF64_small) gemm_sm80_f64_small_cc(GemmArgs p) { wait_for_prior_grid(); gemm_small_body<double, false, true>(p); }

// The integer dtypes (wrapping unsigned arithmetic; gemm_tiles.h), 2-D and batched.
__global__ void PM_BOUNDS(kU32_64x64) gemm_sm80_u32_64x64_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kU32_64x64) gemm_sm80_u32_64x64_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kU32_64x64) gemm_sm80_u32_64x64_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kU32_64x64) gemm_sm80_u32_64x64_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64, false, true>(p); }

__global__ void PM_BOUNDS(kU64_64x64) gemm_sm80_u64_64x64_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kU64_64x64) gemm_sm80_u64_64x64_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kU64_64x64) gemm_sm80_u64_64x64_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kU64_64x64) gemm_sm80_u64_64x64_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64, false, true>(p); }

__global__ void PM_BOUNDS(kU32_64x64b) gemm_sm80_u32_64x64b_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64b, true, false>(batch_member<unsigned>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kU32_64x64b) gemm_sm80_u32_64x64b_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64b, true, true>(batch_member<unsigned>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kU32_64x64b) gemm_sm80_u32_64x64b_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64b, false, false>(batch_member<unsigned>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kU32_64x64b) gemm_sm80_u32_64x64b_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned, tiles::kU32_64x64b, false, true>(batch_member<unsigned>(p, blockIdx.y)); }

__global__ void PM_BOUNDS(kU64_64x64b) gemm_sm80_u64_64x64b_rr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64b, true, false>(batch_member<unsigned long long>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kU64_64x64b) gemm_sm80_u64_64x64b_rc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64b, true, true>(batch_member<unsigned long long>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kU64_64x64b) gemm_sm80_u64_64x64b_cr(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64b, false, false>(batch_member<unsigned long long>(p, blockIdx.y)); }
__global__ void PM_BOUNDS(kU64_64x64b) gemm_sm80_u64_64x64b_cc(GemmArgs p) { wait_for_prior_grid(); gemm_body<unsigned long long, tiles::kU64_64x64b, false, true>(batch_member<unsigned long long>(p, blockIdx.y)); }

// split-K's sum as a launch of its own (256 threads a block)
__global__ void __launch_bounds__(kSplitSumThreads) split_sum_f32(SplitSumArgs p) { wait_for_prior_grid(); split_sum_body(p); }

// complex b as the real B'' (256 threads a block, one complex element each; matrix blockIdx.y)
__global__ void __launch_bounds__(256) complex_b_f32(ComplexBArgs p) { wait_for_prior_grid(); complex_b_body<float>(p); }
__global__ void __launch_bounds__(256) complex_b_f64(ComplexBArgs p) { wait_for_prior_grid(); complex_b_body<double>(p); }

// Thin products (gemm_thin.cuh), by the short side padded to 1, 2, 4, 8 or 16 (256 threads a block;
// two blocks an SM, at most 128 registers a thread), and the sum of their slices.
#define PM_THIN(kind, sc) \
  __global__ void __launch_bounds__(256, 2) thin_##kind##_f32_s##sc(ThinArgs p) { wait_for_prior_grid(); thin_##kind##_body<sc>(p); }
PM_THIN(dots, 1) PM_THIN(dots, 2) PM_THIN(dots, 4) PM_THIN(dots, 8) PM_THIN(dots, 16)
PM_THIN(axpy, 1) PM_THIN(axpy, 2) PM_THIN(axpy, 4) PM_THIN(axpy, 8) PM_THIN(axpy, 16)
#undef PM_THIN
// thin_dots with the block's warps splitting k (at most one warp's rows: a dot product, a few rows).
#define PM_THIN_WK(sc) \
  __global__ void __launch_bounds__(256, 2) thin_dots_wk_f32_s##sc(ThinArgs p) { wait_for_prior_grid(); thin_dots_body<sc, true>(p); }
PM_THIN_WK(1) PM_THIN_WK(2) PM_THIN_WK(4)
#undef PM_THIN_WK
__global__ void __launch_bounds__(kThinSumThreads) thin_sum_f32(ThinSumArgs p) { wait_for_prior_grid(); thin_sum_body(p); }

// Short inner dimension (gemm_short_k.cuh): 256 threads a block, 4 or 32 of them across 16 or 128
// columns of c, 4 (or 2: _r2) rows of c a thread.
__global__ void __launch_bounds__(256) short_k_f32_c4(ShortKArgs p) { wait_for_prior_grid(); short_k_body<4, 4>(p); }
__global__ void __launch_bounds__(256) short_k_f32_c32(ShortKArgs p) { wait_for_prior_grid(); short_k_body<32, 4>(p); }
__global__ void __launch_bounds__(256) short_k_f32_c32_r2(ShortKArgs p) { wait_for_prior_grid(); short_k_body<32, 2>(p); }

// The short operand resident in shared memory (gemm_resident.cuh): 256 threads a block, two blocks
// an SM (85-108 KB of dynamic shared memory each; one past k = 128 for 64 columns), a persistent
// grid over tiles of L (128 rows; 256 for at most 32 columns: _s32).
__global__ void __launch_bounds__(256, 2) resident_f32_lk(ResidentArgs p) { wait_for_prior_grid(); resident_body<true, 64>(p); }
__global__ void __launch_bounds__(256, 2) resident_f32_lr(ResidentArgs p) { wait_for_prior_grid(); resident_body<false, 64>(p); }
__global__ void __launch_bounds__(256, 2) resident_f32_lk_s32(ResidentArgs p) { wait_for_prior_grid(); resident_body<true, 32>(p); }
__global__ void __launch_bounds__(256, 2) resident_f32_lr_s32(ResidentArgs p) { wait_for_prior_grid(); resident_body<false, 32>(p); }

// Tensor cores (gemm_tc.cuh), float32 operands in the precision modes: tf32 (one TF32 product),
// f32x3 (float32_tc: the hi/lo split, three TF32 products), bf16 (operands rounded to bfloat16).
// 1-D swizzled grid of kTc tiles, blockIdx.y the matrix of a strided stack (1 for one product).
#define PM_TC(mode, name, lay, ak, bk)                                                        \
  __global__ void __launch_bounds__(tiles::kTc.threads(), tiles::kTc.min_blocks)             \
      gemm_tc_##name##_##lay(GemmArgs p) {                                                    \
    wait_for_prior_grid();                                                                    \
    gemm_tc_body<portmat::cuda::mode, ak, bk>(batch_member<float>(p, blockIdx.y));            \
  }
#define PM_TC_LAYOUTS(mode, name) \
  PM_TC(mode, name, rr, true, false) PM_TC(mode, name, rc, true, true) PM_TC(mode, name, cr, false, false) PM_TC(mode, name, cc, false, true)
PM_TC_LAYOUTS(TC_TF32, tf32)
PM_TC_LAYOUTS(TC_F32, f32x3)
PM_TC_LAYOUTS(TC_BF16, bf16)
#undef PM_TC_LAYOUTS
#undef PM_TC

// Hopper tensor cores (gemm_wgmma.cuh): the pre-pass that writes the operands' k-major rounded /
// split / bfloat16 copies, and the two main kernels (TF32: modes tf32 and float32_tc; bf16). The
// main kernels' argument block holds the TMA maps, read from parameter space (__grid_constant__).
// sm_90a only (a trapping stub elsewhere).
__global__ void __launch_bounds__(portmat::cuda::kWgPrepThreads) wg_prep(WgPrepArgs p) { wait_for_prior_grid(); wg_prep_body(p); }
__global__ void __launch_bounds__(tiles::WgTile::kThreads, 1) gemm_wgmma_tf32(const __grid_constant__ WgArgs p) {
  wait_for_prior_grid();
  gemm_wgmma_body<portmat::cuda::WG_TF32>(p);
}
__global__ void __launch_bounds__(tiles::WgTile::kThreads, 1) gemm_wgmma_bf16(const __grid_constant__ WgArgs p) {
  wait_for_prior_grid();
  gemm_wgmma_body<portmat::cuda::WG_BF16>(p);
}
// float32_tc with the tensor cores' sums promoted in registers (gemm_wgmma_f32tc.cuh): 128 x 128
// and 128 x 192 tiles (PORTMAT_CUDA_F32TC_KERNEL picks; the pre-pass's [lo, hi] split, kind 5).
__global__ void __launch_bounds__(tiles::WgTile::kThreads, 1) gemm_wgmma_f32tc_n128(const __grid_constant__ WgArgs p) {
  wait_for_prior_grid();
  gemm_wgmma_f32tc_body<128>(p);
}
__global__ void __launch_bounds__(tiles::WgTile::kThreads, 1) gemm_wgmma_f32tc_n192(const __grid_constant__ WgArgs p) {
  wait_for_prior_grid();
  gemm_wgmma_f32tc_body<192>(p);
}

// dtype casts (casts.cuh; 256 threads a block, grid-stride)
__global__ void __launch_bounds__(256) cast_elements(CastArgs p) { wait_for_prior_grid(); cast_body(p); }
}
