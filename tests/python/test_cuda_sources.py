"""Rules of the CUDA kernels' source that no GPU-less run can see fail, checked on the text.

Every kernel is launched as a programmatic dependent launch on sm_90 (src/cuda/cuda_backend.cpp,
launch_kernel): its blocks may be resident while the kernel ahead of it on the stream still runs.
A kernel that touched global memory before wait_for_prior_grid() would read results not yet
written, or overwrite operands still being read, and only on some runs. So every entry point in
src/cuda/kernels/gemm.cu calls it first. The GPU tests (test_device_arrays.py,
test_products_queued_back_to_back_see_each_other) check the behaviour where there is a GPU.
"""

import pathlib
import re

KERNELS = pathlib.Path(__file__).resolve().parents[2] / "src" / "cuda" / "kernels" / "gemm.cu"


def _entry_bodies(text):
    """(name, first statement) of each __global__ function, macro continuations joined."""
    text = text.replace("\\\n", " ")
    for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\(.*?\)\s+|PM_BOUNDS\(\w+\)\s+)?([\w#]+)\s*\(",
                         text):
        depth, i = 1, m.end()
        while depth:  # past the parameter list
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        body = text[text.index("{", i) + 1:]
        yield m.group(1), body.lstrip().split(";", 1)[0].strip()


def test_every_kernel_waits_for_the_grid_ahead_before_anything_else():
    entries = list(_entry_bodies(KERNELS.read_text()))
    assert len(entries) > 100, "the entry points were not found: has gemm.cu changed its form?"
    late = [name for name, first in entries if first != "wait_for_prior_grid()"]
    assert not late, f"kernels that do not begin with wait_for_prior_grid(): {late}"


def test_the_check_sees_a_kernel_without_the_wait():
    bad = "__global__ void __launch_bounds__(256) k1(A p) { body(p); }\n" \
          "__global__ void PM_BOUNDS(kT) k2(A p) { wait_for_prior_grid(); body(p); }\n"
    assert [(n, f) for n, f in _entry_bodies(bad)] == [("k1", "body(p)"), ("k2", "wait_for_prior_grid()")]
