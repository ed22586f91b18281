// Arrays that stay on a device (issue 17): portmat::DeviceArray, C-contiguous arrays in one
// device's buffer whose products chain there, and matmul_on_stream, products of memory another
// library owns on a CUDA GPU (CuPy arrays, torch tensors), queued on that library's stream.
//
// Both reuse np.matmul's reduction of N-d operands to strided batches (arrays.cpp,
// for_each_batch). A DeviceArray's views carry byte offsets into its buffer where host views carry
// addresses (`data` = offset), so the same reduction serves; a foreign array's views carry its
// device addresses. The backends do the rest: Device::gemm_batch (waited for) and
// Device::gemm_on_stream (queued only).
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/batch.hpp"
#include "core/casts.hpp"
#include "core/layout.hpp"
#include "core/process.hpp"

namespace portmat {

struct DeviceArray::State {
  std::shared_ptr<core::Device> device;
  std::unique_ptr<core::Buffer> buffer;
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
  std::int64_t size = 0;
  std::uint32_t generation = 0;  // core::fork_generation() at allocation

  ~State() {
    // In a process forked after this memory was allocated, a GPU driver cannot free it (its
    // threads are gone; the call could hang): the child only forgets it.
    if (buffer && generation != core::fork_generation() && device->info().backend != "cpu") (void)buffer.release();
  }
};

namespace {

// The integers' products run as the unsigned ones of their width (the same bits, wrapping).
DType computed_as(DType t) {
  switch (t) {
    case DType::i32: return DType::u32;
    case DType::i64: return DType::u64;
    default: return t;
  }
}

bool is_complex(DType t) { return t == DType::c64 || t == DType::c128; }

// Every dtype is held where the device computes the dtype its products run in (casts.hpp,
// compute_dtype): float64 and complex128 need a device with float64; the integers need integer
// kernels (every backend has them).
void check_array_dtype(core::Device& dev, DType t) {
  const DType c = computed_as(core::compute_dtype(t));
  const DType real = c == DType::c64 ? DType::f32 : c == DType::c128 ? DType::f64 : c;
  if (!dev.computes(real))
    throw std::invalid_argument(std::string("portmat arrays on ") + dev.info().id() + " (" + dev.info().name +
                                ") cannot hold " + dtype_name(t) + ": the device has no " + dtype_name(real) +
                                " products" + (real == DType::f64 ? " (no float64 support)" : "") +
                                "; convert with astype() first");
}

// Elements of an array of this shape; throws std::invalid_argument for a negative dimension, and
// OutOfDeviceMemory for one whose bytes (of elem_bytes each) overflow 63 bits: no device has them.
std::int64_t elements_of(const std::vector<std::int64_t>& shape, std::size_t elem_bytes = 1) {
  std::int64_t n = 1;
  bool overflow = false;
  for (auto d : shape) {
    if (d < 0) throw std::invalid_argument("portmat array: negative dimension");
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  std::int64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(n, static_cast<std::int64_t>(elem_bytes), &bytes))
    throw OutOfDeviceMemory("portmat array: an array of shape " + ArrayView{nullptr, DType::f32, shape, {}}.shape_str() +
                            " would need more than 2**63 bytes");
  return n;
}

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= std::max<std::int64_t>(shape[i], 1);
  }
  return s;
}

// Copies between a strided host view and contiguous memory, in C order; to_view: into the view.
void copy_strided(const ArrayView& v, unsigned char* dense, bool to_view) {
  const std::size_t es = dtype_size(v.dtype);
  const std::size_t nd = v.shape.size();
  if (elements_of(v.shape) == 0) return;
  if (nd == 0) {
    to_view ? std::memcpy(v.data, dense, es) : std::memcpy(dense, v.data, es);
    return;
  }
  std::vector<std::int64_t> index(nd, 0);
  const std::int64_t inner = v.shape[nd - 1], inner_stride = v.strides[nd - 1];
  for (;;) {
    std::int64_t off = 0;
    for (std::size_t i = 0; i + 1 < nd; ++i) off += index[i] * v.strides[i];
    auto* row = static_cast<unsigned char*>(v.data) + off * static_cast<std::int64_t>(es);
    if (inner_stride == 1) {
      to_view ? std::memcpy(row, dense, inner * es) : std::memcpy(dense, row, inner * es);
    } else {
      for (std::int64_t j = 0; j < inner; ++j) {
        unsigned char* e = row + j * inner_stride * static_cast<std::int64_t>(es);
        to_view ? std::memcpy(e, dense + j * es, es) : std::memcpy(dense + j * es, e, es);
      }
    }
    dense += inner * es;
    std::size_t d = nd - 1;
    while (d > 0 && ++index[d - 1] == v.shape[d - 1]) index[--d] = 0;
    if (d == 0) break;
  }
}

bool is_contiguous(const ArrayView& v) {
  const auto want = contiguous_strides(v.shape);
  for (std::size_t i = 0; i < v.shape.size(); ++i)
    if (v.shape[i] > 1 && v.strides[i] != want[i]) return false;
  return true;
}

// A DeviceArray's view for for_each_batch: byte offsets from its buffer's start in `data`.
ArrayView offset_view(const DeviceArray& x) {
  return ArrayView{nullptr, x.dtype(), x.shape(), contiguous_strides(x.shape())};
}

// A batch's matrix (data: a byte offset, or an address) as a kernel-readable dense matrix.
template <class Storage>
core::DenseMatrix<Storage> dense(const MatrixView& v, Storage storage, DType as) {
  const auto m = core::dense_in_place(v);
  if (!m) throw std::logic_error("matmul: a device array's matrix is not dense");  // contiguous by construction
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(m->data);
  core::DenseMatrix<Storage> d;
  d.rows = m->rows, d.cols = m->cols, d.ld = m->ld, d.col_major = m->col_major, d.dtype = as;
  if (is_complex(as) && m->col_major) {  // a C-contiguous matrix read row-major: what complex kernels take
    d.col_major = false;
    d.ld = m->rows > 1 ? v.row_stride : std::max<std::int64_t>(m->cols, 1);
  }
  if constexpr (std::is_pointer_v<Storage>) {  // a buffer, and the byte offset `data` holds
    d.data = storage, d.offset = at / dtype_size(v.dtype);
  } else {  // the address itself
    d.data = at, d.offset = 0;
  }
  return d;
}

// One b for every matrix of a, with a's and c's matrices row after row: one product of count * M
// rows (as the host path does: the common x @ W of a batch).
core::Batch merged(const core::Batch& p) {
  const std::int64_t M = p.a.rows, K = p.a.cols;
  const bool a_rows = p.a.col_stride == 1 && p.a.row_stride >= K && p.a_step == M * p.a.row_stride;
  if (p.count > 1 && p.b_step == 0 && a_rows && p.c_step == M * p.c.row_stride) {
    core::Batch q = p;
    q.a.rows = q.c.rows = M * p.count;
    q.count = 1;
    return q;
  }
  return p;
}

}  // namespace

DeviceArray DeviceArray::empty(const std::string& device, DType dtype, const std::vector<std::int64_t>& shape) {
  return core::with_enough_stack([&] {
    auto s = std::make_shared<State>();
    s->device = core::open_device(device);
    check_array_dtype(*s->device, dtype);
    s->shape = shape, s->dtype = dtype, s->size = elements_of(shape, dtype_size(dtype));
    s->generation = core::fork_generation();
    s->buffer = s->device->alloc(std::max<std::size_t>(static_cast<std::size_t>(s->size) * dtype_size(dtype), 1));
    return DeviceArray(std::move(s));
  });
}

DeviceArray DeviceArray::from_host(const ArrayView& host, const std::string& device) {
  if (host.strides.size() != host.shape.size())
    throw std::invalid_argument("portmat array: the host view has " + std::to_string(host.shape.size()) +
                                " dimensions but " + std::to_string(host.strides.size()) + " strides");
  DeviceArray x = empty(device, host.dtype, host.shape);
  const std::size_t bytes = static_cast<std::size_t>(x.size()) * dtype_size(host.dtype);
  if (bytes == 0) return x;
  core::with_enough_stack([&] {
    if (is_contiguous(host)) return x.state_->device->upload(*x.state_->buffer, host.data, bytes);
    std::vector<unsigned char> dense(bytes);
    copy_strided(host, dense.data(), false);
    x.state_->device->upload(*x.state_->buffer, dense.data(), bytes);
  });
  return x;
}

void DeviceArray::to_host(const ArrayView& dst) const {
  if (!state_) throw std::invalid_argument("portmat array: empty handle");
  if (dst.shape != state_->shape || dst.dtype != state_->dtype || dst.strides.size() != dst.shape.size())
    throw std::invalid_argument("portmat array: copying a " + std::string(dtype_name(state_->dtype)) + " array of shape " +
                                ArrayView{nullptr, state_->dtype, state_->shape, {}}.shape_str() + " into a " +
                                dtype_name(dst.dtype) + " host array of shape " + dst.shape_str());
  const std::size_t bytes = static_cast<std::size_t>(state_->size) * dtype_size(state_->dtype);
  if (bytes == 0) return;
  core::with_enough_stack([&] {
    auto dev = core::open_device(state_->device->info().id());  // raises in a forked child
    if (is_contiguous(dst)) return dev->download(dst.data, *state_->buffer, bytes);
    std::vector<unsigned char> dense(bytes);
    dev->download(dense.data(), *state_->buffer, bytes);
    copy_strided(dst, dense.data(), true);
  });
}

const std::vector<std::int64_t>& DeviceArray::shape() const {
  if (!state_) throw std::invalid_argument("portmat array: empty handle");
  return state_->shape;
}
DType DeviceArray::dtype() const {
  if (!state_) throw std::invalid_argument("portmat array: empty handle");
  return state_->dtype;
}
const DeviceInfo& DeviceArray::device() const {
  if (!state_) throw std::invalid_argument("portmat array: empty handle");
  return state_->device->info();
}
std::int64_t DeviceArray::size() const { return state_ ? state_->size : 0; }
std::uintptr_t DeviceArray::address() const {
  return state_ ? state_->device->address_of(*state_->buffer) : 0;
}

DeviceArray DeviceArray::astype(DType t) const {
  if (!state_) throw std::invalid_argument("portmat array: empty handle");
  if (t == state_->dtype) return *this;
  DeviceArray y = empty(state_->device->info().id(), t, state_->shape);
  if (state_->size)
    core::with_enough_stack([&] {
      auto dev = core::open_device(state_->device->info().id());  // raises in a forked child
      dev->cast(*state_->buffer, state_->dtype, *y.state_->buffer, t, state_->size);
    });
  return y;
}

namespace {

// out = a @ b, all three of one dtype that the device computes (computed_as / complex).
void multiply_same(core::Device& dev, const DeviceArray& a, const DeviceArray& b, const DeviceArray& out) {
  const DType as = computed_as(a.dtype());
  const core::Buffer* ab = a.state()->buffer.get();
  const core::Buffer* bb = b.state()->buffer.get();
  const core::Buffer* cb = out.state()->buffer.get();
  bool zeroed = false;
  core::for_each_batch(offset_view(a), offset_view(b), offset_view(out), [&](const core::Batch& p0) {
    const core::Batch p = is_complex(as) ? p0 : merged(p0);
    if (p.a.cols == 0) {  // the empty sum: zeros, all of out at once (it is contiguous)
      if (std::exchange(zeroed, true)) return;
      const std::size_t es = dtype_size(p.c.dtype);
      const std::vector<unsigned char> zeros(static_cast<std::size_t>(out.size()) * es, 0);
      dev.upload(*out.state()->buffer, zeros.data(), zeros.size());
      return;
    }
    dev.gemm_batch(dense<const core::Buffer*>(p.a, ab, as), p.a_step, dense<const core::Buffer*>(p.b, bb, as),
                   p.b_step, dense<const core::Buffer*>(p.c, cb, as), p.c_step, p.count);
  });
}

ArrayView host_view_of(const DeviceArray& x) {
  return ArrayView{reinterpret_cast<void*>(x.address()), x.dtype(), x.shape(), contiguous_strides(x.shape())};
}

}  // namespace

void matmul(const DeviceArray& a, const DeviceArray& b, const DeviceArray& out, std::optional<Precision> precision) {
  for (auto [x, name] : {std::pair{&a, "a"}, {&b, "b"}, {&out, "out"}})
    if (!x->valid()) throw std::invalid_argument(std::string("matmul: ") + name + " is an empty DeviceArray handle");
  const std::string id = a.device().id();
  if (b.device().id() != id || out.device().id() != id)
    throw std::invalid_argument("matmul: the arrays are on different devices: a on " + id + ", b on " +
                                b.device().id() + ", out on " + out.device().id() + "; copy one across first");
  if (out.state() == a.state() || out.state() == b.state())
    throw std::invalid_argument(std::string("matmul: out is the same array as ") + (out.state() == a.state() ? "a" : "b") +
                                "; the product needs memory of its own");
  const std::vector<std::int64_t> shape = matmul_shape(a.shape(), b.shape());
  if (out.shape() != shape)
    throw std::invalid_argument("matmul: out has shape " + ArrayView{nullptr, out.dtype(), out.shape(), {}}.shape_str() +
                                ", expected " + ArrayView{nullptr, out.dtype(), shape, {}}.shape_str());
  core::with_enough_stack([&] {
    const core::PrecisionScope scope(precision);
    auto dev = core::open_device(id);  // raises in a child forked after the driver started
    const DType r = out.dtype(), c = core::compute_dtype(r);
    check_array_dtype(*dev, r);
    core::require_precision(*dev, r);
    if (dev->info().backend == "cpu") {
      // Host memory: the host path, which brings every dtype to one the CPU kernels compute in
      // plain C++ (dtypes.cpp); operands of another dtype are cast to out's first (casts.cpp).
      const DeviceArray ar = a.astype(r), br = b.astype(r);
      if (out.size())
        portmat::matmul(host_view_of(ar), host_view_of(br), host_view_of(out), id, core::current_precision());
      return;
    }
    // A device: the operands cast to out's dtype (as the CPU path above does, and NumPy's dtype=:
    // an int8 operand of a bool product is != 0 before the product, a float32 one of a float16
    // product rounded to float16), then to the compute dtype there, the product in it, then one
    // cast (float32 -> float16 / bfloat16: one rounding; int32 -> narrow integers: the low bits;
    // int32 -> bool: != 0) into out. astype is free where the dtype already is the one asked.
    const DeviceArray ac = a.astype(r).astype(c), bc = b.astype(r).astype(c);
    const DeviceArray oc = r == c ? out : DeviceArray::empty(id, c, shape);
    multiply_same(*dev, ac, bc, oc);
    if (r != c && out.size()) dev->cast(*oc.state()->buffer, c, *out.state()->buffer, r, out.size());
  });
}

DeviceArray matmul(const DeviceArray& a, const DeviceArray& b, std::optional<Precision> precision) {
  if (!a.valid() || !b.valid()) throw std::invalid_argument("matmul: an operand is an empty DeviceArray handle");
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string("matmul: a is ") + dtype_name(a.dtype()) + " and b " + dtype_name(b.dtype()) +
                                "; pass out of the result's dtype (NumPy's np.result_type) to multiply mixed dtypes");
  DeviceArray out = DeviceArray::empty(a.device().id(), a.dtype(), matmul_shape(a.shape(), b.shape()));
  matmul(a, b, out, precision);
  return out;
}

void cast_on_stream(std::uintptr_t src, DType from, std::uintptr_t dst, DType to, std::int64_t count,
                    const std::string& device, std::uintptr_t stream) {
  if (count < 0) throw std::invalid_argument("cast_on_stream: negative count");
  if (count == 0) return;
  core::with_enough_stack([&] { core::open_device(device)->cast_on_stream(src, from, dst, to, count, stream); });
}

std::size_t workspace_bytes(const ArrayView& /*a*/, const ArrayView& b) {
  if (b.dtype != DType::c64 && b.dtype != DType::c128) return 0;
  std::int64_t n = 1;
  for (auto d : b.shape) n *= std::max<std::int64_t>(d, 0);
  return static_cast<std::size_t>(n) * 2 * dtype_size(b.dtype);  // B'': 4 K N reals per K x N matrix
}

void matmul_on_stream(const ArrayView& a, const ArrayView& b, const ArrayView& out, const std::string& device,
                      std::uintptr_t stream, std::uintptr_t workspace, std::optional<Precision> precision) {
  const DType t = a.dtype;
  const bool complex = t == DType::c64 || t == DType::c128;
  const DType as = computed_as(t);
  if (as != DType::f32 && as != DType::f64 && as != DType::u32 && as != DType::u64 && !complex)
    throw std::invalid_argument(std::string("matmul: device arrays of ") + dtype_name(t) +
                                " are multiplied through a wider type by the caller (float16 and bfloat16 in "
                                "float32, bool and 8/16-bit integers in int32); this call takes float32, "
                                "float64, complex64, complex128 and 32/64-bit integers");
  if (complex && workspace == 0 && workspace_bytes(a, b) > 0)
    throw std::invalid_argument("matmul: complex device arrays need a workspace of workspace_bytes(a, b) bytes");
  core::with_enough_stack([&] {
    const core::PrecisionScope scope(precision);
    auto dev = core::open_device(device);
    core::require_precision(*dev, t);
    const bool any = core::for_each_batch(a, b, out, [&](const core::Batch& p0) {
      const core::Batch p = complex ? p0 : merged(p0);
      for (auto [v, name] : {std::pair{&p.a, "a"}, {&p.b, "b"}})
        if (!core::dense_in_place(*v))
          throw std::invalid_argument(std::string("matmul: ") + name + "'s matrices are neither row- nor "
                                      "column-major (strides " + std::to_string(v->row_stride) + ", " +
                                      std::to_string(v->col_stride) + "); make it contiguous first");
      if (complex && p.a.cols > 1 && p.a.col_stride != 1)
        throw std::invalid_argument("matmul: a complex a must be row-major on a device; make it contiguous first");
      dev->gemm_on_stream(dense<std::uintptr_t>(p.a, 0, as), p.a_step, dense<std::uintptr_t>(p.b, 0, as),
                          p.b_step, dense<std::uintptr_t>(p.c, 0, as), p.c_step, p.count, stream, workspace);
    });
    if (!any)  // nothing to compute, but a device that takes no foreign memory still says so
      dev->gemm_on_stream({}, 0, {}, 0, {}, 0, 0, stream, workspace);
  });
}

}  // namespace portmat
