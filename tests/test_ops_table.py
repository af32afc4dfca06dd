"""docs/ops.md is what tools/ops_table.py makes from the kernel registries today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("ops_table", ROOT / "tools" / "ops_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ops_table_is_current() -> None:
    problem = _tool().check()
    assert problem is None, problem


def test_ops_table_reads_the_registries() -> None:
    from gpubackend.paths import compute_kernels as ck
    from gpubackend.paths.gles2 import kernels as k2

    data = _tool().collect()
    assert data["cells"]["gles31"]["Conv"] == [name for name, _ in ck.REGISTRY["Conv"]]
    assert set(data["cells"]["gles2"]) == set(k2.REGISTRY)
    assert "Conv" in data["cells"]["gles3"] and "TopK" not in data["cells"]["gles3"]
    # a decline reason a generator raises is listed in words under its op
    assert any("convolution" in r for r in data["declines"]["vulkan"]["Conv"])
    assert "Flatten" in data["cells"]["cpu"]
