import os
import tempfile

import pytest

# Verdicts and program binaries of a test run go to a private cache, so a stale verdict from
# an earlier version or a fault-injection test never leaks into another run.
os.environ.setdefault("GPUBACKEND_CACHE_DIR", tempfile.mkdtemp(prefix="gpubackend-test-cache-"))
os.environ.pop("GPUBACKEND_FAULT", None)
os.environ.pop("GPUBACKEND_PATH", None)
os.environ.pop("GPUBACKEND_DISABLE", None)


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
