// np.matmul's shapes for N-d operands (portmat::matmul(ArrayView...)): vectors promoted to a row
// or a column, stacks of matrices whose leading axes broadcast, reduced to strided batches of 2-D
// products (batch.hpp). Broadcast axes keep stride 0, so a stack is never copied to its full
// size; adjacent batch axes whose strides line up for all three operands merge into one, so that
// a contiguous stack of any rank is a single batch (one launch on a GPU).
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/batch.hpp"
#include "core/process.hpp"

namespace portmat {

namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string ArrayView::shape_str() const { return shape_text(shape); }

std::vector<std::int64_t> matmul_shape(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  const std::string both = "a has shape " + shape_text(a) + ", b has shape " + shape_text(b);
  if (a.empty() || b.empty())
    throw std::invalid_argument("matmul: " + both + "; an operand must have at least 1 dimension "
                                "(multiply 0-d operands with *)");
  for (auto d : a)
    if (d < 0) throw std::invalid_argument("matmul: negative dimension: " + both);
  for (auto d : b)
    if (d < 0) throw std::invalid_argument("matmul: negative dimension: " + both);
  const std::int64_t ka = a.back(), kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (ka != kb)
    throw std::invalid_argument("matmul: inner dimensions differ: " + both + " (" + std::to_string(ka) +
                                " != " + std::to_string(kb) + ")");
  const std::size_t na = a.size() > 2 ? a.size() - 2 : 0, nb = b.size() > 2 ? b.size() - 2 : 0;
  const std::size_t n = std::max(na, nb);
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {  // right-aligned, as NumPy broadcasts
    const std::int64_t x = i + na >= n ? a[i + na - n] : 1, y = i + nb >= n ? b[i + nb - n] : 1;
    if (x != y && x != 1 && y != 1)
      throw std::invalid_argument("matmul: the stacks do not broadcast: " + both + " (" +
                                  std::to_string(x) + " against " + std::to_string(y) + ")");
    out[i] = x == 1 ? y : x;
  }
  if (a.size() > 1) out.push_back(a[a.size() - 2]);
  if (b.size() > 1) out.push_back(b.back());
  return out;
}

namespace core {

bool for_each_batch(const ArrayView& a, const ArrayView& b, const ArrayView& out,
                    const std::function<void(const Batch&)>& fn) {
  for (auto [v, name] : {std::pair{&a, "a"}, {&b, "b"}, {&out, "out"}})
    if (v->strides.size() != v->shape.size())
      throw std::invalid_argument(std::string("matmul: ") + name + " has " + std::to_string(v->shape.size()) +
                                  " dimensions but " + std::to_string(v->strides.size()) + " strides");
  const std::vector<std::int64_t> want = matmul_shape(a.shape, b.shape);
  if (out.shape != want)
    throw std::invalid_argument("matmul: out has shape " + out.shape_str() + ", expected " + shape_text(want) +
                                " for a of shape " + a.shape_str() + " and b of shape " + b.shape_str());
  if (a.dtype != b.dtype || a.dtype != out.dtype)
    throw std::invalid_argument(std::string("matmul: dtypes differ: a is ") + dtype_name(a.dtype) + ", b is " +
                                dtype_name(b.dtype) + ", out is " + dtype_name(out.dtype));

  std::int64_t elements = 1;
  for (auto d : out.shape) elements *= d;
  if (elements == 0) return false;  // nothing to compute (and NumPy gives empty arrays zero strides)

  // The matrices: a 1-D a is one row (stride 0 across its single row), a 1-D b one column; out
  // lacks the axes they lack.
  const std::size_t ra = a.shape.size(), rb = b.shape.size(), ro = out.shape.size();
  MatrixView ma{a.data, 1, a.shape[ra - 1], 0, a.strides[ra - 1], a.dtype};
  if (ra > 1) ma.rows = a.shape[ra - 2], ma.row_stride = a.strides[ra - 2];
  MatrixView mb{b.data, b.shape[rb == 1 ? 0 : rb - 2], 1, b.strides[rb == 1 ? 0 : rb - 2], 0, b.dtype};
  if (rb > 1) mb.cols = b.shape[rb - 1], mb.col_stride = b.strides[rb - 1];
  MatrixView mc{out.data, ma.rows, mb.cols, 0, 0, out.dtype};
  std::size_t core_axes = 0;
  if (rb > 1) mc.col_stride = out.strides[ro - 1], ++core_axes;
  if (ra > 1) mc.row_stride = out.strides[ro - 1 - core_axes], ++core_axes;
  if (mc.cols == 1) mc.col_stride = 1;  // one column: its stride means nothing
  if (mc.rows == 1) mc.row_stride = mc.cols;
  check_views(ma, mb, mc);

  // Batch axes (out's leading ones), each with the three operands' strides (0 where broadcast).
  struct Axis {
    std::int64_t size, sa, sb, sc;
  };
  const std::size_t nbatch = ro - core_axes;
  const std::size_t na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0;
  std::vector<Axis> axes;
  for (std::size_t i = 0; i < nbatch; ++i) {
    Axis x{out.shape[i], 0, 0, out.strides[i]};
    if (i + na >= nbatch && a.shape[i + na - nbatch] != 1) x.sa = a.strides[i + na - nbatch];
    if (i + nb >= nbatch && b.shape[i + nb - nbatch] != 1) x.sb = b.strides[i + nb - nbatch];
    if (x.size == 1) continue;
    // Merges with the previous axis when one step of the previous one is `size` steps of this
    // one for all three operands: the two are then one axis.
    if (!axes.empty()) {
      Axis& p = axes.back();
      if (p.sa == x.sa * x.size && p.sb == x.sb * x.size && p.sc == x.sc * x.size) {
        p.size *= x.size, p.sa = x.sa, p.sb = x.sb, p.sc = x.sc;
        continue;
      }
    }
    axes.push_back(x);
  }

  if (axes.empty()) {
    fn({ma, mb, mc});
    return true;
  }
  // The innermost axis is the batch; the outer ones are walked one index at a time.
  const Axis inner = axes.back();
  axes.pop_back();
  std::vector<std::int64_t> index(axes.size(), 0);
  for (;;) {
    std::int64_t oa = 0, ob = 0, oc = 0;
    for (std::size_t i = 0; i < axes.size(); ++i)
      oa += index[i] * axes[i].sa, ob += index[i] * axes[i].sb, oc += index[i] * axes[i].sc;
    fn({nth(ma, 1, oa), nth(mb, 1, ob), nth(mc, 1, oc), inner.size, inner.sa, inner.sb, inner.sc});
    std::size_t d = axes.size();
    while (d > 0 && ++index[d - 1] == axes[d - 1].size) index[--d] = 0;
    if (d == 0) break;
  }
  return true;
}

}  // namespace core

void matmul(const ArrayView& a, const ArrayView& b, const ArrayView& out, const std::string& device,
            std::optional<Precision> precision) {
  core::with_enough_stack([&] {
    const core::PrecisionScope scope(precision);
    const bool any = core::for_each_batch(a, b, out, [&](const core::Batch& p) { core::multiply_batch(p, device); });
    if (!any) {  // the device is still resolved: bad specs raise
      MatrixView none{out.data, 0, 0, 0, 0, out.dtype};
      core::multiply_batch({none, none, none, 0}, device);
    }
  });
}

void matmul(const ArrayView& a, const ArrayView& b, const ArrayView& out, const std::vector<std::string>& devices,
            std::optional<Precision> precision) {
  matmul(a, b, out, core::device_list_spec(devices), precision);
}

}  // namespace portmat
