"""A plain ``pip install`` of the built wheel into a fresh virtual environment (no setup script,
no system site packages, no extras): it imports, runs the CPU path, and reports every GPU path
absent with a reason. The installer fetches numpy/onnx/... (from its cache after the first run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHECK = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from onnx import TensorProto, helper
    import gpubackend

    assert os.path.dirname(gpubackend.__file__).startswith(sys.prefix), gpubackend.__file__
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (y,) = gpubackend.Session(model, path="cpu").run({"x": np.array([[-1, 2], [3, -4]], np.float32)})
    report = gpubackend.probe()
    import importlib.util
    from gpubackend import shaders
    generic = [n for n in ("fallback", "shaders") if importlib.util.find_spec(n) is not None]
    shipped = all((shaders.ROOT / f).is_file()
                  for f in ("compute/conv.comp", "spirv/manifest.json", "gles2/kernel.frag"))
    auto = gpubackend.Session(model)
    print("RESULT" + json.dumps({
        "y": y.tolist(), "auto": auto.path, "generic": generic, "shipped": shipped,
        "py_typed": os.path.isfile(os.path.join(
            os.path.dirname(gpubackend.__file__), "py.typed")),
        "paths": {k: [v.available, v.reason] for k, v in report.paths.items()},
    }))
""")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    # Nothing from this checkout's environment: PYTHONPATH would make pip see gpubackend as installed.
    kw.setdefault("env", {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))})
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _check_installed(py: Path, tmp_path: Path) -> None:
    """Run CHECK with the fresh environment's interpreter, outside the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GPUBACKEND_", "VIRTUAL_ENV"))}
    env["GPUBACKEND_CACHE_DIR"] = str(tmp_path / "cache")
    proc = _run([str(py), "-c", CHECK], env=env, cwd=tmp_path)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    result = json.loads(line[len("RESULT"):])
    assert result["y"] == [[0, 2], [3, 0]]
    assert result["py_typed"]
    assert result["generic"] == [], "the wheel installs generic top-level names"
    assert result["shipped"], "shaders are not shipped inside gpubackend.shaders"
    assert result["auto"] == "cpu"
    assert set(result["paths"]) >= {"vulkan", "gles31", "gles3", "gles2"}
    for key in ("vulkan", "gles31", "gles3", "gles2"):
        available, reason = result["paths"][key]
        assert not available and reason, (key, reason)


def _source_copy(tmp_path: Path) -> Path:
    """The checkout's packaged files, copied so the build leaves no build/ or egg-info in it."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build",
                                                             "tests", "benchmarks", "demos", "docs", ".*_cache"))
    return src


def _uv() -> str | None:
    try:
        import uv
    except ImportError:
        return None
    try:
        return uv.find_uv_bin()
    except FileNotFoundError:
        return None


def test_wheel_installs_in_a_fresh_venv(tmp_path: Path) -> None:
    """The default-suite version (about 25 s under load): uv builds the wheel (isolated build, its
    cached setuptools) and installs it with its dependencies into a new environment without pip;
    without uv (the ``dev`` extra installs it) the same steps run through pip, more slowly."""
    src = _source_copy(tmp_path)
    wheels, env_dir = tmp_path / "wheels", tmp_path / "venv"
    uv = _uv()
    if uv is not None:
        _run([uv, "build", "--wheel", "-q", "-o", str(wheels), str(src)])
        _run([uv, "venv", "-q", "--python", sys.executable, str(env_dir)])
    else:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)])
        venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    (wheel,) = wheels.glob("gpubackend-*.whl")
    py = env_dir / "bin" / "python"
    if uv is not None:
        _run([uv, "pip", "install", "-q", "--python", str(py), str(wheel)])
    else:
        _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheel)])
    _check_installed(py, tmp_path)


@pytest.mark.slow  # about 150 s on the shared 2-core machine (wheel build, venv, pip install of numpy/onnx)
def test_wheel_installs_and_runs_without_the_setup_script(tmp_path: Path) -> None:
    """The same with plain pip and a venv made with its own pip, as a user without uv does."""
    wheels = tmp_path / "wheels"
    src = _source_copy(tmp_path)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)])
    (wheel,) = wheels.glob("gpubackend-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", str(wheel)])
    _check_installed(py, tmp_path)
