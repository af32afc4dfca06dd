"""The measured basis for ``path="auto"``: which verified path was fastest for a model on this
device, as recorded by ``gpubackend bench MODEL --record``.

Records live in ``$GPUBACKEND_CACHE_DIR/bench/measured.json`` next to the probe's verdicts,
keyed by the driver fingerprint (so a driver or package update forgets them), the model's
SHA-256 and the precision. :func:`measured_choice` only reads that file: it never runs a
benchmark, so ``Session(path="auto")`` stays cheap."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FILE_NAME = "measured.json"
FORMAT = 1


def measurements_file() -> Path:
    from capability_probe.cache import cache_dir

    return cache_dir() / "bench" / FILE_NAME


def fingerprint_key(report: Any) -> str:
    """A short hash of the probe report's driver fingerprint (vendor, renderer, versions, package)."""
    fp = getattr(report, "fingerprint", None) or {}
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_key(model: bytes | Any) -> str:
    """A hash of the model's canonical serialisation, so a file's bytes and the same model loaded
    into a ModelProto (as a Session holds it) give the same key."""
    import onnx

    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load_model_from_string(bytes(model))
        except Exception:  # not a model: key on the raw bytes
            return hashlib.sha256(bytes(model)).hexdigest()
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def _entry_key(model_bytes: Any, report: Any, precision: str) -> str:
    return f"{fingerprint_key(report)}:{model_key(model_bytes)}:{precision}"


def _load(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
        return {}
    return data


def record_measurement(model_bytes: Any, report: Any, p50_seconds: Mapping[str, float],
                       precision: str = "fp32", runs: int = 0, model_name: str = "") -> Path:
    """Store the steady-state medians (seconds) measured for each path (onnxruntime excluded)
    under this driver fingerprint and model; returns the file written. Atomic (write + rename)."""
    file = measurements_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    data = _load(file) or {"format": FORMAT, "entries": {}}
    data["entries"][_entry_key(model_bytes, report, precision)] = {
        "model": model_name,
        "precision": precision,
        "p50_s": {k: float(v) for k, v in p50_seconds.items() if k != "onnxruntime"},
        "runs": int(runs),
        "recorded_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".measured-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, file)
    return file


def measured_choice(model_bytes: Any, report: Any, precision: str = "fp32") -> tuple[str, str] | None:
    """``(path, reason)``: the fastest recorded path for this model and driver that the probe
    ``report`` still calls usable, or None when nothing was recorded. Reads the cache only."""
    entry = _load(measurements_file()).get("entries", {}).get(_entry_key(model_bytes, report, precision))
    if not entry or not entry.get("p50_s"):
        return None
    p50 = {k: float(v) for k, v in entry["p50_s"].items()}
    usable = {k: v for k, v in p50.items() if k == "cpu" or report.usable(k)}
    if not usable:
        return None
    best = min(usable, key=usable.__getitem__)
    others = ", ".join(f"{k} {1e3 * v:.3g} ms" for k, v in sorted(usable.items(), key=lambda kv: kv[1])
                       if k != best)
    dropped = sorted(set(p50) - set(usable))
    reason = (f"measured fastest for this model on this device: {best} p50 {1e3 * usable[best]:.3g} ms"
              + (f" (vs {others})" if others else "")
              + f"; recorded by `gpubackend bench --record` at {entry.get('recorded_at', '?')}"
              + (f"; ignoring {', '.join(dropped)} (no longer verified)" if dropped else ""))
    return best, reason
