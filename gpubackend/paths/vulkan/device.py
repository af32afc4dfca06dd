"""The one layer through which the Vulkan path talks to Kompute (``kp``): the manager, tensors,
algorithms from shipped SPIR-V, sequences and readbacks. Every driver call passes the
``capability_probe.faults`` hooks here, so injected faults strike this path like a real driver's.

kp 0.9 facts this layer encodes (measured here):

- ``mgr.algorithm(tensors, spirv, workgroups, spec, push)`` with NumPy ``uint32`` arrays passes
  both constant sets as raw 32-bit words. Its numpy overload picks the push type from the *spec*
  array's dtype, so both are always given as ``uint32``; float params are bit-cast into words
  (``params_words``) and the GLSL block declares them ``float``: the bytes are the same.
- Tensor ``i`` of an algorithm is descriptor binding ``i``; unused binding slots get a shared
  one-word dummy tensor.
- Specialisation constants 0, 1, 2 are the local size (``layout(local_size_x_id = 0, ...)``).
- ``OpAlgoDispatch.record`` puts a shader-write -> shader-read buffer barrier on every tensor of
  the algorithm before the dispatch, so dependent dispatches in one sequence are ordered without
  an explicit ``OpMemoryBarrier`` (0.9's Python binding does not expose one).
- ``tensor.data()`` is a writable NumPy view of the host staging memory: uploads write into it
  and ``OpTensorSyncDevice`` copies it to the device buffer; readbacks go the other way.
- Known gap: ``OpTensorSyncDevice`` records its staging->device copy with no transfer->compute
  barrier, and the dispatch barrier above only covers earlier shader writes. Lavapipe executes
  a command buffer in order, so this is exact here; a real GPU relies on its driver for the
  first dispatch after an upload (kp 0.9's Python binding offers no ``OpMemoryBarrier`` to add).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from capability_probe import contexts, faults
from capability_probe.errors import DeviceOutOfMemory, DriverError, DriverUnavailable, ShaderCompileError

KEY = "vulkan"
MAX_PUSH_BYTES = 128  # the Vulkan minimum for maxPushConstantsSize; lavapipe offers exactly this


def spirv_dir() -> Path:
    from gpubackend import shaders

    return Path(shaders.ROOT) / "spirv"


@cache
def load_spirv(name: str) -> bytes:
    """The shipped SPIR-V ``shaders/spirv/<name>`` (raises ShaderCompileError if absent)."""
    path = spirv_dir() / name
    if not path.is_file():
        raise ShaderCompileError(
            f"vulkan: no compiled SPIR-V {name!r} in {path.parent}; regenerate with "
            "`python -m gpubackend.shaders.build_spirv` (needs glslangValidator)", stage="spirv")
    data = path.read_bytes()
    if len(data) < 20 or len(data) % 4 or int.from_bytes(data[:4], "little") != 0x07230203:
        raise ShaderCompileError(f"vulkan: {path} is not a SPIR-V module", stage="spirv")
    return data


def params_words(values: Sequence[int | float | bool]) -> np.ndarray:
    """Push-constant words for scalar params in declaration order: ints as int32, floats bit-cast."""
    words = np.zeros(len(values), np.uint32)
    for i, v in enumerate(values):
        if isinstance(v, (bool, int, np.integer)):
            words[i] = np.array(int(v), np.int64).astype(np.int32).view(np.uint32)
        else:
            words[i] = np.array(float(v), np.float32).view(np.uint32)
    return words


def manager() -> Any:
    """The process-wide ``kp.Manager`` (made by the probe's contexts module)."""
    return contexts.kompute_manager(KEY)


class VkDevice:
    """Kompute as seen by the Vulkan path."""

    def __init__(self) -> None:
        try:
            import kp
        except Exception as exc:  # noqa: BLE001 - any import failure means "absent"
            raise DriverUnavailable(f"kp (Kompute) not importable: {exc}") from exc
        self.kp = kp
        self.mgr = manager()
        self._dummy: Any = None

    # ---- memory ------------------------------------------------------------------------
    def tensor(self, data: np.ndarray, device_only: bool = False) -> Any:
        """A kp tensor holding ``data`` (float32 or uint32, any shape, flattened) in its staging
        memory. ``device_only`` makes a storage tensor with no host copy (intermediates)."""
        arr = np.ascontiguousarray(data).reshape(-1)
        if arr.dtype not in (np.float32, np.uint32):
            raise TypeError(f"vulkan tensors are float32 or uint32 words, not {arr.dtype}")
        if arr.size == 0:
            arr = np.zeros(1, arr.dtype)
        faults.on_alloc(KEY, arr.nbytes)
        kind = self.kp.TensorTypes.storage if device_only else self.kp.TensorTypes.device
        try:
            return self.mgr.tensor_t(arr, kind)
        except Exception as exc:  # noqa: BLE001
            kind_of = DeviceOutOfMemory if "OutOf" in str(exc) else DriverError
            raise kind_of(f"vulkan: allocating a {arr.nbytes}-byte tensor failed: {exc}") from exc

    def dummy(self) -> Any:
        """The one-word tensor bound to binding slots a shader does not use."""
        if self._dummy is None:
            self._dummy = self.tensor(np.zeros(1, np.uint32))
        return self._dummy

    # ---- programs ----------------------------------------------------------------------
    def algorithm(self, tensors: Sequence[Any], spv: str, workgroups: Sequence[int],
                  local_size: Sequence[int], push: np.ndarray) -> Any:
        """An algorithm (pipeline) of the shipped ``spv`` over ``tensors`` (binding order)."""
        faults.on_compile(KEY, "spirv")
        push = np.ascontiguousarray(push, np.uint32)
        if push.nbytes > MAX_PUSH_BYTES:
            raise ShaderCompileError(f"vulkan: {spv} needs {push.nbytes} bytes of push constants "
                                     f"(limit {MAX_PUSH_BYTES})", stage="spirv")
        if push.size == 0:
            push = np.zeros(1, np.uint32)
        spec = np.array([max(1, int(v)) for v in (list(local_size) + [1, 1, 1])[:3]], np.uint32)
        wg = [max(1, int(v)) for v in (list(workgroups) + [1, 1, 1])[:3]]
        code = load_spirv(spv)
        try:
            return self.mgr.algorithm(list(tensors), code, wg, spec, push)
        except Exception as exc:  # noqa: BLE001
            raise ShaderCompileError(f"vulkan: creating the pipeline for {spv} failed: {exc}",
                                     stage="spirv", log=str(exc)) from exc

    # ---- execution ---------------------------------------------------------------------
    def sequence(self) -> Any:
        return self.mgr.sequence()

    def sync_device(self, tensors: Sequence[Any]) -> Any:
        return self.kp.OpTensorSyncDevice(list(tensors))

    def sync_local(self, tensors: Sequence[Any]) -> Any:
        return self.kp.OpTensorSyncLocal(list(tensors))

    def dispatch_op(self, algo: Any) -> Any:
        return self.kp.OpAlgoDispatch(algo)

    def eval(self, seq: Any) -> None:
        """Submit a recorded sequence and wait (the dispatch choke point)."""
        faults.on_dispatch(KEY)
        try:
            seq.eval()
        except Exception as exc:  # noqa: BLE001
            kind_of = DeviceOutOfMemory if "OutOf" in str(exc) else DriverError
            raise kind_of(f"vulkan: sequence evaluation failed: {exc}") from exc

    def staged(self, nbytes: int) -> None:
        """Call before each run's host->device transfer: a submission can run out of device
        memory at run time (VK_ERROR_OUT_OF_DEVICE_MEMORY), not only at allocation."""
        faults.on_alloc(KEY, nbytes)

    def readback(self, array: np.ndarray) -> np.ndarray:
        """Pass every array read back from the device through here."""
        return faults.on_readback(KEY, array)


def properties() -> dict[str, Any]:
    """The Vulkan device's properties as Kompute reports them (for the probe)."""
    return dict(manager().get_device_properties())
