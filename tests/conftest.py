import os
import tempfile

# Verdicts and program binaries of a test run go to a private cache, so a stale verdict from
# an earlier version or a fault-injection test never leaks into another run.
os.environ.setdefault("GPUBACKEND_CACHE_DIR", tempfile.mkdtemp(prefix="gpubackend-test-cache-"))
os.environ.pop("GPUBACKEND_FAULT", None)
os.environ.pop("GPUBACKEND_PATH", None)
os.environ.pop("GPUBACKEND_DISABLE", None)
