"""dask stays optional: `import portmat` never imports it, and `import portmat.dask` without it says
how to install it (in fresh processes, with dask hidden from the import system)."""

import pytest

from conftest import run_python

# sys.modules[name] = None makes `import name` raise ImportError, as if it were not installed.
HIDE_DASK = "import sys; sys.modules['dask'] = None; sys.modules['dask.array'] = None; "


def test_import_portmat_does_not_import_dask():
    r = run_python("-c", "import sys, portmat, numpy as np; portmat.matmul(np.ones((3, 3)), np.ones((3, 3))); "
                   "assert not [m for m in sys.modules if m == 'dask' or m.startswith(('dask.', 'distributed'))], "
                   "sorted(m for m in sys.modules if 'dask' in m or 'distributed' in m)")
    assert r.returncode == 0, r.stderr


def test_portmat_dask_without_dask_names_the_install():
    r = run_python("-c", HIDE_DASK + "import portmat.dask")
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "pip install portmat[dask]" in r.stderr, r.stderr
    # portmat itself still works in that process.
    r = run_python("-c", HIDE_DASK + "import numpy as np, portmat\ntry:\n    import portmat.dask\nexcept ImportError:\n"
                   "    pass\nprint(portmat.matmul(np.eye(2), np.eye(2)).sum())")
    assert r.returncode == 0 and r.stdout.strip() == "2.0", r.stderr


def test_pin_devices_without_distributed_names_the_install():
    pytest.importorskip("dask.array")
    r = run_python("-c", "import sys; sys.modules['distributed'] = None; import portmat.dask; "
                   "portmat.dask.matmul; portmat.dask.PinDevices")  # matmul needs only dask.array
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "pip install portmat[dask]" in r.stderr, r.stderr
