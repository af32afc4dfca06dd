"""``gpubackend tune``'s measurement: for each tuning unit a model uses on a path, one session per
variant (that unit forced to it, everything else as tuned), run interleaved round after round
(A/B/C, A/B/C, ...: drift and load hit every variant alike), per-node seconds from the profiled
runs; per shape class the variant with the least summed median time is stored for this driver."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import tuning


def tune_model(model: str | bytes, path: str, precision: str = "fp32", rounds: int = 5,
               input_shapes: dict[str, tuple[int, ...]] | None = None, write: bool = True) -> list[dict[str, Any]]:
    """One row per (unit, shape class) the model runs on ``path``: the nodes, each variant's
    summed median seconds, the best and the default; stored in the tuning file when ``write``."""
    import gpubackend

    from .runner import make_inputs

    data = model if isinstance(model, bytes) else open(model, "rb").read()
    feeds = make_inputs(data, input_shapes=input_shapes)
    table = tuning.load(path, gpubackend.probe().fingerprint)
    rows: list[dict[str, Any]] = []
    for unit, spec in tuning.units().items():
        sessions: dict[str, Any] = {}
        classes: dict[str, set[str]] = {}  # shape class -> nodes
        try:
            for v in spec.variants:
                with tuning.forced(**{unit: v.name}), tuning.recording() as seen:
                    sess = gpubackend.Session(data, path=path, precision=precision, input_shapes=input_shapes)
                    sessions[v.name] = sess
                    sess.run(feeds)  # generates and compiles every kernel while the variant is forced
                placed = {n for n, k in sess.placement.items() if k == path}
                for node, u, cls, _ in seen:
                    if u == unit and node in placed:
                        classes.setdefault(cls, set()).add(node)
                if not classes:
                    break  # the model runs no kernel of this unit on this path
            if not classes:
                continue
            samples: dict[str, dict[str, list[float]]] = {v: {} for v in sessions}
            for _ in range(rounds):
                for name, sess in sessions.items():
                    sess.run(feeds, profile=True)
                    for node, secs in sess.stats.node_seconds.items():
                        samples[name].setdefault(node, []).append(secs)
        finally:
            for sess in sessions.values():
                sess.close()
        for cls, nodes in sorted(classes.items()):
            totals = {v: float(sum(np.median(samples[v][n]) for n in nodes if samples[v].get(n)))
                      for v in sessions}
            best = min(totals, key=lambda v: totals[v])
            default = spec.default_for(table.device_class).name
            row = {"path": path, "unit": unit, "shape_class": cls, "nodes": sorted(nodes), "seconds": totals,
                   "best": best, "default": default,
                   "speedup": totals[default] / totals[best] if totals[best] > 0 else 1.0}
            if write and table.fingerprint_id:
                tuning.store(table, unit, cls, best, totals, note=f"{len(nodes)} node(s), {rounds} rounds")
            row["stored"] = bool(write and table.fingerprint_id)
            rows.append(row)
    return rows
