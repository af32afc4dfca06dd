"""The on-disk caches can be tampered with, planted on or made unwritable without changing an
answer or breaking a session (issue 18's cache findings, one regression test each)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest

import capability_probe as cp
from capability_probe import cache, runner, verdicts


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(d))
    for var in ("GPUBACKEND_FAULT", "GPUBACKEND_DISABLE", "GPUBACKEND_BLOCKLIST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
    frozen = cache._source_trees()  # other work editing sources must not turn a hit into a miss
    monkeypatch.setattr(cache, "_source_trees", lambda: frozen)
    runner.clear_memo()
    yield d
    runner.clear_memo()


def _entry_file(d: Path) -> Path:
    (f,) = list(d.glob("probe-*.json"))
    return f


def _tamper(f: Path, edit) -> None:
    entry = json.loads(f.read_text())
    edit(entry["report"])
    f.write_text(json.dumps(entry))  # the stored hash no longer matches, as with any hand edit


def test_tampered_probe_entry_is_reprobed_and_rewritten(tmp_cache: Path) -> None:
    first = cp.probe()
    f = _entry_file(tmp_cache)
    assert stat.S_IMODE(tmp_cache.stat().st_mode) == 0o700
    _tamper(f, lambda r: r["jobs"].__setitem__("gles31", 5))  # used to raise AttributeError forever
    runner.clear_memo()
    again = cp.probe()
    assert not again.cached
    assert {k: (v.available, v.verified) for k, v in again.paths.items()} == \
        {k: (v.available, v.verified) for k, v in first.paths.items()}
    key = json.loads(f.read_text())["key"]
    assert cache.load(key) is not None  # rewritten as a valid entry
    runner.clear_memo()
    assert cp.probe().cached


@pytest.mark.parametrize("edit", [
    lambda r: r.__setitem__("jobs", {}),                              # used to disable every GPU path
    lambda r: r["jobs"]["gles3"].__setitem__("verified", "yes"),        # used to be read as a verdict
    lambda r: r["jobs"]["vulkan"].__setitem__("disabled_kernels", "conv"),
    lambda r: r["jobs"]["gles2"].__setitem__("canary_error", "small"),
])
def test_malformed_probe_entries_are_not_trusted(tmp_cache: Path, edit) -> None:
    verdict = {"available": True, "verified": True, "software": True, "reason": "ok", "canary_error": 1e-7,
               "disabled_kernels": []}
    report = {"jobs": {p: dict(verdict) for p in ("vulkan", "gles31", "gles3", "gles2")}, "disabled": []}
    assert cache.store("k", report)
    assert cache.load("k") == report
    edit(report)
    entry = json.loads(cache.report_file("k").read_text())
    entry["report"] = report
    entry["sha256"] = cache._digest(cache._canonical(report))  # even with a matching hash
    cache.report_file("k").write_text(json.dumps(entry))
    assert cache.load("k") is None


def test_probe_entry_under_another_key_is_refused(tmp_cache: Path) -> None:
    report = {"jobs": {}, "disabled": ["vulkan", "gles31", "gles3", "gles2"]}
    assert cache.store("a", report)
    cache.report_file("b").write_bytes(cache.report_file("a").read_bytes())
    assert cache.load("a") == report and cache.load("b") is None


def test_blob_bound_to_its_key(tmp_path: Path) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    assert cache.write_blob(a, "key-a", b"payload A")
    assert cache.write_blob(b, "key-b", b"payload B")
    assert cache.read_blob(a, "key-a") == b"payload A"
    b.write_bytes(a.read_bytes())  # a valid entry under the wrong name
    assert cache.read_blob(b, "key-b") is None
    assert not b.exists()  # dropped, so it is rewritten
    a.write_bytes(a.read_bytes()[:-1])  # truncated
    assert cache.read_blob(a, "key-a") is None


def test_planted_symlink_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    d = tmp_path / "cache"
    d.mkdir()
    entry = d / "x.bin"
    entry.symlink_to(victim)
    for name in ("x.bin.tmp", f"x.tmp{__import__('os').getpid()}"):  # the names a predictable writer would use
        (d / name).symlink_to(victim)
    assert cache.write_blob(entry, "k", b"data")
    assert victim.read_text() == "precious"
    assert not entry.is_symlink() and cache.read_blob(entry, "k") == b"data"


def test_unwritable_places_degrade_to_no_caching(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert cache.write_blob(blocker / "sub" / "x.bin", "k", b"data") is False
    occupied = tmp_path / "dir-entry"
    occupied.mkdir()
    (occupied / "inside").write_text("x")
    assert cache.write_blob(occupied, "k", b"data") is False  # a directory sits at the entry's name


def test_malformed_kernel_verdicts_are_dropped(tmp_cache: Path) -> None:
    tmp_cache.mkdir(parents=True)
    verdicts.verdicts_file().write_text(json.dumps({"drivers": {
        "good": {"api": "gl", "paths": {"gles3": {"failed_kernels": ["conv"]}}},
        "bad": {"api": "gl", "paths": {"gles3": {"failed_kernels": "conv"}}},
        "worse": 5}}))
    assert set(verdicts.load()["drivers"]) == {"good"}
    verdicts.verdicts_file().write_text("[1, 2")
    assert verdicts.load() == {"drivers": {}}


# ---- the gles31 program-binary cache --------------------------------------------------------------

def test_program_binary_under_wrong_name_is_not_loaded(gles31, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from gpubackend.paths import compute_kernels as ck

    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    dev, _ = gles31.device_and_programs()
    cold = gles31.ProgramCache(dev)
    if cold.dir is None:
        pytest.skip(f"this driver persists no program binaries: {cold.binary_note}")
    srcs = [ck.glsl_source(("compute/unary.comp", (("ACT", a),), (8, 1, 1)), "gles31") + "\n// swap test\n"
            for a in (1, 6)]
    for s in srcs:
        cold.get(s)
    files = sorted(cold.dir.glob("*.bin"))
    assert len(files) == 2
    blobs = [f.read_bytes() for f in files]
    files[0].write_bytes(blobs[1])  # swap the two valid binaries
    files[1].write_bytes(blobs[0])
    dev._programs.clear()  # noqa: SLF001 - as in a new process
    warm = gles31.ProgramCache(dev)
    for s in srcs:
        warm.get(s)
    assert warm.stats["from_binary"] == 0 and warm.stats["compiled"] == 2
    dev._programs.clear()  # noqa: SLF001


def test_unwritable_program_cache_still_runs(gles31, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpubackend.paths import compute_kernels as ck

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(blocker / "cache"))
    dev, _ = gles31.device_and_programs()
    progs = gles31.ProgramCache(dev)
    assert progs.dir is None and "unavailable" in progs.binary_note or "no GL_PROGRAM_BINARY" in progs.binary_note
    src = ck.glsl_source(("compute/unary.comp", (("ACT", 1),), (8, 1, 1)), "gles31") + "\n// ro test\n"
    assert int(progs.get(src)) > 0  # a linked program
    dev._programs.clear()  # noqa: SLF001


def test_session_runs_with_an_unusable_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx
    from onnx import TensorProto, helper

    import gpubackend

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
    runner.clear_memo()
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    x = np.linspace(-1, 1, 36, dtype=np.float32).reshape(1, 4, 3, 3)
    sess = gpubackend.Session(model, path="gles31")
    try:
        np.testing.assert_array_equal(sess.run({"x": x})[0], np.maximum(x, 0))
    finally:
        sess.close()
        runner.clear_memo()
