"""``gpubackend segment --ray``: the same work items through Ray Data.

The input files become a dataset (``ray.data.from_items``; one row per image or video, so a video's
frames are decoded, segmented and encoded by one worker in order), and ``map_batches`` runs them
on a pool of ``SegmentActor`` actors, each holding one Segmenter (one Session, one probe per worker
process). Outputs are written by the actor under ``.partial`` names and renamed when complete, so
an actor that dies mid-item leaves no output that looks finished; Ray restarts the actor and runs
the item again (``max_restarts`` / ``max_task_retries`` unlimited).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GpuBackendError
from .segment import ItemResult, SegmentConfig, Segmenter, WorkItem, process_item

# Test hook: the first actor to start an item while this file does not exist creates it and kills its
# own process with SIGKILL, as a crashed worker would die.
KILL_ONCE_ENV = "GPUBACKEND_SEGMENT_KILL_ONCE"


class SegmentActor:
    def __init__(self, cfg: dict[str, Any], out_dir: str) -> None:
        cfg = dict(cfg)
        for key in ("size", "mean", "std", "outputs"):
            if cfg.get(key) is not None:
                cfg[key] = tuple(cfg[key])
        self.seg = Segmenter(SegmentConfig(**cfg))
        self.out_dir = Path(out_dir)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        records = []
        for source, rel, kind in zip(batch["source"], batch["rel"], batch["kind"]):
            marker = os.environ.get(KILL_ONCE_ENV)
            if marker and not os.path.exists(marker):
                Path(marker).write_text(self.worker)
                os.kill(os.getpid(), signal.SIGKILL)
            res = process_item(self.seg, WorkItem(str(source), str(rel), str(kind)), self.out_dir)
            res.worker = self.worker
            records.append(json.dumps(asdict(res)))
        return {"record": np.array(records, dtype=object)}


def run_ray(cfg: SegmentConfig, todo: list[WorkItem], out_dir: Path, address: str | None, workers: int | None,
            progress: bool) -> list[ItemResult]:
    try:
        import ray
    except ImportError as exc:
        raise GpuBackendError("--ray needs Ray: pip install 'gpubackend[scale]'") from exc
    if not ray.is_initialized():
        try:
            ray.init(address=address or None, log_to_driver=False, include_dashboard=False, ignore_reinit_error=True)
        except Exception as exc:  # Ray raises plain Exception / ConnectionError for a cluster it cannot reach
            raise GpuBackendError(f"cannot start or join Ray at {address or 'a new local cluster'}: {exc}") from exc
    # The workers see the driver's GPUBACKEND_* settings (cache dir, disabled paths, ...).
    env = {k: v for k, v in os.environ.items() if k.startswith("GPUBACKEND_")}
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    n = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    n = max(1, min(n, len(todo)))
    ds = ray.data.from_items([{"source": i.source, "rel": i.rel, "kind": i.kind} for i in todo],
                             override_num_blocks=len(todo))
    out = ds.map_batches(
        SegmentActor,
        fn_constructor_kwargs={"cfg": asdict(cfg), "out_dir": str(out_dir.resolve())},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=n),
        num_cpus=1,
        max_restarts=-1,
        max_task_retries=-1,
        runtime_env={"env_vars": env},
    )
    results = []
    for row in out.iter_rows():
        d = json.loads(row["record"])
        results.append(ItemResult(**d))
    if progress:
        print(f"ray: {len(results)} item(s) on {n} worker(s)", file=sys.stderr)
    return results
