// A strided batch of 2-D products, c[i] = a[i] @ b[i] for i < count: what both public matmul
// overloads become (a 2-D product is a batch of one), and what backends run.
//
// Also the dtype routes: every dtype reaches one of the four the kernels compute (float32,
// float64, and the wrap-around uint32 / uint64 products that serve every integer type), by
// conversion where needed (dtypes.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::core {

struct Batch {
  MatrixView a, b, c;  // matrix 0 of each; one dtype
  std::int64_t count = 1;
  // Elements from one matrix to the next; 0: the same matrix for every i (a broadcast stack).
  std::int64_t a_step = 0, b_step = 0, c_step = 0;
};

// Matrix i of a stack whose matrix 0 is v.
MatrixView nth(const MatrixView& v, std::int64_t step, std::int64_t i);

// Throws std::invalid_argument unless c = a @ b is a product of consistent shapes and one dtype,
// with c row-major (unit column stride) and every matrix aligned to its element size.
void check_views(const MatrixView& a, const MatrixView& b, const MatrixView& c);

// np.matmul's shapes (portmat::matmul(ArrayView...)) as strided batches: checks the three views
// (shapes, one dtype, out row-major) and calls fn for each batch, in order; false, without a call,
// when out is empty. arrays.cpp.
bool for_each_batch(const ArrayView& a, const ArrayView& b, const ArrayView& out,
                    const std::function<void(const Batch&)>& fn);

// c[i] = a[i] @ b[i] on the device `device` names (matmul.cpp). Arguments already checked.
void multiply_batch(const Batch& p, const std::string& device);

// ---- dtypes (dtypes.cpp) ----------------------------------------------------------------------
bool is_integer(DType t);  // boolean and every integer type
bool is_signed(DType t);

// The distinct matrices of a stack operand (one when step is 0, else `count`) converted to
// `to`, contiguous, in storage: the new view of matrix 0 and its step. Row-major, or with
// keep_column_major column-major where v is (its elements closer together down a column): then
// the copy is a straight pass over each, where a transposing copy costs a matrix-vector product's
// whole time (an int8 (2048) @ (2048 x 2048, Fortran order) product: ~5 of its 6.8 ms).
struct Converted {
  std::shared_ptr<unsigned char> storage;  // uninitialised: every byte is written once
  MatrixView view;
  std::int64_t step = 0;
};
Converted convert_stack(const MatrixView& v, std::int64_t step, std::int64_t count, DType to,
                        bool keep_column_major = false);

// Uninitialised room for `elements` of `t` (its storage only).
Converted result_buffer(std::int64_t elements, DType t);

// Writes the contiguous row-major results `src` (count matrices of `from`, c's shape) into the
// stack c of c.dtype, converting: float32 -> float16, uint32 -> any narrower integer or boolean
// (the low bits; boolean: nonzero), float64 holding exact integers -> any integer type (wrapped).
void store_stack(const void* src, DType from, const MatrixView& c, std::int64_t c_step, std::int64_t count);

// Largest |x| over the distinct matrices of a stack of integers (0 for others).
double max_abs(const MatrixView& v, std::int64_t step, std::int64_t count);

// Complex products as one real product: a (M x K) and c (M x N), complex, are read as real
// (M x 2K) and (M x 2N) matrices of interleaved parts where they are; b is rewritten as the real
// (2K x 2N) matrix B'' with B''[2k][2n] = B''[2k+1][2n+1] = re b[k][n], B''[2k][2n+1] = im b[k][n]
// and B''[2k+1][2n] = -im b[k][n], so that [re c, im c] interleaved = [re a, im a] interleaved @ B''.
// Every entry is then the sum of NumPy's four real products per term: the same accuracy.
Converted complex_b(const MatrixView& b, std::int64_t step, std::int64_t count);

// Complex products with few rows (matmul.cpp, complex_few_rows): a's parts stacked as the real
// (2M x K) matrix A' = [re a; im a] (rows 0..M-1 the real parts, M..2M-1 the imaginary ones), for
// the real product R = A' @ b_real with b read as the real (K x 2N) matrix of its interleaved parts.
Converted complex_parts_a(const MatrixView& a, std::int64_t step, std::int64_t count);
// ... and c from R (count contiguous real (2M x 2N) matrices, c's M rows):
// re c[i][n] = R[i][2n] - R[M+i][2n+1], im c[i][n] = R[i][2n+1] + R[M+i][2n].
void store_complex_rows(const void* r, const MatrixView& c, std::int64_t c_step, std::int64_t count);

}  // namespace portmat::core
