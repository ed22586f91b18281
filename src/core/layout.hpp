// Classifying strided views: which ones a kernel can read in place (row-major or column-major with
// a leading dimension), and packing the rest (negative, zero or doubly non-unit strides) into a
// contiguous row-major copy.
#pragma once

#include <optional>
#include <vector>

#include "core/backend.hpp"

namespace portmat::core {

// The view as a dense matrix if a kernel can read it where it is, else nothing.
std::optional<HostMatrix> dense_in_place(const MatrixView& v);

// dense_in_place(v), or else a row-major copy of v made in `storage`.
HostMatrix as_dense(const MatrixView& v, std::vector<unsigned char>& storage);

// A row-major copy of v without gaps, made in `storage`.
HostMatrix packed(const MatrixView& v, std::vector<unsigned char>& storage);

// The strided view of a dense matrix.
MatrixView view_of(const HostMatrix& m);

// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of x, read in place (out-of-core blocks, a
// device list's blocks).
HostMatrix block_of(const HostMatrix& x, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t cols);
MatrixView block_of(const MatrixView& x, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t cols);

// Matrix i of a stack of dense matrices `step` elements apart (batch.hpp has the MatrixView one).
HostMatrix nth(const HostMatrix& x, std::int64_t step, std::int64_t i);

// True when m's memory, from its first element to its last, is more than twice its elements (a
// few rows of a huge array, say): a device that would map the whole range should copy it instead.
bool is_sparse(const HostMatrix& m);

}  // namespace portmat::core
