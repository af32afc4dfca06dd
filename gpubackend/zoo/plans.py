"""Calibrated fp16 precision plans shipped for the zoo models whose fp16 error needs one, one per
model and input size (a plan holds across images, not across sizes). ``tools/zoo_fp16_plans.py``
writes them with :func:`gpubackend.fp16_calibration.calibrate_verified`; docs/zoo.md has the
errors with and without them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .manifest import ZooModel

PLANS_DIR = Path(__file__).with_name("fp16_plans")


def plan_path(name: str, shape: Sequence[int]) -> Path:
    """Where the plan of model ``name`` at input ``shape`` lives (whether or not there is one)."""
    return PLANS_DIR / f"{name}-{'x'.join(map(str, shape))}.json"


def fp16_plan(model: ZooModel, small: bool = False) -> Path | None:
    """The shipped precision plan for ``model`` at its full (or ``small``) input size, if any."""
    path = plan_path(model.name, model.shape(small))
    return path if path.is_file() else None
