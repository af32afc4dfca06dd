"""Capability probe: report, CLI, cache, blocklist, DISABLE, contexts, detection, canaries.

GL/Vulkan contexts are only ever made in subprocesses here (the probe's child or an explicit
``python -c``), so this file never binds a GL context to a pytest thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import capability_probe as cp
from capability_probe import blocklist, cache, faults, runner, verdicts
from capability_probe.report import PathVerdict, ProbeReport
from capability_probe.testing import fault_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(d))
    monkeypatch.delenv("GPUBACKEND_FAULT", raising=False)
    monkeypatch.delenv("GPUBACKEND_DISABLE", raising=False)
    monkeypatch.delenv("GPUBACKEND_BLOCKLIST", raising=False)
    # the probe's mechanism is under test here, not the paths' canaries (their owners test those)
    monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
    runner.clear_memo()
    yield d
    runner.clear_memo()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> ProbeReport:
    """One real (uncached) probe of this machine, shared by the detection tests."""
    with fault_env("", cache_dir=tmp_path_factory.mktemp("healthy-cache"), canaries="none"):
        return cp.probe(refresh=True)


def _py(code: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=e)


# ---- the real probe on llvmpipe / lavapipe ----------------------------------------------------

def test_probe_verifies_all_paths_on_mesa(healthy: ProbeReport) -> None:
    for p in ("vulkan", "gles31", "gles3", "gles2"):
        v = healthy.paths[p]
        assert v.available and v.verified, f"{p}: {v.reason}"
        assert v.software, f"{p} runs on a Mesa software driver here"
    assert healthy.usable("cpu") and healthy.paths["cpu"].verified
    # software renderers are never preferred over the CPU path, but stay usable
    assert healthy.preferred_path == "cpu"
    assert healthy.paths["cpu"].preferred and not healthy.paths["gles31"].preferred
    assert healthy.usable_paths() == ["vulkan", "gles31", "gles3", "gles2", "cpu"]
    assert not healthy.cached


def test_detection_values_sane(healthy: ProbeReport) -> None:
    gl = healthy.fingerprint["gl"]
    assert "llvmpipe" in gl["renderer"] and gl["vendor"]
    assert gl["api"] in ("gles", "gl") and gl["driver_version"]
    assert gl["context"] in ("egl-surfaceless-gles", "egl-device-gles", "egl-default-gles", "moderngl-standalone-gl")
    lim = healthy.limits["gl"]
    assert lim["max_texture_size"] >= 2048
    assert 4 <= lim["max_draw_buffers"] <= 32 and lim["max_color_attachments"] >= 4
    assert lim["max_uniform_block_size"] >= 16384
    assert lim["max_compute_work_group_invocations"] >= 128
    assert len(lim["max_compute_work_group_size"]) == 3 and lim["max_compute_work_group_size"][0] >= 128
    assert min(lim["max_compute_work_group_count"]) >= 65535
    assert lim["max_compute_shared_memory_size"] >= 16384
    assert lim["max_shader_storage_block_size"] >= 1 << 24
    feats = healthy.features["gl"]
    assert feats["rgba32f_renderable"] and feats["rgba16f_renderable"] and feats["fragment_highp"]
    assert feats["tiers_offered"] == ["gles31", "gles3", "gles2"]
    assert "GL_EXT_color_buffer_float" in healthy.extensions["gl"] or gl["api"] == "gl"
    vk = healthy.fingerprint["vulkan"]
    assert vk["device_type"] == "CPU" and "llvmpipe" in vk["renderer"]
    assert vk["api_version"].startswith("1.")
    vl = healthy.limits["vulkan"]
    assert vl["maxComputeWorkGroupInvocations"] >= 128 and vl["maxComputeSharedMemorySize"] >= 16384
    vf = healthy.features["vulkan"]
    assert vf["shaderFloat16"] and vf["storageBuffer16BitAccess"] and vf["kompute"]
    assert "storageBuffer8BitAccess" in vf


def test_report_roundtrips_and_table(healthy: ProbeReport) -> None:
    d = healthy.to_dict()
    assert d["preferred_path"] == "cpu"
    json.dumps(d)
    again = ProbeReport.from_dict(json.loads(json.dumps(d)))
    assert again.paths == healthy.paths and again.preferred_path == healthy.preferred_path
    t = healthy.table()
    for word in ("path", "available", "verified", "preferred", "reason", "vulkan", "gles2", "cpu", "llvmpipe",
                 "max_texture_size"):
        assert word in t


def test_preferred_path_rules() -> None:
    paths = {p: PathVerdict(p, available=True, verified=True, software=False) for p in cp.PATH_KEYS}
    rep = ProbeReport(paths=paths)
    assert rep.preferred_path == "vulkan"
    paths["vulkan"].verified = False
    assert rep.preferred_path == "gles31" and not rep.usable("vulkan")
    paths["gles31"].software = True
    assert rep.preferred_path == "gles3" and rep.usable("gles31")
    for p in ("gles3", "gles2"):
        paths[p].available = False
    assert rep.preferred_path == "cpu" and rep.usable("cpu")


def test_parent_loads_no_driver(tmp_path: Path) -> None:
    """The caller's process never loads EGL/GL/Vulkan drivers: all of that happens in the child."""
    r = _py("""
        import capability_probe as cp
        rep = cp.probe(refresh=True)
        assert rep.usable("gles31"), rep.table()
        maps = open("/proc/self/maps").read()
        loaded = [n for n in ("libEGL", "libGLES", "_dri.so", "libvulkan", "kp.cpython") if n in maps]
        print("LOADED", loaded)
    """, env={"GPUBACKEND_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "LOADED []" in r.stdout, r.stdout


# ---- cache ----------------------------------------------------------------------------------

@pytest.fixture
def frozen_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pin the source-tree part of the cache key: other work editing the paths' sources while the
    test runs must not turn an expected hit into a miss."""
    frozen = cache._source_trees()
    monkeypatch.setattr(cache, "_source_trees", lambda: frozen)


def test_cache_hit_miss_corrupt(tmp_cache: Path, frozen_sources: None) -> None:
    t = time.perf_counter()
    first = cp.probe()
    uncached_s = time.perf_counter() - t
    assert not first.cached
    files = list(tmp_cache.glob("probe-*.json"))
    assert len(files) == 1
    runner.clear_memo()  # a new process: only the disk cache
    t = time.perf_counter()
    second = cp.probe()
    cached_s = time.perf_counter() - t
    assert second.cached and second.paths == first.paths
    assert cached_s < uncached_s and cached_s < 0.5, (cached_s, uncached_s)
    print(f"probe uncached {uncached_s:.3f} s, cached {cached_s * 1000:.1f} ms")
    # in-memory hit
    assert cp.probe().cached
    # corrupt file: ignored, re-probed, rewritten
    files[0].write_text("{not json")
    runner.clear_memo()
    third = cp.probe()
    assert not third.cached and third.usable("gles3")
    assert json.loads(files[0].read_text())["report"]["jobs"]
    assert cp.probe().cached  # (refresh=True always re-runs: test_cli_probe and the fault tests)


def test_cache_key_covers_fault_disable_and_canaries(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                    frozen_sources: None) -> None:
    base, _ = cache.cheap_key(runner.canaries())
    monkeypatch.setenv("GPUBACKEND_FAULT", "nan@gles2")
    k_fault, _ = cache.cheap_key(runner.canaries())
    monkeypatch.delenv("GPUBACKEND_FAULT")
    monkeypatch.setenv("GPUBACKEND_DISABLE", "vulkan")
    k_dis, _ = cache.cheap_key(runner.canaries())
    monkeypatch.delenv("GPUBACKEND_DISABLE")
    k_can, _ = cache.cheap_key({**runner.canaries(), "gles2": ["x.y:canary"]})
    assert len({base, k_fault, k_dis, k_can}) == 4
    again, material = cache.cheap_key(runner.canaries())
    assert again == base
    assert any("libEGL" in f for f in material["drivers"]) and any("icd.d" in f for f in material["drivers"])


def test_unwritable_cache_is_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(f / "sub"))  # parent is a file
    assert cache.store("k", {"paths": {}}) is False
    assert cache.load("k") is None


# ---- GPUBACKEND_DISABLE ----------------------------------------------------------------------

def test_disable_env(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUBACKEND_DISABLE", "gles2, vulkan")
    rep = cp.probe()
    for p in ("gles2", "vulkan"):
        assert not rep.paths[p].available and not rep.usable(p)
        assert rep.paths[p].reason == "disabled by GPUBACKEND_DISABLE"
    assert rep.usable("gles3") and rep.usable("gles31")
    assert "vulkan" not in rep.fingerprint  # the Vulkan driver was not even loaded
    monkeypatch.setenv("GPUBACKEND_DISABLE", "gl")
    rep = cp.probe()
    assert [p for p in cp.PATH_KEYS if rep.usable(p)] == ["vulkan", "cpu"]


# ---- blocklist --------------------------------------------------------------------------------

MESA_FP = {
    "gl": {"vendor": "Mesa/X.org", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "driver": "Mesa",
           "driver_version": "22.3.6", "api_version": "3.2", "version": "OpenGL ES 3.2 Mesa 22.3.6"},
    "vulkan": {"vendor": "Mesa (0x10005)", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "device_type": "CPU",
               "driver": "llvmpipe", "driver_info": "Mesa 22.3.6 (LLVM 15.0.6)", "driver_version": "22.3.6",
               "api_version": "1.3.230"},
}


def test_version_specs() -> None:
    vm = blocklist.version_matches
    assert vm("22.3.6", ">=22,<22.3.7") and not vm("22.3.7", ">=22,<22.3.7")
    assert vm("22.3.6", "22.3.6") and vm("22.3.6", "==22.3.6") and not vm("22.3.6", "!=22.3.6")
    assert vm("3.2", "<=3.2") and not vm("3.2", ">3.2") and vm("3.10", ">3.9")
    assert vm("anything", "") and not vm("", ">=1")
    assert blocklist.parse_version("OpenGL ES 3.2 Mesa 22.3.6") == (3, 2)


def test_blocklist_matching() -> None:
    e = {"api": "gl", "vendor": "mesa", "renderer": r"llvmpipe \(LLVM 1[5-9]", "driver_version": ">=22,<23",
         "disable": ["gles31"], "reason": "r"}
    assert blocklist.entry_matches(e, MESA_FP["gl"])
    assert not blocklist.entry_matches({**e, "driver_version": ">=23"}, MESA_FP["gl"])
    assert not blocklist.entry_matches({**e, "renderer": "Adreno"}, MESA_FP["gl"])
    assert not blocklist.entry_matches({**e, "api_version": "<3.1"}, MESA_FP["gl"])
    assert blocklist.entry_matches({"device_type": "cpu"}, MESA_FP["vulkan"])
    assert not blocklist.entry_matches({"device_type": "discrete"}, MESA_FP["vulkan"])
    assert [a for a, _ in blocklist.matches(MESA_FP, [e])] == ["gl"]
    # no api: tried against both
    assert [a for a, _ in blocklist.matches(MESA_FP, [{"renderer": "llvmpipe"}])] == ["gl", "vulkan"]
    # the shipped file parses and matches nothing here (Mesa 22 llvmpipe is fine)
    shipped = blocklist.load_entries(blocklist.SHIPPED)
    assert shipped and all("reason" in x and "disable" in x for x in shipped)
    assert blocklist.matches(MESA_FP, shipped) == []
    adreno = {"gl": {"vendor": "Qualcomm", "renderer": "Adreno (TM) 430", "driver_version": "1.0",
                     "api_version": "3.1"}}
    assert [x["id"] for _, x in blocklist.matches(adreno, shipped)] == ["adreno-3xx-4xx-fp16-rt"]


def test_software_renderer_fingerprint_names_the_host_cpu(healthy: ProbeReport) -> None:
    cpu = cache.host_cpu()
    assert cpu and healthy.fingerprint["gl"]["cpu"] == cpu and healthy.fingerprint["vulkan"]["cpu"] == cpu
    nvidia = {"vendor": "NVIDIA (0x10de)", "renderer": "NVIDIA H100", "device_type": "DISCRETE_GPU",
              "driver_version": "550.54", "api_version": "1.3.277"}
    raw = {"jobs": {"gl-detect": {"ok": True, "fingerprint": dict(MESA_FP["gl"])},
                    "vulkan-detect": {"ok": True, "fingerprint": nvidia}}}
    fp = runner.build_report(raw).fingerprint
    assert fp["gl"]["cpu"] == cpu and "cpu" not in fp["vulkan"]  # a hardware GPU is the same on any host
    assert verdicts.fingerprint_id(fp, "vulkan") == verdicts.fingerprint_id({"vulkan": nvidia}, "vulkan")
    other_host = {"gl": {**fp["gl"], "cpu": "AMD EPYC 7B13"}}
    assert verdicts.fingerprint_id(fp, "gl") != verdicts.fingerprint_id(other_host, "gl")
    assert cache.cheap_key({})[1]["cpu"] == cpu  # cached verdicts are per CPU too


def _report_all_ok() -> ProbeReport:
    paths = {p: PathVerdict(p, available=True, verified=True) for p in cp.PATH_KEYS}
    return ProbeReport(paths=paths, fingerprint=json.loads(json.dumps(MESA_FP)))


def test_blocklist_apply_tier_and_features() -> None:
    rep = _report_all_ok()
    entries = [
        {"id": "t1", "api": "gl", "renderer": "llvmpipe", "disable": ["gles31", "gles3:depthwise", "fp16"],
         "reason": "broken compute"},
        {"id": "t2", "api": "vulkan", "driver_version": "<22.3.6", "disable": ["vulkan"], "reason": "old"},
        {"id": "t3", "api": "vulkan", "renderer": "llvmpipe", "disable": ["vulkan:gemm"], "reason": "gemm"},
    ]
    blocklist.apply(rep, entries)
    assert not rep.usable("gles31") and rep.paths["gles31"].reason == "blocklisted (t1): broken compute"
    assert rep.usable("gles3") and rep.paths["gles3"].disabled_kernels == ["depthwise", "fp16"]
    assert rep.paths["gles2"].disabled_kernels == ["fp16"]
    assert rep.usable("vulkan") and rep.paths["vulkan"].disabled_kernels == ["gemm"]


def test_user_blocklist_applied_by_probe(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    user = tmp_path / "my-blocklist.json"
    user.write_text(json.dumps({"entries": [
        {"id": "mine", "api": "gl", "renderer": "llvmpipe", "disable": ["gles2", "gles31:conv"], "reason": "test"}]}))
    monkeypatch.setenv("GPUBACKEND_BLOCKLIST", str(user))
    rep = cp.probe()
    assert not rep.usable("gles2") and "blocklisted (mine)" in rep.paths["gles2"].reason
    assert rep.usable("gles31") and "conv" in rep.paths["gles31"].disabled_kernels
    # the default user file lives in the cache dir; a malformed one is reported, not fatal
    monkeypatch.delenv("GPUBACKEND_BLOCKLIST")
    tmp_cache.mkdir(parents=True, exist_ok=True)
    (tmp_cache / "blocklist.json").write_text("[oops")
    runner.clear_memo()
    rep = cp.probe()
    assert rep.usable("gles2") and any("blocklist ignored" in n for n in rep.notes)


def test_kernel_verdicts_merge(tmp_cache: Path, frozen_sources: None) -> None:
    rep = cp.probe()
    verdicts.write_kernel_verdicts("gles3", ["depthwise", "conv"], rep)
    verdicts.write_kernel_verdicts("vulkan", ["gemm"], rep.to_dict())
    runner.clear_memo()
    again = cp.probe()
    assert again.cached
    assert set(again.paths["gles3"].disabled_kernels) >= {"conv", "depthwise"}
    assert "gemm" in again.paths["vulkan"].disabled_kernels
    assert again.paths["gles31"].disabled_kernels == []
    other = {"gl": {**MESA_FP["gl"], "renderer": "Mali-G78"}}
    assert verdicts.failed_kernels("gles3", other) == []
    verdicts.write_kernel_verdicts("gles3", [], rep)
    runner.clear_memo()
    assert cp.probe().paths["gles3"].disabled_kernels == []
    with pytest.raises(ValueError):
        verdicts.write_kernel_verdicts("cpu", ["x"], rep)


# ---- canaries -------------------------------------------------------------------------------

CANARY_MODULE = '''
import os, signal
def good(precision="fp32"):
    from capability_probe import contexts
    contexts.gl_context("gles3")
    return 1e-6 if precision == "fp32" else 1e-3
def bad(precision="fp32"):
    return 0.5
def boom(precision="fp32"):
    raise RuntimeError("kernel exploded")
def segv(precision="fp32"):
    os.kill(os.getpid(), signal.SIGSEGV)
def no_fp16(precision="fp32"):
    if precision == "fp16":
        raise NotImplementedError("fp32 only")
    return 2e-7
'''


def test_canaries_run_in_child(tmp_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "probe_canaries_fixture.py").write_text(CANARY_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "all")
    monkeypatch.setattr(runner, "_CANARIES", {p: [] for p in cp.GPU_PATH_KEYS})  # only the fixture's
    added = [("gles3", "good"), ("gles2", "bad"), ("gles31", "boom"), ("vulkan", "segv"), ("gles3", "no_fp16")]
    for p, fn in added:
        cp.register_canary(p, f"probe_canaries_fixture:{fn}")
    rep = cp.probe()
    assert rep.usable("gles3") and rep.paths["gles3"].canary_error == pytest.approx(1e-6)
    assert "canary" in rep.paths["gles3"].reason
    fp16 = rep.features["paths"]["gles3"]["fp16"]
    assert fp16["probe_canaries_fixture:good"] == pytest.approx(1e-3)
    assert "unsupported" in fp16["probe_canaries_fixture:no_fp16"]
    assert not rep.usable("gles2") and "wrong results" in rep.paths["gles2"].reason
    assert rep.paths["gles2"].canary_error == pytest.approx(0.5)
    assert not rep.usable("gles31") and "kernel exploded" in rep.paths["gles31"].reason
    assert not rep.usable("vulkan") and "SIGSEGV" in rep.paths["vulkan"].reason
    with pytest.raises(ValueError):
        cp.register_canary("gles3", "no-colon")
    with pytest.raises(ValueError):
        cp.register_canary("cpu", "a:b")


def test_default_canary_table() -> None:
    table = cp.canaries()
    for p in ("vulkan", "gles31", "gles3", "gles2"):
        assert f"gpubackend.paths.{p}:canary" in table[p]


# ---- faults (unit level) ----------------------------------------------------------------------

def test_fault_parsing_and_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    assert faults.parse("crash@gles2, nan@gl") == [("crash", "gles2"), ("nan", "gl")]
    with pytest.raises(ValueError):
        faults.parse("explode@gles2")
    with pytest.raises(ValueError):
        faults.parse("crash@cpu")
    monkeypatch.setenv("GPUBACKEND_FAULT", "nan@gl,oom@vulkan,link@gles31,compile@gles2,wrong@gles3")
    assert faults.active("nan", "gles2") and faults.active("nan", "gles31") and not faults.active("nan", "vulkan")
    assert not faults.active("oom", "gl") and faults.active("nan", "gl")
    with pytest.raises(cp.DeviceOutOfMemory):
        faults.on_alloc("vulkan", 1024)
    faults.on_alloc("gles2", 1024)
    with pytest.raises(cp.ShaderLinkError):
        faults.on_compile("gles31", "link")
    with pytest.raises(cp.ShaderLinkError):
        faults.on_compile("gles31", "compute")  # single-stage build: compile and link in one call
    faults.on_compile("gles31", "fragment")
    with pytest.raises(cp.ShaderCompileError):
        faults.on_compile("gles2", "fragment")
    x = np.arange(20, dtype=np.float32)
    assert np.isnan(faults.on_readback("gles2", x)).all() and not np.isnan(x).any()
    w = faults.on_readback("gles3", x)
    assert not np.array_equal(w, x) and np.array_equal(x, np.arange(20, dtype=np.float32))
    assert faults.on_readback("vulkan", x) is x
    b = faults.on_readback("gles2", np.zeros(8, np.uint8))
    assert (b == 255).all()
    monkeypatch.setenv("GPUBACKEND_FAULT", "lost@vulkan")
    with pytest.raises(cp.ContextLost):
        faults.on_dispatch("vulkan")
    monkeypatch.setenv("GPUBACKEND_FAULT", "absent@gles3")
    with pytest.raises(cp.DriverUnavailable):
        faults.on_context("gles3")
    faults.on_context("gles31")
    assert issubclass(cp.DriverUnavailable, cp.DriverError) and issubclass(cp.DriverError, RuntimeError)


def test_crash_fault_is_a_real_sigsegv() -> None:
    r = _py("from capability_probe import faults; faults.on_dispatch('gles31'); print('survived')",
            env={"GPUBACKEND_FAULT": "crash@gles31"})
    assert r.returncode == -11 and "survived" not in r.stdout


# ---- contexts (each in its own process) ----------------------------------------------------------

CTX_CODE = """
    import threading
    from capability_probe import contexts, roundtrip
    ctx = contexts.gl_context("gles31")
    assert contexts.gl_context() is ctx
    print("KIND", contexts.gl_context_kind(), ctx.version_code)
    roundtrip.gles2(); roundtrip.gles3(); roundtrip.gles31()
    seen = []
    def other():  # each thread has its own context, destroyed when the thread ends
        record = contexts.gl_record("gles31")
        assert record.ctx is not ctx and contexts.gl_context() is record.ctx
        roundtrip.gles31()
        seen.append(record)
    t = threading.Thread(target=other, name="worker-7"); t.start(); t.join()
    assert seen and not seen[0].alive, seen
    assert contexts.gl_context() is ctx
    roundtrip.gles31()
    print("OK")
"""


@pytest.mark.parametrize("method,kind,version", [
    ("surfaceless", "egl-surfaceless-gles", 320),
    ("device", "egl-device-gles", 320),
    ("standalone", "moderngl-standalone-gl", 450),
])
def test_gl_context_methods(method: str, kind: str, version: int) -> None:
    r = _py(CTX_CODE, env={"GPUBACKEND_GL_CONTEXT": method})
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"KIND {kind} {version}" in r.stdout and "OK" in r.stdout


def test_gl_context_default_order_and_unavailable() -> None:
    r = _py("from capability_probe import contexts; contexts.gl_context(); print(contexts.gl_context_kind())")
    assert r.returncode == 0 and r.stdout.strip() == "egl-surfaceless-gles", r.stderr
    r = _py("""
        from capability_probe import contexts
        from capability_probe.errors import DriverUnavailable
        try:
            contexts.gl_context()
        except DriverUnavailable as e:
            print("UNAVAILABLE", e)
    """, env={"GPUBACKEND_GL_CONTEXT": "nonsense"})
    assert "UNAVAILABLE" in r.stdout, r.stderr


def test_kompute_manager_and_vulkan_roundtrip() -> None:
    r = _py("""
        from capability_probe import contexts, roundtrip
        m = contexts.kompute_manager()
        assert contexts.kompute_manager() is m
        print(roundtrip.vulkan(), m.get_device_properties()["device_name"])
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "compute_dispatch" in r.stdout and "llvmpipe" in r.stdout


def test_attach_current_gl_context() -> None:
    """The demo's case: a context is already current (made here through EGL by hand)."""
    r = _py("""
        from capability_probe import contexts
        egl = contexts._Egl()
        egl.make_es_context("surfaceless")
        ctx = contexts.attach_current_gl_context()
        assert contexts.gl_context() is ctx and contexts.gl_context_kind() == "attached"
        from capability_probe import roundtrip
        roundtrip.gles31(ctx)
        print("OK", ctx.version_code)
    """)
    assert r.returncode == 0 and "OK 320" in r.stdout, r.stderr[-2000:]


# ---- CLI -------------------------------------------------------------------------------------

def test_cli_probe(tmp_path: Path) -> None:
    env = {**os.environ, "GPUBACKEND_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT),
           "GPUBACKEND_PROBE_CANARIES": "none"}
    r = subprocess.run([sys.executable, "-m", "gpubackend.cli", "probe", "--json", "--refresh"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["cached"] is False and d["preferred_path"] == "cpu" and d["paths"]["gles2"]["verified"]
    assert d["fingerprint"]["gl"]["renderer"] and d["limits"]["gl"]["max_texture_size"] > 0
    assert [line.split(":")[0] for line in d["kernel_variants"]] == ["kernel variants on vulkan",
                                                                      "kernel variants on gles31"]
    r = subprocess.run([sys.executable, "-m", "gpubackend.cli", "probe"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    for word in ("available", "verified", "preferred", "reason", "gles31", "vulkan", "llvmpipe", "preferred path: cpu",
                 "max_texture_size", "kernel variants on vulkan: conv "):
        assert word in r.stdout


def test_probe_with_the_paths_canaries(tmp_path: Path) -> None:
    """The default table (gpubackend.paths.<path>:canary): on Mesa every path passes its basic round
    trip and its own canary (real conv, depthwise and GEMM kernels against the CPU reference)."""
    with fault_env("", cache_dir=tmp_path, canaries="all"):
        rep = cp.probe(refresh=True)
    print(rep.table())
    for p in ("vulkan", "gles31", "gles3", "gles2"):
        v = rep.paths[p]
        assert v.available, v.reason
        assert v.verified, v.reason
        assert v.canary_error is not None and v.canary_error < 1e-4, (p, v.canary_error)


def test_compile_errors_name_stage_source_and_log() -> None:
    r = _py("""
        from capability_probe import contexts, glutil
        from capability_probe.errors import ShaderCompileError
        ctx = contexts.gl_context("gles31")
        src = "#version 310 es\\nlayout(local_size_x=1) in;\\nvoid main() {\\n  float x = 1.0\\n  x += 2.0;\\n}\\n"
        try:
            glutil.build_compute(ctx, "gles31", src)
        except ShaderCompileError as e:
            assert e.stage == "compute" and "x += 2.0" in str(e) and ">>" in str(e) and "error" in e.log, str(e)
            print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


def test_vulkan_detection_without_vulkaninfo() -> None:
    """Without vulkan-tools the probe falls back on Kompute's device properties."""
    r = _py("""
        from capability_probe import detect
        d = detect.detect_vulkan()
        assert d["fingerprint"]["source"] == "kompute", d["fingerprint"]
        assert "llvmpipe" in d["fingerprint"]["renderer"] and d["features"]["kompute"]
        assert d["limits"]["kompute_max_work_group_invocations"] >= 128, d["limits"]
        print("OK")
    """, env={"PATH": "/nonexistent"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


def test_probe_inside_the_child_does_not_recurse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runner.CHILD_ENV, "1")
    rep = cp.probe()
    assert rep.usable("gles31") and rep.preferred_path == "cpu" and "recursive" in rep.paths["gles3"].reason


def test_software_driver_threads_respects_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    from capability_probe import contexts

    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    monkeypatch.delenv(contexts.SOFTWARE_THREADS_ENV, raising=False)
    cpus = len(os.sched_getaffinity(0))
    assert contexts.software_driver_threads() == 2 * cpus
    monkeypatch.setenv(contexts.SOFTWARE_THREADS_ENV, "3")
    assert contexts.software_driver_threads() == 3
    monkeypatch.setenv(contexts.SOFTWARE_THREADS_ENV, "off")
    assert contexts.software_driver_threads() is None
    monkeypatch.setenv(contexts.SOFTWARE_THREADS_ENV, "5")
    monkeypatch.setenv("LP_NUM_THREADS", "1")  # the user's own setting wins
    assert contexts.software_driver_threads() is None


def test_first_compute_context_asks_mesa_for_twice_the_cpus_unless_told() -> None:
    code = textwrap.dedent("""
        import os
        from capability_probe import contexts
        before = os.environ.get("LP_NUM_THREADS")
        contexts.kompute_manager()
        print(before, os.environ.get("LP_NUM_THREADS"), len(os.sched_getaffinity(0)))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("LP_NUM_THREADS", "GPUBACKEND_SOFTWARE_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    before, after, cpus = out.stdout.split()
    assert (before, after) == ("None", str(2 * int(cpus))), out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "LP_NUM_THREADS": "1"}, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split()[:2] == ["1", "1"], out.stderr[-2000:]
