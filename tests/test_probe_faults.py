"""Fault injection through the probe: every kind x every GPU path.

Each kind runs in two probes, each faulting half of the GPU paths, so the other half shows the
fault does not leak; the test process itself survives crashes and hangs (they happen in the
probe's child). Verification uses the basic round trips only (``GPUBACKEND_PROBE_CANARIES=none``)
to keep the matrix fast; the round trips call the same fault hooks as the paths' kernels.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import capability_probe as cp
from capability_probe.faults import GPU_PATHS, KINDS
from capability_probe.testing import assert_fault_reported, fault_plan, probe_with_faults

HANG_TIMEOUT_S = 6.0


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fault-cache")


def test_plan_covers_every_pair() -> None:
    pairs = {(spec.split("@")[0], p) for spec, group in fault_plan() for p in group}
    assert pairs == {(k, p) for k in KINDS for p in GPU_PATHS}


@pytest.mark.parametrize("spec,group", fault_plan(), ids=[s for s, _ in fault_plan()])
def test_fault_matrix(spec: str, group: list[str], cache_dir: Path) -> None:
    kind = spec.split("@")[0]
    timeout = HANG_TIMEOUT_S if kind == "hang" else 60.0
    t = time.perf_counter()
    rep = probe_with_faults(spec, timeout_s=timeout, cache_dir=cache_dir, canaries="none")
    elapsed = time.perf_counter() - t
    assert not rep.cached
    for p in group:
        assert_fault_reported(rep, kind, p)
    for p in GPU_PATHS:
        if p not in group:
            assert rep.usable(p), f"{spec} leaked into {p}: {rep.paths[p].reason}"
    assert rep.preferred_path == "cpu" and rep.usable("cpu")
    if kind == "hang":
        assert elapsed < HANG_TIMEOUT_S + 10, f"a hang took {elapsed:.1f} s to end"
    print(f"{spec}: " + "; ".join(f"{p}: {rep.paths[p].reason}" for p in group) + f" ({elapsed:.1f} s)")


def test_gl_alias_faults_every_gl_tier(cache_dir: Path) -> None:
    rep = probe_with_faults("compile@gl", cache_dir=cache_dir, canaries="none")
    for p in ("gles31", "gles3", "gles2"):
        assert_fault_reported(rep, "compile", p)
    assert rep.usable("vulkan")


def test_faulted_verdict_never_served_to_a_healthy_run(cache_dir: Path) -> None:
    bad = probe_with_faults("wrong@gles31", cache_dir=cache_dir, canaries="none")
    assert not bad.usable("gles31")
    with_cache = probe_with_faults("", cache_dir=cache_dir, canaries="none")  # refresh=True inside
    assert with_cache.usable("gles31")
    from capability_probe.testing import fault_env

    with fault_env("", cache_dir=cache_dir, canaries="none"):
        assert cp.probe().usable("gles31")  # cached healthy verdict
    with fault_env("wrong@gles31", cache_dir=cache_dir, canaries="none"):
        assert not cp.probe().usable("gles31")  # cached faulted verdict, its own key
