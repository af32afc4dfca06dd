"""How a tensor lives in gles3 textures.

A tensor is viewed as NCHW (see :func:`to4d`). Its channels are packed four to a texel into
``S = ceil(C / 4)`` slices. The slices are spread over ``R`` planes (one texture each, R = how
many render targets the producing draw writes): slice ``s`` is in plane ``s % R`` at slot
``g = s // R``. Each plane holds ``N * G`` tiles of W x H texels (tile ``t = n * G + g``), laid out
row-major ``cols`` tiles wide. Channels past C and slices past S are zero."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Rank-3 (and rank > 4) views fold a last axis longer than this into rows (4-D tensors keep their
# H and W: convolutions index them). ES 3.0 guarantees 2048-texel textures; every driver we
# target allows 4096 or more, and a vocabulary axis (18710 in PP-OCRv6) exceeds even 16384.
MAX_ROW = 4096


def _rows(length: int) -> tuple[int, int]:
    """(rows, width) with rows * width == length and width <= MAX_ROW where a divisor allows."""
    if length <= MAX_ROW:
        return 1, length
    for rows in range(-(-length // MAX_ROW), length + 1):
        if length % rows == 0:
            return rows, length // rows
    return 1, length  # unreachable: rows == length divides


def to4d(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The NCHW view of an ONNX shape: a row-major reshape, so an element's linear index is the
    same in both. [N,C,H,W] as is; [N,C,D1..Dk,W] -> (N,C,D1*..*Dk*f,W/f); [N,C,L] -> (N,C,f,L/f)
    (f = 1 unless the last axis is longer than MAX_ROW); [N,C] -> (N,C,1,1); [C] -> (1,C,1,1)."""
    s = tuple(int(d) for d in shape)
    if len(s) == 3 or len(s) > 4:
        rows, width = _rows(s[-1])
        return (s[0], s[1], math.prod(s[2:-1]) * rows, width)
    if len(s) == 4:
        return s  # type: ignore[return-value]
    if len(s) == 2:
        return (s[0], s[1], 1, 1)
    if len(s) == 1:
        return (1, s[0], 1, 1)
    return (1, 1, 1, 1)


@dataclass(frozen=True)
class TexLayout:
    n: int
    c: int
    h: int
    w: int
    planes: int  # R
    cols: int

    @property
    def slices(self) -> int:
        return (self.c + 3) // 4

    @property
    def slots(self) -> int:  # G
        return -(-self.slices // self.planes)

    @property
    def tiles(self) -> int:
        return self.n * self.slots

    @property
    def rows(self) -> int:
        return -(-self.tiles // self.cols)

    @property
    def size(self) -> tuple[int, int]:
        """Texture (width, height) of each plane."""
        return (self.cols * self.w, self.rows * self.h)

    def tile_origin(self, n: int, g: int) -> tuple[int, int]:
        t = n * self.slots + g
        return ((t % self.cols) * self.w, (t // self.cols) * self.h)

    def defines(self, prefix: str) -> dict[str, int]:
        return {f"{prefix}_N": self.n, f"{prefix}_C": self.c, f"{prefix}_S": self.slices, f"{prefix}_G": self.slots,
                f"{prefix}_H": self.h, f"{prefix}_W": self.w, f"{prefix}_R": self.planes, f"{prefix}_COLS": self.cols}


def plan_layout(shape4: tuple[int, int, int, int], max_planes: int, max_size: int) -> TexLayout | str:
    """A layout for an NCHW shape, or the reason none fits in ``max_size`` x ``max_size`` textures."""
    n, c, h, w = shape4
    if min(shape4) <= 0:
        return f"empty tensor {shape4}"
    if h > max_size or w > max_size:
        return f"spatial size {h}x{w} exceeds GL_MAX_TEXTURE_SIZE {max_size}"
    planes = max(1, min(max_planes, (c + 3) // 4))
    tiles = n * -(-((c + 3) // 4) // planes)
    # Near-square textures, as wide as allowed when they must wrap.
    cols = max(1, min(tiles, max_size // w, math.ceil(math.sqrt(tiles * h / w))))
    rows = -(-tiles // cols)
    if rows * h > max_size:
        return (f"tensor {shape4} needs {tiles} tiles of {w}x{h} per plane: more than a "
                f"{max_size}x{max_size} texture holds")
    return TexLayout(n, c, h, w, planes, cols)


def pack(x: np.ndarray, lay: TexLayout, dtype: np.dtype) -> list[np.ndarray]:
    """NCHW array -> one (height, width, 4) array per plane."""
    n, c, h, w = lay.n, lay.c, lay.h, lay.w
    r, g = lay.planes, lay.slots
    buf = np.zeros((n, g * r * 4, h, w), dtype=dtype)
    buf[:, :c] = x.reshape(n, c, h, w)
    # (n, g, r, 4, h, w) -> per plane: tiles (n*g) of (h, w, 4)
    buf = buf.reshape(n, g, r, 4, h, w).transpose(2, 0, 1, 4, 5, 3).reshape(r, n * g, h, w, 4)
    pad = lay.rows * lay.cols - n * g
    if pad:
        buf = np.concatenate([buf, np.zeros((r, pad, h, w, 4), dtype)], axis=1)
    grid = buf.reshape(r, lay.rows, lay.cols, h, w, 4).transpose(0, 1, 3, 2, 4, 5)
    grid = grid.reshape(r, lay.rows * h, lay.cols * w, 4)
    return [np.ascontiguousarray(grid[p]) for p in range(r)]


def unpack(planes: list[np.ndarray], lay: TexLayout) -> np.ndarray:
    """One (height, width, 4) array per plane -> NCHW float32 array."""
    n, c, h, w = lay.n, lay.c, lay.h, lay.w
    r, g = lay.planes, lay.slots
    grid = np.stack([p.reshape(lay.rows * h, lay.cols * w, 4) for p in planes])
    tiles = grid.reshape(r, lay.rows, h, lay.cols, w, 4).transpose(0, 1, 3, 2, 4, 5)
    tiles = tiles.reshape(r, lay.rows * lay.cols, h, w, 4)[:, : n * g]
    x = tiles.reshape(r, n, g, h, w, 4).transpose(1, 2, 0, 5, 3, 4).reshape(n, g * r * 4, h, w)
    return np.ascontiguousarray(x[:, :c], dtype=np.float32)
