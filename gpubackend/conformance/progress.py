"""A live progress bar on stderr: the current case and the running failure count. On a terminal it
redraws one line; otherwise it prints a line per tenth of the run and one per failure."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_decile = -1
        self._last_draw = 0.0
        self._failures = 0
        self._drawn = False

    def __call__(self, done: int, total: int, target: str, case: str, failures: int) -> None:
        if not self.enabled:
            return
        new_failure = failures > self._failures
        self._failures = failures
        if self.tty:
            now = time.monotonic()
            if new_failure:
                self._clear()
                self.stream.write(f"FAIL {target} {case}\n")
            if now - self._last_draw < 0.05 and done < total and not new_failure:
                return
            self._last_draw = now
            width = shutil.get_terminal_size((100, 20)).columns
            frac = done / total if total else 1.0
            bar = "#" * int(frac * 24)
            head = f"[{bar:<24}] {done}/{total} failures {failures}  {target} "
            room = max(10, width - len(head) - 1)
            name = case if len(case) <= room else "..." + case[-(room - 3):]
            self.stream.write("\r" + (head + name).ljust(width - 1)[: width - 1])
            self._drawn = True
        else:
            if new_failure:
                self.stream.write(f"FAIL {target} {case}\n")
            decile = int(10 * done / total) if total else 10
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(f"[{done}/{total}] {10 * decile}% failures {failures} (at {target} {case})\n")
        self.stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            width = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r" + " " * (width - 1) + "\r")

    def close(self) -> None:
        if self.enabled and self.tty:
            self._clear()
            self.stream.flush()
