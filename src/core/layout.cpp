// See layout.hpp. A dimension of extent 0 or 1 has no meaningful stride, so it never forces a copy.
#include "core/layout.hpp"

#include <cstring>

namespace portmat::core {

std::optional<HostMatrix> dense_in_place(const MatrixView& v) {
  // Row-major: unit column steps, and rows at least a full row apart (ld >= cols).
  const bool row_major = (v.cols <= 1 || v.col_stride == 1) && (v.rows <= 1 || v.row_stride >= v.cols);
  // Column-major (a transposed view): unit row steps, columns at least a full column apart.
  const bool col_major = (v.rows <= 1 || v.row_stride == 1) && (v.cols <= 1 || v.col_stride >= v.rows);
  HostMatrix m;
  m.data = v.data;
  m.rows = v.rows;
  m.cols = v.cols;
  m.dtype = v.dtype;
  if (row_major) {
    m.ld = v.rows <= 1 ? std::max<std::int64_t>(v.cols, 1) : v.row_stride;
    m.col_major = false;
    return m;
  }
  if (col_major) {
    m.ld = v.cols <= 1 ? std::max<std::int64_t>(v.rows, 1) : v.col_stride;
    m.col_major = true;
    return m;
  }
  return std::nullopt;
}

HostMatrix as_dense(const MatrixView& v, std::vector<unsigned char>& storage) {
  if (auto m = dense_in_place(v)) return *m;
  return packed(v, storage);
}

HostMatrix packed(const MatrixView& v, std::vector<unsigned char>& storage) {
  const std::size_t es = dtype_size(v.dtype);
  storage.resize(static_cast<std::size_t>(v.rows * v.cols) * es);
  const auto* src = static_cast<const unsigned char*>(v.data);
  unsigned char* dst = storage.data();
  for (std::int64_t i = 0; i < v.rows; ++i) {
    const unsigned char* row = src + i * v.row_stride * static_cast<std::int64_t>(es);
    if (v.col_stride == 1) {  // whole rows at a time
      std::memcpy(dst, row, v.cols * es);
      dst += v.cols * es;
      continue;
    }
    for (std::int64_t j = 0; j < v.cols; ++j, dst += es)
      std::memcpy(dst, row + j * v.col_stride * static_cast<std::int64_t>(es), es);
  }
  HostMatrix m;
  m.data = storage.data();
  m.rows = v.rows;
  m.cols = v.cols;
  m.ld = v.cols;
  m.col_major = false;
  m.dtype = v.dtype;
  return m;
}

MatrixView view_of(const HostMatrix& m) {
  const std::size_t es = dtype_size(m.dtype);
  MatrixView v;
  v.data = const_cast<unsigned char*>(static_cast<const unsigned char*>(m.data) + m.offset * es);
  v.rows = m.rows;
  v.cols = m.cols;
  v.row_stride = m.col_major ? 1 : m.ld;
  v.col_stride = m.col_major ? m.ld : 1;
  v.dtype = m.dtype;
  return v;
}

HostMatrix block_of(const HostMatrix& x, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t cols) {
  HostMatrix s = x;
  const std::int64_t at = x.col_major ? c0 * x.ld + r0 : r0 * x.ld + c0;
  s.data = static_cast<const unsigned char*>(x.data) +
           (static_cast<std::int64_t>(x.offset) + at) * static_cast<std::int64_t>(dtype_size(x.dtype));
  s.offset = 0, s.rows = rows, s.cols = cols;
  return s;
}

HostMatrix nth(const HostMatrix& x, std::int64_t step, std::int64_t i) {
  HostMatrix m = x;
  m.data = static_cast<const unsigned char*>(x.data) + i * step * static_cast<std::int64_t>(dtype_size(x.dtype));
  return m;
}

MatrixView block_of(const MatrixView& x, std::int64_t r0, std::int64_t rows, std::int64_t c0, std::int64_t cols) {
  MatrixView s = x;
  s.data = static_cast<unsigned char*>(x.data) +
           (r0 * x.row_stride + c0 * x.col_stride) * static_cast<std::int64_t>(dtype_size(x.dtype));
  s.rows = rows, s.cols = cols;
  return s;
}

bool is_sparse(const HostMatrix& m) {
  return m.span() > 2 * static_cast<std::size_t>(m.rows * m.cols) + 4096;
}

}  // namespace portmat::core
