// portmat._ext: the nanobind binding of the core library. Kept thin: the Python package
// (python/portmat/__init__.py) owns NumPy semantics (dtype promotion, array-likes, output
// allocation); this file turns NumPy arrays into strided views, releases the GIL around device
// work (without_gil, safe at interpreter exit), and maps portmat's C++ exceptions to Python ones.
// One exception: matmul_small does the plainest small product whole, result included, because
// the general path's Python steps cost more than the product (see there).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <type_traits>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/backend.hpp"
#include "core/process.hpp"
#include "portmat/portmat.hpp"
#ifdef PORTMAT_WITH_CPU
#include "portmat/cpu.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

PyObject* error_type = nullptr;       // portmat.Error(RuntimeError)
PyObject* device_error_type = nullptr;  // portmat.DeviceError(Error)
PyObject* oom_type = nullptr;         // portmat.OutOfDeviceMemory(DeviceError, MemoryError)

template <class Array>
portmat::DType dtype_of(const Array& a, const char* name) {
  using Code = nb::dlpack::dtype_code;
  const nb::dlpack::dtype t = a.dtype();
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Bool && t.bits == 8) return portmat::DType::boolean;
    if (code == Code::Float && t.bits == 16) return portmat::DType::f16;
    if (code == Code::Bfloat && t.bits == 16) return portmat::DType::bf16;
    if (code == Code::Float && t.bits == 32) return portmat::DType::f32;
    if (code == Code::Float && t.bits == 64) return portmat::DType::f64;
    if (code == Code::Complex && t.bits == 64) return portmat::DType::c64;
    if (code == Code::Complex && t.bits == 128) return portmat::DType::c128;
    const portmat::DType ints[] = {portmat::DType::i8, portmat::DType::i16, portmat::DType::i32, portmat::DType::i64};
    const portmat::DType uints[] = {portmat::DType::u8, portmat::DType::u16, portmat::DType::u32, portmat::DType::u64};
    for (int i = 0; i < 4; ++i)
      if (t.bits == (8 << i)) {
        if (code == Code::Int) return ints[i];
        if (code == Code::UInt) return uints[i];
      }
  }
  throw nb::type_error((std::string(name) + ": unsupported dtype (DLPack code " + std::to_string(t.code) +
                        ", " + std::to_string(t.bits) + " bits)").c_str());
}

template <class Array>
portmat::ArrayView array_of(const Array& a, const char* name) {
  portmat::ArrayView v;
  v.data = const_cast<void*>(a.data());
  v.dtype = dtype_of(a, name);
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    v.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    v.strides.push_back(a.stride(i));
  }
  return v;
}

portmat::DType parse_dtype(const std::string& s) {
  try {
    return portmat::dtype_from_name(s);
  } catch (const std::invalid_argument& e) {
    throw nb::value_error(e.what());
  }
}

// `name`, for an array whose elements are `have` (the same size): bfloat16 travels through NumPy
// as uint16 bits (NumPy has no bfloat16 of its own; ml_dtypes' exports no DLPack or buffer).
portmat::DType same_size_dtype(portmat::DType have, const std::string& name) {
  const portmat::DType want = parse_dtype(name);
  if (portmat::dtype_size(want) != portmat::dtype_size(have))
    throw nb::type_error((std::string("a ") + portmat::dtype_name(have) + " array cannot carry " + name +
                          " elements (their sizes differ)").c_str());
  return want;
}

// ---- calls without the GIL, and interpreter exit ------------------------------------------------
// During interpreter finalization, Python (before 3.14) ends any daemon thread that takes the GIL
// back with pthread_exit(); in a thread returning from portmat that unwinds through C++ frames
// that may not throw, and the process aborts ("terminate called without an active exception").
// So every call that releases the GIL goes through without_gil(), and an atexit hook (atexit
// functions run before finalization starts) marks the process as exiting and waits, GIL
// released, until work in flight is done (at most kExitWaitSeconds) and every thread already on
// its way back holds the GIL again. From then on a thread other than the one exiting that would
// take the GIL back from portmat, or enter it, parks instead: the process is ending anyway.
constexpr int kExitWaitSeconds = 10;
constexpr double kKeepGilMadds = 32.0 * 32 * 32;  // products this small keep the GIL

struct ExitState {
  std::mutex mu;
  std::condition_variable cv;
  bool exiting = false;
  std::thread::id finalizer;  // the thread running the atexit hooks
  int in_flight = 0;          // calls working without the GIL
  int returning = 0;          // calls done, taking the GIL back
};

// Leaked (used at exit); replaced in a forked child, whose copy may count threads that are gone.
ExitState* exit_state = new ExitState;

[[noreturn]] void park_forever() {
  for (;;) pause();
}

bool must_park(const ExitState& st) {
  return st.exiting && std::this_thread::get_id() != st.finalizer;
}

template <class F>
auto without_gil(F&& f) -> decltype(f()) {
  ExitState& st = *exit_state;
  {
    std::unique_lock<std::mutex> lock(st.mu);
    if (must_park(st)) {
      lock.unlock();
      PyEval_SaveThread();
      park_forever();
    }
    ++st.in_flight;
  }
  PyThreadState* saved = PyEval_SaveThread();
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<decltype(f())>, char, decltype(f())>> result;
  try {
    if constexpr (std::is_void_v<decltype(f())>)
      f();
    else
      result.emplace(f());
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::unique_lock<std::mutex> lock(st.mu);
    --st.in_flight;
    if (must_park(st)) {
      st.cv.notify_all();
      lock.unlock();
      park_forever();
    }
    ++st.returning;
  }
  PyEval_RestoreThread(saved);
  {
    std::lock_guard<std::mutex> lock(st.mu);
    --st.returning;
    st.cv.notify_all();
  }
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<decltype(f())>) return std::move(*result);
}

// The atexit hook (called with the GIL held).
void exiting() {
  ExitState& st = *exit_state;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.exiting = true;
    st.finalizer = std::this_thread::get_id();
  }
  PyThreadState* saved = PyEval_SaveThread();
  {
    std::unique_lock<std::mutex> lock(st.mu);
    st.cv.wait_for(lock, std::chrono::seconds(kExitWaitSeconds),
                   [&] { return st.in_flight == 0 && st.returning == 0; });
  }
  PyEval_RestoreThread(saved);
}

// Runs a product of `madds` multiply-adds: tiny ones (at most kKeepGilMadds, about a microsecond on
// a CPU) holding the GIL, since releasing and retaking it would cost a third of NumPy's whole call
// at n = 8; the others without it.
template <class F>
void multiply_holding_gil_if_tiny(double madds, F&& f) {
  if (madds <= kKeepGilMadds)
    f();
  else
    without_gil(f);
}

// A capsule that owns `p` (deleting the capsule drops the reference).
nb::capsule hold(std::shared_ptr<void> p) {
  auto* h = new std::shared_ptr<void>(std::move(p));
  return nb::capsule(h, [](void* q) noexcept { delete static_cast<std::shared_ptr<void>*>(q); });
}

// ---- the small-product fast path ----------------------------------------------------------------
// np.matmul takes ~0.8-2.5 us for an 8x8 product; portmat's general path (NumPy semantics in
// Python, three arrays through nanobind's DLPack import) took 3.3-3.9 us, of which the product
// itself is 0.2. The fast path does the common case in one call: plain NumPy arrays of one
// same-dtype product NumPy keeps in its dtype (fast_dtypes) of 1-2 dimensions (or small
// stacks: stack_product), the same dtype, native order and aligned; the result allocated by
// numpy.empty, or a plain `out` written in place (7.5 -> 1.1 us at 12 x 12 on the 2-core machine).
// Anything else is not handled, and the general path (python/portmat/__init__.py) decides (and
// raises NumPy's errors). `portmat.matmul` itself is matmul_entry below, a C function that tries
// this first: through a Python function the call cost ~0.18 us more (issue 16).
PyTypeObject* ndarray_type = nullptr;  // numpy.ndarray
PyObject* numpy_empty = nullptr;       // numpy.empty
// The dtypes the fast path takes, by their canonical descriptor (numpy.dtype(name), also empty's
// dtype argument: 0.05 us faster than the scalar types): every dtype a same-dtype product keeps
// without promotion (integers wrapping as NumPy's, booleans as logic, float16 accumulated in
// float32, complex through the real kernels; the core converts what its kernels do not compute).
// A (16 x 16) @ (16 x 16) bool product took 16.7 us through the general path, NumPy 3.3. An array
// whose descriptor is another object (a byte-swapped one, or 'q' where int64 is 'l') takes the
// general path.
struct FastDtype {
  PyObject* descr;
  portmat::DType dtype;
  Py_ssize_t itemsize;
};
FastDtype fast_dtypes[14] = {};
const FastDtype* fast_dtype_of(PyObject* descr) {
  for (const FastDtype& f : fast_dtypes)
    if (f.descr == descr) return &f;
  return nullptr;
}
PyObject* descr_of(portmat::DType t) {
  for (const FastDtype& f : fast_dtypes)
    if (f.dtype == t) return f.descr;
  return nullptr;
}

// A Py_buffer released on scope exit.
struct Buffer {
  Py_buffer view{};
  bool held = false;
  bool get(PyObject* o, int flags) {
    held = PyObject_GetBuffer(o, &view, flags) == 0;
    if (!held) PyErr_Clear();
    return held;
  }
  ~Buffer() {
    if (held) PyBuffer_Release(&view);
  }
};

// The head of NumPy's array object: PyArrayObject_fields (numpy/ndarraytypes.h), the fields its
// PyArray_DATA / _NDIM / _DIMS / _STRIDES / _DESCR accessors read, public and unchanged from
// NumPy 1.7 through 2.x. Read directly, an operand costs a few nanoseconds; through the buffer
// protocol (which builds a format string) ~0.1 us, a tenth of an 8 x 8 product's call. The layout
// is checked against the buffer protocol when the module loads (check_array_fields); where it
// does not match, or an array's dtype is not one of the two canonical descriptors (a byte-swapped
// or otherwise unusual one), the buffer protocol is used.
struct NumpyArrayHead {
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
};
bool array_head_ok = false;

// An operand of the fast path: 1-2 dimensions (a stack's: up to kFastMaxDims), strides in bytes.
// Only the first ndim entries of shape and strides are set or read (left uninitialised: three
// operands a call would otherwise clear 3 KiB).
constexpr int kFastMaxDims = 64;  // NumPy 2's NPY_MAXDIMS
struct SmallOperand {
  void* data = nullptr;
  int ndim = 0;
  Py_ssize_t shape[kFastMaxDims];
  Py_ssize_t strides[kFastMaxDims];
  Py_ssize_t itemsize = 0;
  portmat::DType dtype = portmat::DType::f32;
  double bytes() const {
    double n = static_cast<double>(itemsize);
    for (int i = 0; i < ndim; ++i) n *= static_cast<double>(shape[i]);
    return n;
  }
};

// The buffer's dtype when it is a native float32 or float64 ('f' / 'd', with or without '='
// or '@'), else nothing.
std::optional<portmat::DType> native_float(const Py_buffer& v) {
  const char* f = v.format;
  if (!f) return std::nullopt;
  if (*f == '@' || *f == '=') ++f;
  if (f[0] == 'f' && f[1] == 0 && v.itemsize == 4) return portmat::DType::f32;
  if (f[0] == 'd' && f[1] == 0 && v.itemsize == 8) return portmat::DType::f64;
  return std::nullopt;
}

bool operand_from_buffer(const Py_buffer& v, SmallOperand& op, int max_ndim = 2) {
  const auto t = native_float(v);
  if (!t || v.ndim < 1 || v.ndim > max_ndim) return false;
  op.data = v.buf, op.ndim = v.ndim, op.itemsize = v.itemsize, op.dtype = *t;
  for (int i = 0; i < v.ndim; ++i) op.shape[i] = v.shape[i], op.strides[i] = v.strides[i];
  return true;
}

// A plain ndarray (exactly numpy.ndarray) of 1 to max_ndim dimensions of a fast dtype as an
// operand, read from its head where that is known to work (any of fast_dtypes), else through
// `buf` (flags: what the buffer must allow; native float32 / float64 only); false for anything else.
bool small_operand(PyObject* o, Buffer& buf, int flags, SmallOperand& op, int max_ndim = 2) {
  if (Py_TYPE(o) != ndarray_type) return false;
  if (array_head_ok) {
    const auto* h = reinterpret_cast<const NumpyArrayHead*>(o);
    if (const FastDtype* f = fast_dtype_of(h->descr)) {
      if (h->nd < 1 || h->nd > max_ndim) return false;
      op.data = h->data, op.ndim = h->nd, op.itemsize = f->itemsize;
      op.dtype = f->dtype;
      for (int i = 0; i < h->nd; ++i) op.shape[i] = h->dimensions[i], op.strides[i] = h->strides[i];
      return true;
    }
  }
  return buf.get(o, flags) && operand_from_buffer(buf.view, op, max_ndim);
}

// Whether NumpyArrayHead reads arrays as the buffer protocol describes them: a strided 2-D view
// and a 1-D array of each dtype, made by this process's NumPy.
void check_array_fields(nb::module_& np) {
  bool ok = true;
  for (const char* dt : {"float32", "float64"}) {
    nb::object base = np.attr("arange")(30, "dtype"_a = dt).attr("reshape")(5, 6);
    nb::object views[] = {base[nb::make_tuple(nb::slice(1, 5, 1), nb::slice(0, 6, 2))],
                          np.attr("arange")(7, "dtype"_a = dt)};
    for (nb::handle v : views) {
      Buffer buf;
      if (!buf.get(v.ptr(), PyBUF_RECORDS_RO)) return;
      const auto* h = reinterpret_cast<const NumpyArrayHead*>(v.ptr());
      ok = ok && h->data == buf.view.buf && h->nd == buf.view.ndim &&
           h->descr == descr_of(std::strcmp(dt, "float32") == 0 ? portmat::DType::f32 : portmat::DType::f64);
      for (int i = 0; ok && i < buf.view.ndim; ++i)
        ok = h->dimensions[i] == buf.view.shape[i] && h->strides[i] == buf.view.strides[i];
    }
  }
  array_head_ok = ok;
}

// Whether the operand's address and strides are whole elements (the kernels' views count in them).
bool element_aligned(const SmallOperand& v) {
  if (reinterpret_cast<std::uintptr_t>(v.data) % v.itemsize != 0) return false;
  for (int i = 0; i < v.ndim; ++i)
    if (v.strides[i] % v.itemsize != 0) return false;
  return true;
}

// The operand as a matrix: a 2-D one as it is, a 1-D one as a row (`as_row`) or a column; nothing
// when an element or a stride is not a multiple of the element size.
std::optional<portmat::MatrixView> matrix_of(const SmallOperand& v, bool as_row) {
  const Py_ssize_t es = v.itemsize;
  if (!element_aligned(v)) return std::nullopt;
  portmat::MatrixView m;
  m.data = v.data, m.dtype = v.dtype;
  if (v.ndim == 2) {
    m.rows = v.shape[0], m.cols = v.shape[1];
    m.row_stride = v.strides[0] / es, m.col_stride = v.strides[1] / es;
  } else if (as_row) {
    m.rows = 1, m.cols = v.shape[0];
    m.row_stride = v.shape[0], m.col_stride = v.strides[0] / es;
  } else {
    m.rows = v.shape[0], m.cols = 1;
    m.row_stride = v.strides[0] / es, m.col_stride = 1;
  }
  return m;
}

constexpr Py_ssize_t kSmallResultBytes = Py_ssize_t(1) << 20;   // _host_memory.MIN_RESULT_BYTES
constexpr Py_ssize_t kSmallOperandBytes = Py_ssize_t(4) << 20;  // _host_memory.MIN_OPERAND_BYTES

// The bytes an operand's elements span, [first, last): strides may be negative.
std::pair<const char*, const char*> extent(const SmallOperand& v) {
  const char* lo = static_cast<const char*>(v.data);
  const char* hi = lo + v.itemsize;
  for (int i = 0; i < v.ndim; ++i) {
    if (v.shape[i] == 0) return {lo, lo};
    const Py_ssize_t span = (v.shape[i] - 1) * v.strides[i];
    (span < 0 ? lo : hi) += span;
  }
  return {lo, hi};
}
bool overlap(const SmallOperand& x, const SmallOperand& y) {
  const auto ex = extent(x), ey = extent(y);
  return ex.first < ey.second && ey.first < ex.second;
}

// A precision argument from Python: "" for the process-wide setting, else a mode's name.
std::optional<portmat::Precision> precision_arg(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return portmat::precision_from_name(s);
}

// The fast path's device argument as the core's spec: a str as it is, a DeviceInfo as its id
// (read here: through Python, DeviceInfo.id and the checks cost ~0.45 us, a third of an 8 x 8
// product's call); None as ""; false for anything else (a list of devices), which the general
// path takes.
bool small_device_spec(nb::handle device, std::string& spec) {
  if (device.is_none()) return true;
  if (PyUnicode_CheckExact(device.ptr())) {
    Py_ssize_t size = 0;
    const char* s = PyUnicode_AsUTF8AndSize(device.ptr(), &size);
    if (!s) {
      PyErr_Clear();  // not UTF-8 encodable: the general path raises
      return false;
    }
    spec.assign(s, static_cast<std::size_t>(size));
    return true;
  }
  if (!nb::isinstance<portmat::DeviceInfo>(device)) return false;
  spec = nb::inst_ptr<portmat::DeviceInfo>(device)->id();
  return true;
}

bool large_operands_in_place(const std::string& device, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, portmat::DType dtype,
                             std::optional<portmat::Precision> mode);

// A stack through the fast path (an operand of 3 or more dimensions, the other of 1 or more, of
// one dtype): a new array, or null, with no Python error set, where the general path must decide:
// an `out`, a result of kSmallResultBytes and more, operands of kSmallOperandBytes and more unless
// large_operands_in_place (the general path's host-memory policy), elements or strides not
// multiples of the element size, shapes NumPy refuses (the general path raises its error). The
// shapes' rules are the core's, as for matmul_arrays. Why: a stack of ten 8 x 8 float32 products
// cost 5.6 us through the general path (NumPy: 1.6), of which the product is a fraction; 16
// matrix-vector products of 256 x 256 float32 (4 MiB) 79-86 us, through here 70-73.
PyObject* stack_product(const SmallOperand& va, const SmallOperand& vb, const std::string& device,
                        PyObject* out_obj, std::optional<portmat::Precision> mode) {
  if (out_obj != Py_None) return nullptr;
  if (!element_aligned(va) || !element_aligned(vb)) return nullptr;
  auto view_of = [](const SmallOperand& v) {
    portmat::ArrayView out{v.data, v.dtype, {v.shape, v.shape + v.ndim}, {}};
    for (int i = 0; i < v.ndim; ++i) out.strides.push_back(v.strides[i] / v.itemsize);
    return out;
  };
  portmat::ArrayView a = view_of(va), b = view_of(vb), c;
  try {
    c.shape = portmat::matmul_shape(a.shape, b.shape);
  } catch (const std::invalid_argument&) {
    return nullptr;  // NumPy's error, raised by the general path
  }
  double elements = 1.0;
  for (std::int64_t d : c.shape) elements *= static_cast<double>(d);
  if (elements * static_cast<double>(va.itemsize) >= static_cast<double>(kSmallResultBytes)) return nullptr;
  if (va.bytes() >= static_cast<double>(kSmallOperandBytes) || vb.bytes() >= static_cast<double>(kSmallOperandBytes)) {
    // As one product of all the stack's rows: the core's device choice for a stack (multiply_batch).
    const Py_ssize_t N = vb.ndim >= 2 ? vb.shape[vb.ndim - 1] : 1, K = va.shape[va.ndim - 1];
    if (N == 0 || !large_operands_in_place(device, static_cast<Py_ssize_t>(elements) / N, N, K, va.dtype, mode)) return nullptr;
  }
  nb::object shape = nb::cast(c.shape);  // a list: numpy.empty takes it as a shape
  PyObject* args[2] = {shape.ptr(), descr_of(va.dtype)};
  nb::object c_obj = nb::steal(PyObject_Vectorcall(numpy_empty, args, 2, nullptr));
  if (!c_obj.is_valid()) throw nb::python_error();
  if (array_head_ok) {
    c.data = reinterpret_cast<const NumpyArrayHead*>(c_obj.ptr())->data;
  } else {
    Buffer c_buf;  // released at once: c_obj keeps the memory
    if (!c_buf.get(c_obj.ptr(), PyBUF_RECORDS)) throw nb::python_error();
    c.data = c_buf.view.buf;
  }
  c.dtype = va.dtype;
  c.strides.assign(c.shape.size(), 1);
  for (std::size_t i = c.shape.size(); i-- > 1;) c.strides[i - 1] = c.strides[i] * std::max<std::int64_t>(c.shape[i], 1);
  multiply_holding_gil_if_tiny(elements * static_cast<double>(va.shape[va.ndim - 1]),
                               [&] { portmat::matmul(a, b, c, device, mode); });
  return c_obj.release().ptr();
}

// Whether operands of kSmallOperandBytes and more (whose result is small) may take the fast path:
// where the one device the product goes to shares host memory (the CPU, PoCL, an integrated GPU),
// the general path's host-memory policy does nothing for them (no pinning; a small result is a
// plain array), and its ~10 us of Python between two calls cost far more than that: 2-core Xeon,
// (256) @ (256 x 4096) float32 (4 MiB), 131-141 us a call in a loop, 56-66 us through here (255
// rows, under the limit: 63-70; NumPy 63-84), (1024) @ (1024 x 4096) 400-430 -> 346-354 (NumPy
// 336-348). A discrete GPU's operands still go to the general path (pinned there), as do device
// lists and empty products. The device is the one the core's multiply_batch opens: the automatic
// choice by size (device_for), except in a precision mode other than float32, which takes the
// default device as it is.
bool large_operands_in_place(const std::string& device, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, portmat::DType dtype,
                             std::optional<portmat::Precision> mode) {
  if (M == 0 || N == 0 || K == 0 || portmat::core::names_device_list(device)) return false;
  const bool moded = (mode ? *mode : portmat::get_precision()) != portmat::Precision::float32 &&
                     portmat::core::follows_precision(dtype);
  return (moded ? portmat::find_device(device) : portmat::device_for(device, M, N, K)).host_unified;
}

// a @ b through the fast path: a new reference to the result (a new array, or `out`), or null,
// with no Python error set, where the general path must decide. C++ errors propagate.
PyObject* small_product(PyObject* a_obj, PyObject* b_obj, nb::handle device_obj, PyObject* out_obj,
                        std::optional<portmat::Precision> mode) {
  std::string device;
  if (!small_device_spec(device_obj, device)) return nullptr;
  Buffer a_buf, b_buf;
  SmallOperand va, vb;
  constexpr int flags = PyBUF_RECORDS_RO;  // strides and format, read-only arrays too
  if (!small_operand(a_obj, a_buf, flags, va, kFastMaxDims) || !small_operand(b_obj, b_buf, flags, vb, kFastMaxDims))
    return nullptr;
  if (va.ndim == 1 && vb.ndim == 1) return nullptr;  // a scalar result: the general path
  if (va.dtype != vb.dtype) return nullptr;
  if (va.ndim > 2 || vb.ndim > 2) return stack_product(va, vb, device, out_obj, mode);
  const Py_ssize_t K = va.shape[va.ndim - 1];
  if (vb.shape[0] != K) return nullptr;
  const Py_ssize_t M = va.ndim == 2 ? va.shape[0] : 1, N = vb.ndim == 2 ? vb.shape[1] : 1;
  // In floating point: M x N of hostile empty operands ((2^40, 0) @ (0, 2^30)) overflows an integer.
  if (static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(va.itemsize) >=
      static_cast<double>(kSmallResultBytes))
    return nullptr;
  if ((va.bytes() >= static_cast<double>(kSmallOperandBytes) || vb.bytes() >= static_cast<double>(kSmallOperandBytes)) &&
      !large_operands_in_place(device, M, N, K, va.dtype, mode))
    return nullptr;
  const auto ma = matrix_of(va, true), mb = matrix_of(vb, false);
  if (!ma || !mb) return nullptr;
  // The result: (M, N), (N,) for a vector a, (M,) for a vector b. Into `out` when it is a plain
  // C-contiguous, writeable array of exactly that shape and dtype, apart from a and b (NumPy
  // computes overlapping operands as if they did not overlap: the general path copies).
  const int c_ndim = va.ndim == 1 || vb.ndim == 1 ? 1 : 2;
  Buffer c_buf;
  SmallOperand vc;
  nb::object c_obj;
  if (out_obj != Py_None) {
    // PyBUF_RECORDS asks for a writeable buffer: a read-only out goes to the general path.
    if (Py_TYPE(out_obj) != ndarray_type || !c_buf.get(out_obj, PyBUF_RECORDS) ||
        !operand_from_buffer(c_buf.view, vc))
      return nullptr;
    const bool shaped = vc.ndim == c_ndim && (c_ndim == 1 ? vc.shape[0] == (va.ndim == 1 ? N : M)
                                                          : vc.shape[0] == M && vc.shape[1] == N);
    if (!shaped || vc.dtype != va.dtype || reinterpret_cast<std::uintptr_t>(vc.data) % vc.itemsize != 0 ||
        vc.strides[c_ndim - 1] != vc.itemsize || (c_ndim == 2 && vc.strides[0] != N * vc.itemsize) ||
        overlap(vc, va) || overlap(vc, vb))
      return nullptr;
    c_obj = nb::borrow(out_obj);
  } else {
    nb::object shape = va.ndim == 1   ? nb::make_tuple(N)
                       : vb.ndim == 1 ? nb::make_tuple(M)
                                      : nb::make_tuple(M, N);
    PyObject* args[2] = {shape.ptr(), descr_of(va.dtype)};
    c_obj = nb::steal(PyObject_Vectorcall(numpy_empty, args, 2, nullptr));
    if (!c_obj.is_valid()) throw nb::python_error();
    if (!small_operand(c_obj.ptr(), c_buf, PyBUF_RECORDS, vc)) throw nb::python_error();
  }
  portmat::MatrixView mc{vc.data, M, N, N, 1, va.dtype};
  multiply_holding_gil_if_tiny(static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K),
                               [&] { portmat::matmul(*ma, *mb, mc, device, mode); });
  return c_obj.release().ptr();
}

nb::object matmul_small(nb::handle a_obj, nb::handle b_obj, nb::handle device_obj, nb::handle out_obj,
                        const std::string& precision) {
  PyObject* c = small_product(a_obj.ptr(), b_obj.ptr(), device_obj, out_obj.ptr(), precision_arg(precision));
  return c ? nb::steal(c) : nb::none();
}

// portmat.matmul: the fast path above where the call allows it, else portmat's general matmul
// (a Python function, python/portmat/__init__.py, registered by set_matmul_fallback), called with
// the same arguments. The fast path takes a, b, an optional out (positional or keyword), device,
// and dtype / casting / precision only at their defaults (None, 'same_kind', None); any other
// keyword, a duplicate, a wrong count: the general path, whose errors are Python's own. A C++
// error in the fast path also goes there: the general path runs the product again and raises
// the error translated as every binding translates it (errors are the rare case; the cost of a
// second try does not matter there).
// portmat.matmul's docstring; its first lines give inspect.signature() the signature.
constexpr const char* kMatmulDoc =
    "matmul(a, b, /, out=None, *, dtype=None, device=None, casting='same_kind', precision=None, "
    "order='K', subok=True, signature=None, axes=None, axis=None)\n"
    "--\n"
    "\n"
    "a @ b as np.matmul(a, b, out=out, dtype=dtype, casting=casting, order=order, subok=subok,\n"
    "signature=signature, axes=axes) computes it, on a portmat device.\n"
    "\n"
    "Every shape np.matmul takes: 1-D operands (a row or a column vector, the added axis removed\n"
    "from the result), stacks of matrices whose leading axes broadcast, empty ones. Every dtype:\n"
    "bool, every integer (wrapping around as NumPy's do), float16 (accumulated in float32),\n"
    "float32, float64, complex64 and complex128, mixed pairs promoted as NumPy promotes them;\n"
    "NumPy itself computes the dtypes portmat has no kernels for (object, longdouble). `out` may\n"
    "be any array of the result's shape that NumPy's casting rules allow, any strides, even\n"
    "overlapping a or b; it is returned. Any views are read in place where a kernel can.\n"
    "Both 1-D: a NumPy scalar, as np.matmul returns. np.matmul's other ufunc arguments mean what\n"
    "they mean there: axes (where each operand's and the result's matrix axes are), order (the\n"
    "result's layout), subok, signature (dtype's longer form); axis raises NumPy's TypeError.\n"
    "\n"
    "device: a device (a spec such as 'cuda:0', 'opencl:1', 'gpu', 'cpu', or an entry of\n"
    "devices()), None for the default, or a list / tuple of devices: one product split across\n"
    "them, each computing a block of the result on a thread of its own (products under ~1e8 flops\n"
    "run whole on the fastest; docs/usage.md, \"Several devices\"). 'cuda' means every CUDA device.\n"
    "\n"
    "precision: how products computed in float32 arithmetic (float32, complex64, float16,\n"
    "bfloat16) are computed: 'float32' (exact, the default), 'float32_tc', 'tf32', 'bfloat16'\n"
    "(PRECISIONS; docs/usage.md has what each computes and its error), None: get_precision().\n"
    "Other dtypes ignore it. Devices that cannot run a mode raise DeviceError naming it.";

PyObject* matmul_fallback = nullptr;

PyObject* matmul_entry(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!matmul_fallback) {
    PyErr_SetString(PyExc_RuntimeError, "portmat._ext.matmul: the package has not registered its general path");
    return nullptr;
  }
  bool fast = nargs == 2 || nargs == 3;
  PyObject* out = nargs == 3 ? args[2] : Py_None;
  PyObject* device = Py_None;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; fast && i < nkw; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = args[nargs + i];
    if (PyUnicode_CompareWithASCIIString(key, "device") == 0) {
      device = value;
    } else if (PyUnicode_CompareWithASCIIString(key, "out") == 0) {
      fast = nargs == 2;  // out twice: the general path's TypeError
      out = value;
    } else if (PyUnicode_CompareWithASCIIString(key, "casting") == 0) {
      fast = PyUnicode_CheckExact(value) && PyUnicode_CompareWithASCIIString(value, "same_kind") == 0;
    } else {  // dtype, precision at None; anything else is the general path's to judge
      fast = value == Py_None && (PyUnicode_CompareWithASCIIString(key, "dtype") == 0 ||
                                  PyUnicode_CompareWithASCIIString(key, "precision") == 0);
    }
  }
  if (fast) {
    try {
      if (PyObject* c = small_product(args[0], args[1], device, out, std::nullopt)) return c;
    } catch (nb::python_error& e) {
      e.restore();
      return nullptr;
    } catch (...) {
      // the general path raises it (see above)
    }
  }
  return PyObject_Vectorcall(matmul_fallback, args, nargsf, kwnames);
}

// ---- arrays on a device (issue 17) --------------------------------------------------------------
// DLPack's element type of a dtype (for exporting a DeviceArray).
nb::dlpack::dtype dlpack_dtype(portmat::DType t) {
  using Code = nb::dlpack::dtype_code;
  using portmat::DType;
  auto make = [](Code c, int bits) {
    nb::dlpack::dtype d;
    d.code = static_cast<std::uint8_t>(c), d.bits = static_cast<std::uint8_t>(bits), d.lanes = 1;
    return d;
  };
  switch (t) {
    case DType::f16: return make(Code::Float, 16);
    case DType::f32: return make(Code::Float, 32);
    case DType::f64: return make(Code::Float, 64);
    case DType::c64: return make(Code::Complex, 64);
    case DType::c128: return make(Code::Complex, 128);
    case DType::boolean: return make(Code::Bool, 8);
    case DType::i8: return make(Code::Int, 8);
    case DType::i16: return make(Code::Int, 16);
    case DType::i32: return make(Code::Int, 32);
    case DType::i64: return make(Code::Int, 64);
    case DType::u8: return make(Code::UInt, 8);
    case DType::u16: return make(Code::UInt, 16);
    case DType::u32: return make(Code::UInt, 32);
    case DType::u64: return make(Code::UInt, 64);
    case DType::bf16: return make(Code::Bfloat, 16);
  }
  throw std::logic_error("dlpack_dtype: unknown dtype");
}

// A view of memory another library owns on a GPU: (address, shape, strides in elements).
portmat::ArrayView foreign_view(portmat::DType t, std::uintptr_t address, const std::vector<std::int64_t>& shape,
                                const std::vector<std::int64_t>& strides) {
  return portmat::ArrayView{reinterpret_cast<void*>(address), t, shape, strides};
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "portmat's C++ core (use the portmat package, not this module)";
  // Objects still held at exit (by parked daemon threads, say) are not leaks of the binding.
  nb::set_leak_warnings(false);
  nb::module_::import_("atexit").attr("register")(nb::cpp_function(&exiting));
  portmat::core::on_fork(nullptr, nullptr, [] { exit_state = new ExitState; });

  error_type = PyErr_NewException("portmat.Error", PyExc_RuntimeError, nullptr);
  device_error_type = PyErr_NewException("portmat.DeviceError", error_type, nullptr);
  nb::object oom_bases = nb::make_tuple(nb::handle(device_error_type), nb::handle(PyExc_MemoryError));
  oom_type = PyErr_NewException("portmat.OutOfDeviceMemory", oom_bases.ptr(), nullptr);
  m.attr("Error") = nb::handle(error_type);
  m.attr("DeviceError") = nb::handle(device_error_type);
  m.attr("OutOfDeviceMemory") = nb::handle(oom_type);
  // Messages may carry bytes that are not UTF-8 (a driver's build log, an environment variable's
  // value, a path): they are shown escaped (\xff), never turned into a UnicodeDecodeError that hides
  // the error itself.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    auto raise = [](PyObject* type, const char* what) {
      PyObject* text = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "backslashreplace");
      if (!text) {
        PyErr_Clear();
        PyErr_SetString(type, "(an error message that could not be decoded)");
        return;
      }
      PyErr_SetObject(type, text);
      Py_DECREF(text);
    };
    try {
      std::rethrow_exception(p);
    } catch (const portmat::OutOfDeviceMemory& e) {
      raise(oom_type, e.what());
    } catch (const portmat::DeviceError& e) {
      raise(device_error_type, e.what());
    } catch (const portmat::Error& e) {
      raise(error_type, e.what());
    } catch (const std::invalid_argument& e) {
      raise(PyExc_ValueError, e.what());
    }
  });

  nb::class_<portmat::DeviceInfo>(m, "DeviceInfo", "A device portmat can run on")
      .def_ro("backend", &portmat::DeviceInfo::backend)
      .def_ro("index", &portmat::DeviceInfo::index)
      .def_ro("name", &portmat::DeviceInfo::name)
      .def_ro("vendor", &portmat::DeviceInfo::vendor)
      .def_ro("driver_version", &portmat::DeviceInfo::driver_version)
      .def_prop_ro("kind", [](const portmat::DeviceInfo& d) { return portmat::device_kind_name(d.kind); })
      .def_ro("memory_bytes", &portmat::DeviceInfo::memory_bytes)
      .def_ro("host_unified", &portmat::DeviceInfo::host_unified,
              "True when the device shares system memory and uses NumPy buffers in place")
      .def_ro("compute_units", &portmat::DeviceInfo::compute_units)
      .def_ro("supports_float64", &portmat::DeviceInfo::supports_f64)
      .def_ro("peak_gflops", &portmat::DeviceInfo::peak_gflops,
              "float32 FMA peak in GFLOP/s (measured or from the clock); 0 when unknown")
      .def_prop_ro("id", &portmat::DeviceInfo::id, "'backend:index', e.g. 'opencl:0'")
      .def("__eq__", [](const portmat::DeviceInfo& a, const portmat::DeviceInfo& b) { return a.id() == b.id(); })
      .def("__hash__", [](const portmat::DeviceInfo& d) { return nb::hash(nb::str(d.id().c_str())); })
      .def("__repr__", [](const portmat::DeviceInfo& d) {
        return "<portmat device " + d.id() + ": " + d.name + " (" + portmat::device_kind_name(d.kind) +
               ", " + std::to_string(d.memory_bytes >> 20) + " MiB" +
               (d.host_unified ? ", shares host memory" : "") + ")>";
      });

  m.def("devices", &portmat::devices, "Every device of every backend");
  m.def("find_device", &portmat::find_device, "spec"_a);
  m.def("device_for", &portmat::device_for, "spec"_a, "m"_a, "n"_a, "k"_a,
        "The device matmul would use for an (m x k) @ (k x n) product");
  m.def("names_device_list", &portmat::core::names_device_list, "spec"_a,
        "Whether spec names several devices (a list, or 'cuda': every CUDA device) that split a product");
#ifdef PORTMAT_WITH_CPU
  m.def("set_num_threads", &portmat::set_num_threads, "n"_a,
        "Threads per matmul on the CPU backend; n <= 0 restores the default");
  m.def("num_threads", &portmat::num_threads, "Threads per matmul on the CPU backend");
#endif
  m.def("backend_notes", &portmat::backend_notes, "Problems met while probing backends");
  m.def("set_device_memory_limit", &portmat::set_device_memory_limit, "nbytes"_a.none(),
        "Caps portmat's device memory on each discrete device (bytes; None: $PORTMAT_DEVICE_MEMORY, else no cap)");
  m.def("device_memory_limit", &portmat::device_memory_limit,
        "The cap in force (set_device_memory_limit, else $PORTMAT_DEVICE_MEMORY), or None");
  m.def("parse_memory_size", &portmat::parse_memory_size, "text"_a, "'8G' -> 8 << 30, or ValueError");
  m.def(
      "device_usage",
      [](const std::string& device) {
        const portmat::DeviceUsage u = portmat::device_usage(device);
        nb::dict d;
        d["bytes_in_use"] = u.bytes_in_use;
        d["peak_bytes"] = u.peak_bytes;
        d["host_calls"] = u.host_calls;
        d["tiled_products"] = u.tiled_products;
        d["flops"] = u.flops;
        return d;
      },
      "device"_a, "What portmat's NumPy path did on a device (diagnostics)");
  m.def("reset_device_usage", &portmat::reset_device_usage, "device"_a);
  m.def("default_device", &portmat::default_device);
  m.def("set_default_device", &portmat::set_default_device, "spec"_a);
  m.def(
      "set_precision", [](const std::string& s) { portmat::set_precision(precision_arg(s)); }, "mode"_a,
      "The process-wide precision of float32 products: a mode's name, or '' for the automatic choice "
      "($PORTMAT_PRECISION, else float32)");
  m.def(
      "get_precision", [] { return std::string(portmat::precision_name(portmat::get_precision())); },
      "The precision float32 products use where a call names none");

  m.def(
      "matmul_arrays",
      [](nb::ndarray<nb::ro, nb::device::cpu> a, nb::ndarray<nb::ro, nb::device::cpu> b,
         nb::ndarray<nb::device::cpu> out, const std::string& device, const std::string& precision) {
        const std::optional<portmat::Precision> mode = precision_arg(precision);
        const portmat::ArrayView va = array_of(a, "a"), vb = array_of(b, "b"), vo = array_of(out, "out");
        double madds = vb.shape.empty() ? 1.0 : static_cast<double>(vb.shape.back());
        for (std::int64_t d : va.shape) madds *= static_cast<double>(d);
        multiply_holding_gil_if_tiny(madds, [&] { portmat::matmul(va, vb, vo, device, mode); });
      },
      "a"_a, "b"_a, "out"_a, "device"_a, "precision"_a = "",
      "out = a @ b with np.matmul's shapes (vectors, broadcast stacks), all three of one dtype; "
      "out's last axis contiguous, not overlapping a or b.");
  m.def("matmul_shape", &portmat::matmul_shape, "a"_a, "b"_a, "The shape of a @ b, or ValueError");

  {
    nb::module_ np = nb::module_::import_("numpy");
    ndarray_type = reinterpret_cast<PyTypeObject*>(nb::object(np.attr("ndarray")).release().ptr());
    numpy_empty = nb::object(np.attr("empty")).release().ptr();
    using portmat::DType;
    const std::pair<const char*, DType> fast[] = {
        {"float32", DType::f32}, {"float64", DType::f64}, {"int32", DType::i32},     {"int64", DType::i64},
        {"complex64", DType::c64}, {"complex128", DType::c128}, {"bool", DType::boolean}, {"int8", DType::i8},
        {"int16", DType::i16},   {"uint8", DType::u8},    {"uint16", DType::u16},    {"uint32", DType::u32},
        {"uint64", DType::u64},  {"float16", DType::f16}};
    static_assert(std::size(fast) == std::size(fast_dtypes));
    for (std::size_t i = 0; i < std::size(fast); ++i) {
      PyObject* d = nb::object(np.attr("dtype")(fast[i].first)).release().ptr();
      fast_dtypes[i] = {d, fast[i].second, static_cast<Py_ssize_t>(portmat::dtype_size(fast[i].second))};
    }
    check_array_fields(np);
  }
  m.def("fast_operands", [] { return array_head_ok; },
        "Whether the fast path reads NumPy arrays' heads (else through the buffer protocol)");
  m.def(
      "set_matmul_fallback", [](nb::object f) { matmul_fallback = f.release().ptr(); }, "f",
      "portmat's general matmul, which matmul calls where its fast path does not apply");
  {
    static PyMethodDef matmul_def = {"matmul", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&matmul_entry)),
                                     METH_FASTCALL | METH_KEYWORDS, kMatmulDoc};
    nb::object module_name = nb::str("portmat");
    PyObject* f = PyCFunction_NewEx(&matmul_def, nullptr, module_name.ptr());
    if (!f) throw nb::python_error();
    m.attr("matmul") = nb::steal(f);
  }
  // .none(): nanobind refuses None for a handle unless told; a None operand must reach the
  // general path, which raises NumPy's own error for it.
  m.def("matmul_small", &matmul_small, "a"_a.none(), "b"_a.none(), "device"_a.none(), "out"_a.none() = nb::none(),
        "precision"_a = "",
        "a @ b for plain float32 / float64 / int32 / int64 / complex NumPy arrays of one dtype with a small result (not both "
        "vectors; 1-2 dimensions, or stacks of up to 64 without out), on `device` (a spec, \"\" for "
        "the default, or a DeviceInfo): a new array, or `out` (a plain C-contiguous array of the "
        "result's shape and dtype, apart from a and b), or None where the general path must decide.");

  m.def(
      "empty_result",
      [](const std::string& device, std::size_t rows, std::size_t cols, const std::string& dtype,
         bool reuse_only) -> nb::object {
        const portmat::DType t = parse_dtype(dtype);
        auto dev = portmat::core::open_device(device);
        std::shared_ptr<void> mem = without_gil([&] {
          return portmat::core::with_enough_stack(
              [&] { return dev->alloc_host(rows * cols * portmat::dtype_size(t), reuse_only); });
        });
        if (!mem) return nb::none();
        void* data = mem.get();
        // The array owns a reference to the block; the pool gets it back when the array dies.
        nb::capsule owner = hold(std::move(mem));
        const std::size_t shape[2] = {rows, cols};
        if (t == portmat::DType::f32)
          return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<2>>(data, 2, shape, owner));
        return nb::cast(nb::ndarray<nb::numpy, double, nb::ndim<2>>(data, 2, shape, owner));
      },
      "device"_a, "rows"_a, "cols"_a, "dtype"_a, "reuse_only"_a = false,
      "An uninitialised C-contiguous result array in the memory `device` writes fastest (pinned "
      "memory for CUDA GPUs, recycled pages for the CPU), or None where ordinary memory is as good "
      "or (reuse_only) none is free");

  m.def(
      "pin_host",
      [](const std::string& device, std::uintptr_t address, std::size_t bytes) -> nb::object {
        auto dev = portmat::core::open_device(device);
        std::shared_ptr<void> pin = without_gil([&] {
          return portmat::core::with_enough_stack(
              [&] { return dev->pin_host(reinterpret_cast<const void*>(address), bytes); });
        });
        if (!pin) return nb::none();
        return hold(std::move(pin));
      },
      "device"_a, "address"_a, "bytes"_a,
      "Page-locks host memory for `device` until the returned handle is deleted (None where it "
      "would not help). The caller keeps the memory alive while it holds the handle.");

  m.def(
      "time_gemm",
      [](const std::string& device, std::int64_t mm, std::int64_t n, std::int64_t k,
         const std::string& dtype, int repeat, int launches, const std::string& layout, std::int64_t batch,
         const std::string& precision) {
        const portmat::DType t = parse_dtype(dtype);
        const std::optional<portmat::Precision> mode = precision_arg(precision);
        return without_gil(
            [&] { return portmat::time_gemm(device, mm, n, k, t, repeat, launches, layout, batch, mode); });
      },
      "device"_a, "m"_a, "n"_a, "k"_a, "dtype"_a, "repeat"_a, "launches"_a = 1, "layout"_a = "rr", "batch"_a = 1,
      "precision"_a = "",
      "Seconds of each of `repeat` kernel runs on device-resident random data (each the mean of "
      "`launches` products queued back to back; layout: a's and b's storage, 'r' row-major or "
      "'c' column-major each; batch: a stack of that many products, timed as one; complex "
      "dtypes where the device multiplies them itself)");

  nb::class_<portmat::DeviceArray>(m, "DeviceArray",
                                   "A C-contiguous array in one device's memory (portmat.Array wraps it)")
      .def_static(
          "from_numpy",
          [](nb::ndarray<nb::ro, nb::device::cpu> host, const std::string& device, const std::string& dtype) {
            portmat::ArrayView v = array_of(host, "x");
            if (!dtype.empty()) v.dtype = same_size_dtype(v.dtype, dtype);
            return without_gil([&] { return portmat::DeviceArray::from_host(v, device); });
          },
          "host"_a, "device"_a, "dtype"_a = "",
          "A copy of a NumPy array (any strides) on `device`; dtype: its elements' bits taken as that dtype "
          "(bfloat16 from a uint16 view)")
      .def_static(
          "empty",
          [](const std::string& device, const std::string& dtype, const std::vector<std::int64_t>& shape) {
            const portmat::DType t = parse_dtype(dtype);
            return without_gil([&] { return portmat::DeviceArray::empty(device, t, shape); });
          },
          "device"_a, "dtype"_a, "shape"_a, "Uninitialised memory for an array on `device`")
      .def(
          "to_numpy",
          [](const portmat::DeviceArray& x, nb::ndarray<nb::device::cpu> out, const std::string& dtype) {
            portmat::ArrayView v = array_of(out, "out");
            if (!dtype.empty()) v.dtype = same_size_dtype(v.dtype, dtype);
            without_gil([&] { x.to_host(v); });
          },
          "out"_a, "dtype"_a = "",
          "Copies the array into `out`, a NumPy array of its shape and dtype (dtype: out's bits taken as "
          "that dtype, e.g. bfloat16 into a uint16 array)")
      .def(
          "astype",
          [](const portmat::DeviceArray& x, const std::string& dtype) {
            const portmat::DType t = parse_dtype(dtype);
            return without_gil([&] { return x.astype(t); });
          },
          "dtype"_a, "A copy cast to `dtype` on the array's device (a cast kernel; the array itself if it is one)")
      .def_prop_ro("shape",
                   [](const portmat::DeviceArray& x) {
                     nb::list l;
                     for (auto d : x.shape()) l.append(d);
                     return nb::tuple(l);
                   })
      .def_prop_ro("dtype", [](const portmat::DeviceArray& x) { return portmat::dtype_name(x.dtype()); })
      .def_prop_ro("device", [](const portmat::DeviceArray& x) { return x.device(); })
      .def_prop_ro("address", &portmat::DeviceArray::address,
                   "The memory's device address (CUDA) or host address (CPU backend); 0 on OpenCL")
      .def(
          "dlpack_view",
          [](nb::handle self) -> nb::object {
            const auto& x = nb::cast<const portmat::DeviceArray&>(self);
            const portmat::DeviceInfo& d = x.device();
            std::int32_t device_type = 0;
            if (d.backend == "cuda") device_type = nb::device::cuda::value;
            if (d.backend == "cpu") device_type = nb::device::cpu::value;
            if (device_type == 0 || x.address() == 0)
              throw nb::buffer_error(("DLPack has no kind of device for portmat arrays on " + d.id() + " (" +
                                      d.name + "); copy it to the host with numpy() first").c_str());
            std::vector<std::size_t> shape(x.shape().begin(), x.shape().end());
            std::vector<std::int64_t> strides(shape.size());
            std::int64_t step = 1;
            for (std::size_t i = shape.size(); i-- > 0;) {
              strides[i] = step;
              step *= static_cast<std::int64_t>(std::max<std::size_t>(shape[i], 1));
            }
            nb::ndarray<nb::array_api> view(reinterpret_cast<void*>(x.address()), shape.size(), shape.data(), self, strides.data(),
                               dlpack_dtype(x.dtype()), device_type, d.backend == "cuda" ? d.index : 0);
            return nb::cast(view);
          },
          "An object with __dlpack__ / __dlpack_device__ over the array's memory (CUDA and CPU devices), "
          "keeping the array alive");

  m.def(
      "matmul_device_arrays",
      [](const portmat::DeviceArray& a, const portmat::DeviceArray& b, nb::handle out,
         const std::string& precision) -> portmat::DeviceArray {
        const std::optional<portmat::Precision> mode = precision_arg(precision);
        if (out.is_none()) return without_gil([&] { return portmat::matmul(a, b, mode); });
        const auto& o = nb::cast<const portmat::DeviceArray&>(out);
        without_gil([&] { portmat::matmul(a, b, o, mode); });
        return o;
      },
      "a"_a, "b"_a, "out"_a = nb::none(), "precision"_a = "",
      "a @ b of device arrays on their device (np.matmul's shapes): a new array, or into out");

  m.def(
      "matmul_on_stream",
      [](const std::string& dtype, std::uintptr_t a, const std::vector<std::int64_t>& a_shape,
         const std::vector<std::int64_t>& a_strides, std::uintptr_t b, const std::vector<std::int64_t>& b_shape,
         const std::vector<std::int64_t>& b_strides, std::uintptr_t out, const std::vector<std::int64_t>& out_shape,
         const std::vector<std::int64_t>& out_strides, const std::string& device, std::uintptr_t stream,
         std::uintptr_t workspace) {
        const portmat::DType t = parse_dtype(dtype);
        const portmat::ArrayView va = foreign_view(t, a, a_shape, a_strides), vb = foreign_view(t, b, b_shape, b_strides),
                                 vo = foreign_view(t, out, out_shape, out_strides);
        without_gil([&] { portmat::matmul_on_stream(va, vb, vo, device, stream, workspace); });
      },
      "dtype"_a, "a"_a, "a_shape"_a, "a_strides"_a, "b"_a, "b_shape"_a, "b_strides"_a, "out"_a, "out_shape"_a,
      "out_strides"_a, "device"_a, "stream"_a, "workspace"_a = 0,
      "out = a @ b on another library's GPU memory (addresses, strides in elements), queued on its "
      "CUDA stream and not waited for");
  m.def(
      "cast_on_stream",
      [](const std::string& device, std::uintptr_t src, const std::string& from, std::uintptr_t dst,
         const std::string& to, std::int64_t count, std::uintptr_t stream) {
        const portmat::DType f = parse_dtype(from), t = parse_dtype(to);
        without_gil([&] { portmat::cast_on_stream(src, f, dst, t, count, device, stream); });
      },
      "device"_a, "src"_a, "from_dtype"_a, "dst"_a, "to_dtype"_a, "count"_a, "stream"_a,
      "dst[i] = src[i] cast between dtypes on a CUDA device (contiguous addresses), queued on the stream");
  m.def(
      "stream_synchronize",
      [](const std::string& device, std::uintptr_t stream) {
        auto dev = portmat::core::open_device(device);
        without_gil([&] { portmat::core::with_enough_stack([&] { dev->wait_for_stream(stream); }); });
      },
      "device"_a, "stream"_a, "Waits for the work queued on a CUDA stream of another library");
  m.def(
      "tuning_store",
      [](const std::string& device) {
        auto dev = portmat::core::open_device(device);
        const auto [key, path] = dev->tuning_store();
        return nb::make_tuple(key, path);
      },
      "device"_a, "(key, file) under which `portmat tune` stores the device's kernel parameters; ('', '') where "
      "nothing is tuned");
  m.def(
      "kernel_params",
      [](const std::string& device, const std::string& dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
        auto dev = portmat::core::open_device(device);
        const portmat::DType t = parse_dtype(dtype);
        return without_gil([&] { return dev->kernel_params(t, m, n, k > 0 ? k : n); });
      },
      "device"_a, "dtype"_a, "m"_a, "n"_a, "k"_a = 0,
      "The kernel parameters an (m x k) @ (k x n) product of row-major operands runs with now ('MWG=64,...'; '' "
      "where there are none); k = 0: k = n");
  m.def(
      "device_holds_address",
      [](const std::string& device, std::uintptr_t address) {
        auto dev = portmat::core::open_device(device);
        return dev->holds_address(address);
      },
      "device"_a, "address"_a, "Whether a device address (a __cuda_array_interface__ pointer) is this device's memory");
  m.def(
      "dlpack_operand",
      [](nb::ndarray<nb::ro> x) {
        const portmat::ArrayView v = array_of(x, "operand");
        return nb::make_tuple(reinterpret_cast<std::uintptr_t>(v.data), nb::tuple(nb::cast(v.shape)),
                              nb::tuple(nb::cast(v.strides)), portmat::dtype_name(v.dtype), x.device_type(),
                              x.device_id());
      },
      "x"_a,
      "(address, shape, strides in elements, dtype, DLPack device type, device id) of a DLPack capsule or "
      "exporter; the caller keeps the exporter alive while it uses the address");
  m.def(
      "workspace_bytes",
      [](const std::string& dtype, const std::vector<std::int64_t>& b_shape) {
        const portmat::DType t = parse_dtype(dtype);
        return portmat::workspace_bytes(portmat::ArrayView{nullptr, t, {}, {}}, portmat::ArrayView{nullptr, t, b_shape, {}});
      },
      "dtype"_a, "b_shape"_a, "Device memory matmul_on_stream needs for b's real form (complex dtypes; else 0)");

  m.def(
      "_try_alloc",
      [](const std::string& device, std::size_t bytes) {
        auto dev = portmat::core::open_device(device);
        without_gil([&] { portmat::core::with_enough_stack([&] { dev->alloc(bytes); }); });  // freed at once
      },
      "device"_a, "bytes"_a, "Test hook: allocate and free device memory (raises when it cannot)");
}
