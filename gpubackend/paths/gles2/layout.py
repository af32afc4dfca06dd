"""Where each tensor element lives in its RGBA8 texture (docs/gles2_encoding.md).

A tensor is seen as 4-D ``(N, C, H, W)`` (lower ranks padded on the left with 1s, higher ranks
folded into N). Its elements are stored in C order; one texture row holds ``k`` consecutive
rows of W elements, ``k`` as small as lets the height fit under ``GL_MAX_TEXTURE_SIZE``. With
``pack`` 1 (fp32) a texel is one element; with ``pack`` 2 (fp16) a texel is two neighbours
along W, a row of odd W ending in a padding half. So texel ``(x, y)`` holds row
``r = y * k + x // Wt`` (``r = (n * C + c) * H + h``) and element(s) ``w = (x % Wt) * pack``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_ELEMENTS = 1 << 24  # every index stays an exact highp float


class LayoutError(ValueError):
    """The tensor does not fit a texture on this device."""


def dims4(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    s = tuple(int(d) for d in shape)
    if len(s) > 4:
        s = (int(np.prod(s[:-3])),) + s[-3:]
    s = (1,) * (4 - len(s)) + s
    return s  # type: ignore[return-value]


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]  # the tensor's own shape
    pack: int  # elements per texel: 1 (fp32) or 2 (fp16)
    k: int  # tensor rows per texture row
    max_size: int

    @staticmethod
    def of(shape: tuple[int, ...], pack: int, max_size: int) -> Layout:
        n, c, h, w = dims4(shape)
        if n * c * h * w == 0:
            raise LayoutError(f"empty tensor of shape {tuple(shape)}")
        rows = n * c * h
        wt = -(-w // pack)
        if n * c * h * wt * pack >= MAX_ELEMENTS:
            raise LayoutError(f"tensor of shape {tuple(shape)} has more than 2^24 elements")
        if wt > max_size:
            raise LayoutError(f"last dimension {w} needs {wt} texels, more than GL_MAX_TEXTURE_SIZE {max_size}")
        k = 1
        while -(-rows // k) > max_size:
            k += 1
            if k * wt > max_size:
                raise LayoutError(f"tensor of shape {tuple(shape)} does not fit a {max_size}^2 texture")
        return Layout(tuple(int(d) for d in shape), pack, k, max_size)

    @property
    def d4(self) -> tuple[int, int, int, int]:
        return dims4(self.shape)

    @property
    def wt(self) -> int:
        return -(-self.d4[3] // self.pack)

    @property
    def rows(self) -> int:
        n, c, h, _ = self.d4
        return n * c * h

    @property
    def size(self) -> tuple[int, int]:
        return self.k * self.wt, -(-self.rows // self.k)

    @property
    def nbytes(self) -> int:
        tw, th = self.size
        return tw * th * 4

    def to_bytes(self, a: np.ndarray) -> bytes:
        """Host array -> the texture's bytes (fp32: the float32 bytes as they are)."""
        n, c, h, w = self.d4
        a = np.asarray(a).reshape(self.rows, w)
        if self.pack == 2:
            if w % 2:
                a = np.concatenate([a, np.zeros((self.rows, 1), a.dtype)], axis=1)
            flat = a.astype(np.float16).reshape(-1)
        else:
            flat = a.astype(np.float32).reshape(-1)
        out = np.zeros(self.nbytes // flat.itemsize, flat.dtype)
        out[: flat.size] = flat
        return out.tobytes()

    def from_bytes(self, data: bytes | np.ndarray) -> np.ndarray:
        """The texture's bytes -> float32 host array of ``shape``."""
        n, c, h, w = self.d4
        dt = np.float16 if self.pack == 2 else np.float32
        flat = np.frombuffer(data, dtype=np.uint8).view(dt)
        rows = flat[: self.rows * self.wt * self.pack].reshape(self.rows, self.wt * self.pack)[:, :w]
        return rows.astype(np.float32).reshape(self.shape)
