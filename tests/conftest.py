import os
import tempfile

import pytest

# Verdicts and program binaries of a test run go to a private cache, so a stale verdict from
# an earlier version or a fault-injection test never leaks into another run.
_cache = os.environ.setdefault("GPUBACKEND_CACHE_DIR", tempfile.mkdtemp(prefix="gpubackend-test-cache-"))
# pytest-xdist workers inherit the controller's environment: each gets a cache of its own below it,
# so a verdict left by a fault-injection test in one worker is never read by another's test.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["GPUBACKEND_CACHE_DIR"] = os.path.join(_cache, os.environ["PYTEST_XDIST_WORKER"])
os.environ.pop("GPUBACKEND_FAULT", None)
os.environ.pop("GPUBACKEND_PATH", None)
os.environ.pop("GPUBACKEND_DISABLE", None)
# First-use kernel tuning off: every xdist worker has a cache of its own and would time the variants
# again (seconds each), and the tests expect the device class's defaults unless they tune;
# tests/test_tuning.py turns it on where it is under test.
os.environ["GPUBACKEND_TUNE"] = "off"
# Mesa's default worker threads (one per CPU): the xdist workers already keep every core busy
# (the suite took 212 s with twice the threads per worker, 214 s without: no gain to have);
# tests/test_probe.py checks gpubackend's default in a child process.
os.environ["GPUBACKEND_SOFTWARE_THREADS"] = "off"


@pytest.fixture(scope="module")
def gles31():
    """The gles31 path module with its device created (skips when this machine has no GL ES 3.1)."""
    from capability_probe.errors import DriverUnavailable

    try:
        from gpubackend.paths import gles31 as mod

        mod.device_and_programs()
    except DriverUnavailable as exc:
        pytest.skip(f"no GL ES 3.1 context on this machine: {exc}")
    return mod
