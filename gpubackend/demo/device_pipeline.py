"""The demo's frame on the GPU from capture to composite (``--device-resident``, gles3 / gles31).

Per frame: the RGB frame is uploaded once into a texture of the session's GL context; a shader
resizes it into the model's input texture (RGB in [0, 1], mipmapped so the downscale averages
like INTER_AREA); the session reads that texture as its input on the device
(:meth:`gpubackend.Session.tensor_from_gl_texture`) and leaves the mask on the device
(``run_resident``); a second shader upsamples the mask (bilinear), optionally smooths it over
time, and composites (overlay / blur / replace) into an output texture. Only when a video is
written is that texture read back (one download per frame); otherwise the frame never returns
to the CPU. Every GL call runs where the session's GL objects live (``Session.on_device``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import shaders
from .processing import MODES, TINT_RGB, TINT_STRENGTH

DEVICE_PATHS = ("gles3", "gles31")  # paths whose device tensors take and give GL textures


@dataclass
class Transfers:
    """Host<->device traffic of the pipeline's own steps and of the inference, summed."""

    uploads: int = 0
    upload_bytes: int = 0
    downloads: int = 0
    download_bytes: int = 0
    frames: int = 0
    inference: dict[str, int] = field(default_factory=lambda: {"uploads": 0, "downloads": 0})

    def per_frame(self) -> dict[str, float]:
        n = max(1, self.frames)
        return {"uploads": self.uploads / n, "upload_bytes": self.upload_bytes / n,
                "downloads": self.downloads / n, "download_bytes": self.download_bytes / n,
                "inference_uploads": self.inference["uploads"] / n,
                "inference_downloads": self.inference["downloads"] / n}


class DeviceFramePipeline:
    """Frames in, composited frames out, on ``session``'s GL context (gles3 or gles31)."""

    def __init__(self, session: Any, width: int, height: int, mode: str, background: np.ndarray | None = None,
                 smoothing: float = 0.0):
        if session.path not in DEVICE_PATHS:
            raise ValueError(f"the device-resident pipeline needs a {' or '.join(DEVICE_PATHS)} session, "
                             f"not {session.path}")
        self.session = session
        self.width, self.height = width, height
        self.mode = mode
        self.alpha = 1.0 if smoothing <= 0.0 else smoothing
        self.input_name = session.input_names[0]
        self.output_name = session.output_names[0]
        shape = session.input_shape(self.input_name) or ()
        if len(shape) != 4 or shape[1] != 3 or None in shape:
            raise ValueError(f"the model input {self.input_name!r} has shape {list(shape)}; the demo feeds "
                             "(1, 3, H, W) (give symbolic sizes with --shape NAME=1x3xHxW)")
        self.model_h, self.model_w = int(shape[2]), int(shape[3])
        self.transfers = Transfers()
        self._mask: Any = None  # the DeviceTensor the session writes every frame
        self._state: list[Any] = []  # smoothing: two mask-size textures, ping-pong
        self._have_state = False
        session.on_device(self._setup, background)
        self.input_tensor = session.tensor_from_gl_texture(self.input_tex, self.input_name)

    # ---- on the device ---------------------------------------------------------------------
    def _setup(self, background: np.ndarray | None) -> None:
        import moderngl

        ctx = self.ctx = self.session.gl_context()
        self.frame_tex = ctx.texture((self.width, self.height), 3, dtype="f1")
        self.frame_tex.filter = (moderngl.LINEAR_MIPMAP_LINEAR, moderngl.LINEAR)
        self.frame_tex.repeat_x = self.frame_tex.repeat_y = False
        self.input_tex = ctx.texture((self.model_w, self.model_h), 4, dtype="f4")
        self.input_tex.filter = (moderngl.NEAREST, moderngl.NEAREST)
        self.input_fbo = ctx.framebuffer(color_attachments=[self.input_tex])
        self.out_tex = ctx.texture((self.width, self.height), 4, dtype="f1")
        self.out_fbo = ctx.framebuffer(color_attachments=[self.out_tex])
        self.bg_tex = ctx.texture((self.width, self.height), 3, dtype="f1")
        self.bg_tex.repeat_x = self.bg_tex.repeat_y = False
        if background is not None:
            self.bg_tex.write(np.ascontiguousarray(background, np.uint8).tobytes())
        vertex = shaders.source("demo/fullscreen.vert", "300 es")
        self.preprocess, self.composite, self.smooth = (
            ctx.program(vertex_shader=vertex, fragment_shader=shaders.source(f"demo/{name}.frag", "300 es"))
            for name in ("preprocess", "device_composite", "smooth"))
        self._vaos = {id(p): ctx.vertex_array(p, []) for p in (self.preprocess, self.composite, self.smooth)}

    def _draw(self, prog: Any, fbo: Any, size: tuple[int, int]) -> None:
        fbo.use()
        fbo.viewport = (0, 0, *size)
        self._vaos[id(prog)].render(mode=4, vertices=3)

    def _prepare(self, image: np.ndarray) -> None:
        data = np.ascontiguousarray(image, np.uint8)
        self.frame_tex.write(data.tobytes())  # the frame's one upload
        self.transfers.uploads += 1
        self.transfers.upload_bytes += data.nbytes
        self.frame_tex.build_mipmaps()
        self.frame_tex.use(location=0)
        self.preprocess["frame_tex"].value = 0
        self.preprocess["out_size"].value = (float(self.model_w), float(self.model_h))
        self._draw(self.preprocess, self.input_fbo, (self.model_w, self.model_h))

    def _finish(self, readback: bool) -> np.ndarray | None:
        mask_tex = self._mask.texture()
        if self.alpha < 1.0:
            mask_tex = self._smoothed(mask_tex)
        prog = self.composite
        self.frame_tex.use(location=0)
        mask_tex.use(location=1)
        self.bg_tex.use(location=2)
        for name, unit in (("frame_tex", 0), ("mask_tex", 1), ("bg_tex", 2)):
            prog[name].value = unit
        prog["mask_size"].value = (self.model_w, self.model_h)
        prog["mode"].value = MODES.index(self.mode)
        prog["tint"].value = tuple(c / 255.0 for c in TINT_RGB)
        prog["strength"].value = TINT_STRENGTH
        prog["out_size"].value = (float(self.width), float(self.height))
        prog["texel"].value = (1.0 / self.width, 1.0 / self.height)
        self._draw(prog, self.out_fbo, (self.width, self.height))
        if not readback:
            return None
        # the one download, for the video writer (RGBA: the read format every ES driver accepts)
        raw = self.out_fbo.read(components=4, alignment=1)
        self.transfers.downloads += 1
        self.transfers.download_bytes += len(raw)
        return np.frombuffer(raw, np.uint8).reshape(self.height, self.width, 4)[:, :, :3]

    def _smoothed(self, mask_tex: Any) -> Any:
        import moderngl

        if not self._state:
            for _ in range(2):
                t = self.ctx.texture((self.model_w, self.model_h), 4, dtype="f4")
                t.filter = (moderngl.NEAREST, moderngl.NEAREST)
                self._state.append((t, self.ctx.framebuffer(color_attachments=[t])))
        (prev, _), (dst, fbo) = self._state
        mask_tex.use(location=0)
        prev.use(location=1)
        self.smooth["mask_tex"].value = 0
        self.smooth["prev_tex"].value = 1
        self.smooth["alpha"].value = self.alpha if self._have_state else 1.0
        self._draw(self.smooth, fbo, (self.model_w, self.model_h))
        self._have_state = True
        self._state.reverse()
        return dst

    # ---- the caller's thread --------------------------------------------------------------
    def process(self, image: np.ndarray, readback: bool) -> np.ndarray | None:
        """Composite one RGB uint8 frame; the composited RGB frame when ``readback``, else None."""
        sess = self.session
        sess.on_device(self._prepare, image)
        (self._mask,) = sess.run_resident({self.input_name: self.input_tensor}, [self.output_name],
                                          {self.output_name: self._mask})
        if not hasattr(self._mask, "texture"):
            raise RuntimeError(f"the model output {self.output_name!r} was made on the CPU; "
                               "the device-resident pipeline needs it on the GPU")
        stats = sess.stats
        self.transfers.uploads += stats.uploads
        self.transfers.upload_bytes += stats.upload_bytes
        self.transfers.downloads += stats.downloads
        self.transfers.download_bytes += stats.download_bytes
        self.transfers.inference["uploads"] += stats.uploads
        self.transfers.inference["downloads"] += stats.downloads
        self.transfers.frames += 1
        return sess.on_device(self._finish, readback)

    def reset(self) -> None:
        self._have_state = False

    def close(self) -> None:
        def release() -> None:
            for obj in (*self._vaos.values(), self.preprocess, self.composite, self.smooth, self.input_fbo,
                        self.out_fbo, self.frame_tex, self.input_tex, self.out_tex, self.bg_tex,
                        *(o for pair in self._state for o in pair)):
                obj.release()
            self._state = []

        if self._mask is not None and hasattr(self._mask, "close"):
            self._mask.close()
        self.session.on_device(release)
