"""Gemm and MatMul on NumPy's BLAS."""

from __future__ import annotations

import numpy as np

from ._registry import fail, half_via_float32, iattr, need, opt, register
from .elementwise import apply_activation


@register("Gemm")
@half_via_float32
def k_gemm(inputs: list, attrs: dict, opset: int) -> list:
    op = "Gemm"
    a = need(op, inputs, 0, "A")
    b = need(op, inputs, 1, "B")
    c = opt(inputs, 2)
    if a.ndim != 2 or b.ndim != 2:
        raise fail(op, f"A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    if b.dtype != a.dtype:
        b = b.astype(a.dtype)
    if iattr(attrs, "transA", 0):
        a = a.T
    if iattr(attrs, "transB", 0):
        b = b.T
    if a.shape[1] != b.shape[0]:
        raise fail(op, f"inner dimensions differ: A' is {a.shape}, B' is {b.shape}")
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    y = np.matmul(a, b)
    if alpha != 1.0:
        np.multiply(y, alpha, out=y, casting="unsafe")
    if c is not None and beta != 0.0:
        c = c.astype(y.dtype, copy=False)
        try:
            shape = np.broadcast_shapes(y.shape, c.shape)
        except ValueError as e:
            raise fail(op, f"C of shape {c.shape} does not broadcast to the output {y.shape}") from e
        if shape != y.shape:
            raise fail(op, f"C of shape {c.shape} does not broadcast to the output {y.shape}")
        if beta == 1.0:
            y += c
        else:
            y += c * y.dtype.type(beta)
    return [apply_activation(y, attrs.get("_act"))]


@register("MatMul")
@half_via_float32
def k_matmul(inputs: list, attrs: dict, opset: int) -> list:
    op = "MatMul"
    a = need(op, inputs, 0, "A")
    b = need(op, inputs, 1, "B")
    if a.ndim == 0 or b.ndim == 0:
        raise fail(op, "inputs must have rank >= 1")
    if b.dtype != a.dtype:
        b = b.astype(a.dtype)
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise fail(op, f"inner dimensions differ: {a.shape} @ {b.shape}")
    try:
        y = np.asarray(np.matmul(a, b))
    except ValueError as e:
        raise fail(op, f"batch dimensions of {a.shape} and {b.shape} do not broadcast") from e
    return [apply_activation(y, attrs.get("_act"))]
