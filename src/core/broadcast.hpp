// Products with a broadcast operand: a view with a zero stride repeats one row or one column (or
// one value), as np.broadcast_to makes. Packing such a view would materialise every repeat (a
// (70000, 70000) view of one value is 19.6 GB of copies); instead the product is reduced to the
// distinct part and the result is spread:
//   - a's rows all equal (row stride 0):      c[0, :] = a[0, :] @ b, then copied to every row;
//   - b's columns all equal (column stride 0): c[:, 0] = a @ b[:, 0], then copied along each row;
//   - a constant along k (column stride 0):   c[i, j] = a[i, 0] * sum_k b[k, j];
//   - b constant along k (row stride 0):      c[i, j] = (sum_k a[i, k]) * b[0, j].
// The last two are a sum and a multiply on the host (in float64 for floats, wrapping for the
// uint32 / uint64 products of the integer types), with NaN and inf placed exactly where NumPy's
// sum of products places them (an infinite factor times a zero term is NaN).
#pragma once

#include <functional>

#include "portmat/portmat.hpp"

namespace portmat::core {

using Product = std::function<void(const MatrixView& a, const MatrixView& b, const MatrixView& c)>;

// For M, N, K > 0 and c row-major: computes c and returns true when a or b has a zero stride along
// a dimension of extent > 1, using `product` for the smaller product that remains (if any);
// returns false, touching nothing, otherwise.
bool multiply_broadcast(const MatrixView& a, const MatrixView& b, const MatrixView& c,
                        const Product& product);

}  // namespace portmat::core
