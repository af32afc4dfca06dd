"""Child process for cold and warm start: ``python -m gpubackend.bench.coldstart MODEL PATH
PRECISION [SHAPES_JSON]`` creates one session and runs it once, printing one JSON line with ``import_s``,
``probe_s`` (0 for cpu: the CPU path needs no probe), ``session_s`` (model load, planning,
shader compilation, weight packing), ``create_s`` (probe + session), ``first_run_s`` and the
path the session really chose. The parent picks the cache directory
(``GPUBACKEND_CACHE_DIR``, ``MESA_SHADER_CACHE_DIR``): empty for cold, reused for warm."""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    model, path, precision = args[:3]
    shapes = json.loads(args[3]) if len(args) > 3 else {}  # input name -> shape, from --shape
    t0 = time.perf_counter()
    import gpubackend

    from .runner import make_inputs

    t1 = time.perf_counter()
    probe_s = 0.0
    if path != "cpu":
        gpubackend.probe()
        probe_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    sess = gpubackend.Session(model, path=path, precision=precision, input_shapes=shapes)
    t3 = time.perf_counter()
    feeds = make_inputs(model, 0, shapes)
    t4 = time.perf_counter()
    sess.run(feeds)
    t5 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "probe_s": probe_s, "session_s": t3 - t2, "create_s": probe_s + t3 - t2,
                      "first_run_s": t5 - t4, "path": sess.path}))
    sess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
