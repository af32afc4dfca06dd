"""Compute kernels shared by the ``gles31`` and ``vulkan`` paths: pure, API-free generators
(TFLite's ``GenerateCode``) that turn one graph node into frozen :class:`Kernel` records.

A record names a GLSL file under ``shaders/compute/``, its few compile-time variant defines
(``FP16``, ``ACT``, blocking), an ordered list of scalar parameters (every shape-dependent value:
GL puts them in a std140 uniform buffer, Vulkan in push constants; both lay out 4-byte scalars
identically), the storage-buffer bindings in binding order (runtime tensors and packed constant
tensors), the workgroup counts and the local size. The runtimes do every driver call.

Layout on the device: every float tensor of rank <= 4 is *packed*: its packed axis (axis 1,
channels, for rank 4 NCHW, else the last axis) is innermost and grouped into vec4s zero-padded
to a multiple of 4; the other axes keep their order (rank 4 -> PHWC4, i.e. N,H,W,C4). fp16
storage keeps the same layout with each vec4 as 4 halves (two ``packHalf2x16`` words). Lanes past
the channel count are always written as exact zeros.

Declining is normal control flow: a generator raises :class:`Decline` with the reason. The
candidates per op type are :data:`REGISTRY`, run by the shared contract (``kernel_contract``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from gpubackend import shaders

from .. import ops, tuning
from ..graph import Graph, Node
from ..ops import elementwise as ew
from ..ops.elementwise import ACT_CODES
from .kernel_contract import Generated, KernelRecord, KernelRegistry, non_float32
from .kernel_contract import generate as _generate

PRECISIONS = ("fp32", "fp16")
# Blocking factors of conv and gemm are tuning variants (output pixels/rows x output-channel blocks
# of 4 per invocation, workgroup size): the per-device tuning (gpubackend.tuning) picks one per
# layer shape class; these are the defaults without a tuning record.
CONV_BX, CONV_CB = 8, 2
GEMM_PX, GEMM_CB = 8, 2


def _blocking_variants(px: str, subgroup: bool = False) -> list[tuning.Variant]:
    out = [tuning.Variant(f"{px.lower()}{b}cb{c}", ((px, b), ("CB", c)))
           for b, c in ((8, 2), (4, 4), (4, 2), (8, 4), (16, 1))]
    out += [tuning.Variant(f"{px.lower()}8cb2w16", ((px, 8), ("CB", 2)), local=16)]
    if subgroup:  # SG: each weight vec4 loaded by one of 8 lanes and broadcast (Vulkan; GL ignores SG)
        out += [tuning.Variant(f"{px.lower()}{b}cb{c}sg", ((px, b), ("CB", c), ("SG", 1)))
                for b, c in ((8, 2), (8, 4), (4, 4))]
    # TEX: the weights (TEXW) and the input (TEXX) read through buffer textures (GL ES only; the
    # Vulkan build drops both defines)
    out += [tuning.Variant(f"{px.lower()}{b}cb{c}tex", ((px, b), ("CB", c), ("TEXW", 1), ("TEXX", 1)))
            for b, c in ((4, 4), (8, 2), (16, 1))]
    return out


# STRIP (conv only): a 3x3 stride-1/2 undilated layer loads each input row strip once for its 3
# horizontal taps (conv.comp's K3S); any other layer runs the same blocking without it.
STRIP_VARIANTS = [tuning.Variant("bx8cb2k3", (("BX", 8), ("CB", 2), ("STRIP", 1))),
                  tuning.Variant("bx4cb2k3", (("BX", 4), ("CB", 2), ("STRIP", 1))),
                  tuning.Variant("bx16cb1k3", (("BX", 16), ("CB", 1), ("STRIP", 1))),
                  tuning.Variant("bx4cb4sgk3", (("BX", 4), ("CB", 4), ("SG", 1), ("STRIP", 1))),
                  tuning.Variant("bx8cb4sgk3", (("BX", 8), ("CB", 4), ("SG", 1), ("STRIP", 1)))]


def _strip_stride(g: dict) -> int:
    """conv.comp's K3S for this geometry: the stride of a 3x3 undilated conv with stride 1 or 2
    in both axes, else 0 (no strip)."""
    square = (g["kh"], g["kw"], g["dh"], g["dw"]) == (3, 3, 1, 1) and g["sh"] == g["sw"]
    return g["sh"] if square and g["sh"] in (1, 2) else 0


def shader_blockings(defines: tuple[tuple[str, int], ...]) -> list[tuple[tuple[str, int], ...]]:
    """The shader defines a variant's ``defines`` compile to: a STRIP variant is its blocking
    without the strip (layers it does not fit) and with K3S = 1 and 2."""
    d = dict(defines)
    if not d.pop("STRIP", 0):
        return [defines]
    return [tuple(sorted(d.items()))] + [tuple(sorted({**d, "K3S": s}.items())) for s in (1, 2)]


# lavapipe and llvmpipe compile every storage-buffer load into a loop over the SIMD lanes, so the
# subgroup broadcast of the weights nearly halves the conv and gemm time on lavapipe (the strip of
# 3x3 layers cuts their input loads too), and reading weights and input through buffer textures
# (vectorised fetches) divides it by 8-10 on llvmpipe's GL ES (docs/performance.md, "What lavapipe
# compiles the kernels into")
#
# First use times a few variants per device class (each is one more compile, 0.1-6 s on a software
# driver with a cold shader cache: the 8x4 blockings are the slow ones to compile and were never
# the fastest): on llvmpipe the buffer-texture family, 2-3x faster than any storage-buffer variant
# on both CPUs measured; on lavapipe, since the 64-bit loads ("loads" below; WLOAD4 reads a block's
# weights in two accesses, which SG variants do not use), the Intel Xeon's best, bx4cb2 / px4cb2
# (1.2-3.2x the old SG defaults on 43 of 48 yolov8n and mobilenetv3 layer classes, `gpubackend tune
# --dry-run`), against the AMD EPYC's old SG defaults and one more plain blocking; elsewhere the
# plain blockings and the narrow workgroup. Thirteenth session, on lavapipe: the strip's three taps
# are written out (conv.comp; under a loop lavapipe indexed the strip lane by lane and every k3
# variant lost), and the register-blocking loops carry UNROLL (compute/prelude.glsl): with an
# activation fused, the 8-pixel blockings ran 1.5-2x slower than without until their loops were
# forced to unroll (a rolled loop indexes the accumulators in memory). Since then bx8cb2k3 and
# px8cb2 are the fastest conv and gemm defaults there: whole models 1.07-1.26x the eleventh
# session's bx4cb2 / px4cb2 (interleaved, quiet); px8cb4 (128 accumulators, 3x slower before the
# unroll) is faster still on the gemms: MobileNetV2-like 1.08x, yolov8n 1.09x, selfie 1.03x,
# matmul 512^3 1.24x, 1x1 conv 128ch 1.14x.
tuning.register("conv", _blocking_variants("BX", subgroup=True) + STRIP_VARIANTS,
                {"*": f"bx{CONV_BX}cb{CONV_CB}", "lavapipe": "bx8cb2k3", "llvmpipe": "bx4cb4tex"},
                first_use={"*": ("bx8cb2", "bx4cb4", "bx16cb1", "bx8cb2w16"),
                           "lavapipe": ("bx4cb2k3", "bx16cb1k3"),
                           "llvmpipe": ("bx8cb2tex",)})


def _gemm_class(ci: int, co: int, rows: int) -> str:
    return f"ci{tuning.bucket(ci)} co{tuning.bucket(co)} rows{tuning.bucket(rows)}"


FEW_ROWS = 16


def _gemm_kind(shape_class: str) -> str:
    """"rows<=16" for a gemm of few rows (fully connected layers, squeeze-excite 1x1 convs on a
    pooled pixel), where blocking rows wastes lanes: on llvmpipe px4cb4tex ran mtcnn_onet's
    1x1152x256 layer in 1.0 ms and px8cb2tex, the best on many rows, in 1.7 ms."""
    rows = re.search(r"\brows(\d+)$", shape_class)
    return f"rows<={FEW_ROWS}" if rows and int(rows.group(1)) <= FEW_ROWS else ""


tuning.register("gemm", _blocking_variants("PX", subgroup=True),
                {"*": f"px{GEMM_PX}cb{GEMM_CB}", "lavapipe": "px8cb4", "llvmpipe": "px4cb4tex"},
                first_use={"*": ("px8cb2", "px4cb4", "px16cb1", "px8cb2w16"),
                           "lavapipe": ("px8cb2", "px4cb4"),
                           "llvmpipe": ("px8cb2tex",)},
                kind_of=_gemm_kind)
# reads (depthwise, ConvTranspose, Resize, pooling, Concat): input and weights (Resize: its tap
# table) as storage buffers, or through buffer textures (GL ES; the Vulkan build drops the
# defines): selfie 1.13x (depthwise) and 1.07x (its ConvTranspose), a 16-channel 128^2 -> 256^2
# Resize 1.8x on llvmpipe (interleaved, under load). No first-use variants: on Vulkan both are
# one kernel, and on llvmpipe the default is the measured one (`gpubackend tune` can still pick).
tuning.register("reads", [tuning.Variant("ssbo", ()), tuning.Variant("tex", (("TEXW", 1), ("TEXX", 1)))],
                {"*": "ssbo", "llvmpipe": "tex"})


# loads (Vulkan only, chosen per device by paths/vulkan for every fp32-storage kernel): storage
# buffers read and written as 64-bit words (WIDE, compute/prelude.glsl) or as vec4s. On lavapipe
# the 64-bit form about halves the per-lane loop of each access: whole models 1.13-1.29x with the
# same blockings (selfie, mobilenetv3, yolov8n, ppocr_v4_det, interleaved, quiet; docs/performance.md).
# Elsewhere vec4: WIDE needs shaderInt64, which Kompute does not enable (lavapipe compiles it
# regardless; a real driver need not).
tuning.register("loads", [tuning.Variant("vec4", ()), tuning.Variant("wide", (("WIDE", 1),))],
                {"*": "vec4", "lavapipe": "wide"}, paths=("vulkan",))


def _input_texture(choice: tuning.Choice) -> dict[str, int]:
    """The defines of a ``reads`` choice for a kernel whose only buffer texture can be its
    input at binding 0 (its binding 1 is not weights)."""
    return {"TEXX": 1} if dict(choice.variant.defines).get("TEXX") else {}


def _sg_lanes(variant: tuning.Variant) -> int:
    return 8 if dict(variant.defines).get("SG") else 1


def narrowed(unit: str, variant: tuning.Variant, co4: int) -> tuning.Variant:
    """``variant`` of ``unit`` (conv or gemm), or where it blocks more output channel blocks
    (``CB``) than a layer of ``co4`` blocks fills, the variant that computes the fewest dropped
    blocks, then keeps the most of its other defines (subgroup, strip, textures), then the
    nearest outputs per invocation. For 8 output channels the llvmpipe default ``bx4cb4tex`` took
    2x the time of ``bx8cb2tex``, lavapipe's ``bx4cb4sgk3`` 2.2-2.7x that of the CB 2 variants
    (interleaved, under load)."""
    d = dict(variant.defines)
    blocks = "BX" if "BX" in d else "PX"
    flags = {k: v for k, v in d.items() if k not in ("CB", blocks)}

    def rank(v: tuning.Variant) -> tuple[int, int, int]:
        vd = dict(v.defines)
        cb = vd["CB"]
        extra = {k: x for k, x in vd.items() if k not in ("CB", blocks)}
        shared = sum(extra.get(k) == x for k, x in flags.items()) - len(set(extra) - set(flags))
        return -(-(-co4 // cb) * cb - co4), shared, -abs(vd[blocks] * cb - d[blocks] * d["CB"])

    best = max(tuning.variants(unit), key=rank)
    return variant if rank(best) <= rank(variant) else best


def default_blockings(unit: str) -> list[tuple[tuple[str, int], ...]]:
    """The defines of every variant of ``unit`` that can run without ``gpubackend tune``: each
    device class's default and first-use candidates, and the variants :func:`narrowed` puts in
    their place for layers with few output blocks."""
    u = tuning.units()[unit]
    classes = set(u.defaults) | set(u.first_use)
    untuned = {u.default_for(cls) for cls in classes} | {v for cls in classes for v in u.first_use_for(cls)}
    chosen = {narrowed(unit, v, co4) for v in untuned for co4 in (1, 2, 3, 4)}
    return sorted({d for v in chosen for d in shader_blockings(v.defines)})


def _choose_blocking(unit: str, shape_class: str, node: str, co4: int) -> tuning.Choice:
    """The tuning choice of ``unit``; one that was not measured on this layer's shape class (a
    default, or the device-wide first-use record) is :func:`narrowed` to ``co4`` blocks."""
    choice = tuning.choose(unit, shape_class, node)
    if choice.exact:
        return choice
    fit = narrowed(unit, choice.variant, co4)
    if fit is choice.variant:
        return choice
    return tuning.Choice(fit, f"{choice.why}, narrowed from {choice.variant.name} to {co4} output block(s)")


DW_BX = 4
DW3_BX = 4  # the 3x3 strip variant (K3S = stride 1 or 2)
CONVT_CB = 2
CONVT_PX = 8  # input pixels per invocation of the non-overlapping ConvTranspose (convtranspose_tap)
MAX_GROUPS = 65535
# a scratch buffer no larger than Vulkan's guaranteed storage-buffer range (2**27 bytes)
MAX_SCRATCH_BYTES = 1 << 27


Decline = ops.Decline  # one decline type for every path (gpubackend.ops)


@dataclass(frozen=True)
class Binding:
    """One storage buffer: ``role`` is "in" (a runtime tensor, or a graph constant the runtime
    packs with :func:`pack`), "out" (a tensor the kernel writes), or "const" (``data``: an
    already packed float32 array of shape (n, 4)); ``name`` is the tensor or constant's key.
    ``fp32``: stored as float32 whatever the precision (convolution weights and biases: the
    shaders declare them ``vec4``, which saves unpacking in the inner loop).
    ``transform``: for an "in" binding of a graph input used as weights (ONNX allows runtime
    weights), the host-side packing applied to the fed array at upload instead of :func:`pack`.
    ``shape``: for a scratch tensor a generator names itself (not in the graph: Winograd's
    transformed operands), the packed shape its buffer is sized by."""

    role: str
    name: str
    data: np.ndarray | None = None
    fp32: bool = False
    transform: Callable[[np.ndarray], np.ndarray] | None = None
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Kernel(KernelRecord):
    kernel: str  # short kernel name ("conv", "gemm", ...), as in disabled_kernels
    shader: str  # path under shaders/, e.g. "compute/conv.comp"
    defines: tuple[tuple[str, int], ...]  # the compile-time variant (FP16, ACT, blocking)
    params: tuple[tuple[str, int | float], ...]  # in the order of the shader's Params block
    bindings: tuple[Binding, ...]  # storage buffer binding 0, 1, ...
    groups: tuple[int, int, int]
    local_size: tuple[int, int, int]
    node: str = ""
    variant: str = ""  # the tuning variant (blocking, workgroup), "" for kernels without variants
    variant_why: str = ""  # "tuned 2026-...", "default for llvmpipe", "forced"

    @property
    def kernel_name(self) -> str:
        return self.kernel


@dataclass(frozen=True)
class Alias(KernelRecord):
    """Zero-copy: ``dst`` is ``src``'s buffer reinterpreted (identical packed bytes)."""

    src: str
    dst: str
    kernel: str = "layout"
    node: str = ""

    @property
    def kernel_name(self) -> str:
        return self.kernel


Record = Kernel | Alias


# ---- the packed layout (host side, NumPy) ----------------------------------------------------
def view4(shape: tuple[int, ...]) -> tuple[tuple[int, int, int, int], int]:
    """``shape`` left-padded to rank 4 and the index of its packed axis in that padded shape.
    Above rank 4 the packed axis is the last and the leading axes merge into the first (the same
    bytes: only the index-map kernels of ``compute_ops`` accept such tensors, see ``_float_tensor``)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        return (math.prod(shape[:-3]),) + shape[-3:], 3  # type: ignore[return-value]
    if len(shape) == 4:
        return shape, 1  # type: ignore[return-value]
    return (1,) * (4 - len(shape)) + shape, 3  # type: ignore[return-value]


def mem_dims(shape: tuple[int, ...]) -> tuple[int, int, int, int, int]:
    """(d0, d1, d2, c4, c): the non-packed axes in memory order, vec4 blocks, channel count."""
    s4, pa = view4(shape)
    outer = [d for k, d in enumerate(s4) if k != pa]
    c = s4[pa]
    return outer[0], outer[1], outer[2], (c + 3) // 4, c


def vec4_count(shape: tuple[int, ...]) -> int:
    d0, d1, d2, c4, _ = mem_dims(shape)
    return d0 * d1 * d2 * c4


def pack(x: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """A tensor in the packed layout (float32 unless ``dtype``), as an array of shape (vec4_count, 4)."""
    x = np.asarray(x, dtype=dtype)
    s4, pa = view4(x.shape)
    moved = np.moveaxis(x.reshape(s4), pa, -1)
    c = s4[pa]
    pad = (-c) % 4
    if pad:
        moved = np.concatenate([moved, np.zeros(moved.shape[:-1] + (pad,), dtype)], axis=-1)
    return np.ascontiguousarray(moved).reshape(-1, 4)


def unpack(data: np.ndarray, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
    """Inverse of :func:`pack` (``data`` float32 or float16, any shape with the right size), as
    ``dtype``: an integer tensor travels as floats holding its exact values."""
    s4, pa = view4(shape)
    c = s4[pa]
    outer = [d for k, d in enumerate(s4) if k != pa]
    arr = np.asarray(data).reshape(*outer, -1)[..., :c].astype(np.float32, copy=False)
    return np.ascontiguousarray(np.moveaxis(arr, -1, pa)).reshape(shape).astype(dtype, copy=False)


def scratch_shapes(records: list[Record]) -> dict[str, tuple[int, ...]]:
    """The shapes of the scratch tensors the records write (bindings with their own ``shape``):
    the runtimes size their buffers from these, every other tensor from the graph."""
    return {b.name: b.shape for r in records if isinstance(r, Kernel) for b in r.bindings if b.shape is not None}


def tensor_dtype(graph: Graph, name: str) -> np.dtype:
    """The type a tensor has outside the device (float32 unless the graph says otherwise)."""
    return np.dtype(graph.dtypes.get(name, np.float32))


def as_storage(packed: np.ndarray, precision: str) -> np.ndarray:
    """The bytes a buffer holds: float32, or float16 (== packHalf2x16 words, little-endian)."""
    return np.ascontiguousarray(packed, dtype=np.float16 if precision == "fp16" else np.float32)


def storage_bytes(shape: tuple[int, ...], precision: str) -> int:
    return vec4_count(shape) * (8 if precision == "fp16" else 16)


def _signature(shape: tuple[int, ...]) -> tuple | None:
    s4, pa = view4(shape)
    c = s4[pa]
    if c != 1 and any(d != 1 for d in s4[pa + 1:]):
        return None  # packed axis not innermost in row-major order: not a plain reinterpretation
    return tuple(d for k, d in enumerate(s4) if k != pa and d != 1), c


def same_layout(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """True when a tensor of shape ``a`` reshaped to ``b`` has identical packed bytes."""
    if math.prod(a) != math.prod(b) or len(a) > 4 or len(b) > 4:
        return False
    sa = _signature(a)
    return sa is not None and sa == _signature(b)


# ---- shader sources and parameters --------------------------------------------------------------
_PARAMS = re.compile(r"PARAMS_BEGIN(.*?)PARAMS_END", re.S)


@cache
def param_layout(shader: str) -> tuple[tuple[str, str], ...]:
    """(type, name) of each scalar in the shader's Params block, in order."""
    m = _PARAMS.search(shaders.read(shader))
    if m is None:
        return ()
    out = []
    body = re.sub(r"//[^\n]*", "", m.group(1))
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            typ, name = decl.split()
            if typ not in ("int", "float"):
                raise ValueError(f"{shader}: parameter {name} has type {typ}; only int and float are allowed")
            out.append((typ, name))
    return tuple(out)


def pack_params(k: Kernel) -> bytes:
    """The parameter block's bytes (std140 UBO and push constants alike), padded to 16 bytes."""
    layout = param_layout(k.shader)
    names = [n for n, _ in k.params]
    if names != [n for _, n in layout]:
        raise ValueError(f"{k.shader}: record parameters {names} do not match the shader's {[n for _, n in layout]}")
    words = np.zeros(max(4, -(-len(layout) // 4) * 4), np.uint32)
    for i, ((typ, _), (_, v)) in enumerate(zip(layout, k.params)):
        words[i] = np.array(v, np.int32 if typ == "int" else np.float32).view(np.uint32)
    return words.tobytes()


def glsl_source(k: Kernel | tuple[str, tuple[tuple[str, int], ...], tuple[int, int, int]], api: str = "gles31") -> str:
    """The complete source of a record (or of ``(shader, defines, local_size)``) for ``api``:
    "gles31" (``#version 310 es``, local size as defines) or "vulkan" (``#version 450``; local
    size from specialization constants 0, 1, 2). glslang (``-V``) and shaderc predefine ``VULKAN``
    when targeting Vulkan, which selects the prelude's Vulkan branch; do not pass ``-DVULKAN``
    too (glslang rejects the redefinition)."""
    shader, defines, local = (k.shader, k.defines, k.local_size) if isinstance(k, Kernel) else k
    d: dict[str, object] = dict(defines)
    if api == "vulkan":
        return shaders.source(shader, "450", d)
    d.update(LOCAL_X=local[0], LOCAL_Y=local[1], LOCAL_Z=local[2])
    return shaders.source(shader, "310 es", d)


# ---- helpers -------------------------------------------------------------------------------------
def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    s = graph.shape(name)
    if s is None:
        raise Decline(f"the shape of {name!r} is not known statically")
    return tuple(int(d) for d in s)


def _float_tensor(graph: Graph, name: str, max_rank: int = 4) -> tuple[int, ...]:
    dt = graph.constants[name].dtype if name in graph.constants else graph.dtypes.get(name, np.dtype(np.float32))
    if np.dtype(dt) != np.float32:
        raise Decline(f"{name!r} is {np.dtype(dt)}; compute kernels handle float32 tensors only")
    shape = _shape(graph, name)
    if len(shape) > max_rank:
        raise Decline(f"rank {len(shape)} tensors are not supported (at most {max_rank})")
    if math.prod(shape) == 0:
        raise Decline(f"{name!r} is empty")
    return shape


def _const(graph: Graph, node: Node, idx: int, what: str) -> np.ndarray | None:
    if idx >= len(node.inputs) or not node.inputs[idx]:
        return None
    name = node.inputs[idx]
    if name not in graph.constants:
        raise Decline(f"{what} ({name!r}) must be a constant")
    return np.asarray(graph.constants[name])


def _source(graph: Graph, node: Node, idx: int, what: str, key: str,
            fn: Callable[[np.ndarray | None], np.ndarray]) -> Binding:
    """A weight-like input packed by ``fn``: at compile time for a constant (or an absent
    optional input, ``fn(None)``), at upload for a graph input."""
    name = node.inputs[idx] if idx < len(node.inputs) else ""
    if not name:
        return Binding("const", key, fn(None), True)
    if name in graph.constants:
        return Binding("const", key, fn(np.asarray(graph.constants[name], np.float32)), True)
    if name in graph.inputs and graph.shape(name) is not None:
        _float_tensor(graph, name)
        return Binding("in", name, None, True, lambda v: fn(np.asarray(v, np.float32)))
    raise Decline(f"{what} ({name!r}) must be a constant or a graph input")


def _pow2_at_least(n: int, cap: int) -> int:
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


def _local_3d(gx: int, gy: int, gz: int, total: int = 64) -> tuple[int, int, int]:
    lx = _pow2_at_least(gx, 8)
    ly = _pow2_at_least(gy, max(1, total // lx))
    lz = _pow2_at_least(gz, max(1, total // (lx * ly)))
    return lx, ly, lz


def _grid_3d(gx: int, gy: int, gz: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    local = _local_3d(gx, gy, gz)
    groups = (-(-gx // local[0]), -(-gy // local[1]), -(-gz // local[2]))
    if max(groups) > MAX_GROUPS:
        raise Decline(f"dispatch of {groups} workgroups exceeds {MAX_GROUPS} per axis")
    return groups, local


def _grid_rows(items: int, gy: int, gz: int, local: int = 64,
               at_least: int = 1) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """1-D invocations along x (``items``), one workgroup per (y, z): y and z are uniform.
    ``at_least``: the smallest workgroup (an SG kernel needs its 8 broadcasting lanes)."""
    lx = max(_pow2_at_least(items, local), at_least)
    groups = (-(-items // lx), gy, gz)
    if max(groups) > MAX_GROUPS:
        raise Decline(f"dispatch of {groups} workgroups exceeds {MAX_GROUPS} per axis")
    return groups, (lx, 1, 1)


def _grid_flat(total: int, local: int = 64) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    groups = max(1, -(-total // local))
    gx = min(groups, MAX_GROUPS)
    return (gx, -(-groups // gx), 1), (local, 1, 1)


def _variant(precision: str, **extra: int) -> tuple[tuple[str, int], ...]:
    d = [("FP16", 1)] if precision == "fp16" else []
    return tuple(d + sorted(extra.items()))


def _act(act: ops.Activation | None) -> tuple[int, float, float]:
    """(ACT code, parameter 0, parameter 1) of a fused or standalone activation."""
    if act is None:
        return 0, 0.0, 0.0
    if act.op not in ew.FUSABLE:
        raise Decline(f"fused activation {act.op} has no compute kernel")
    return ew.activation_params(act.spec)



def _bias(b: np.ndarray | None, co: int, co4p: int) -> np.ndarray:
    out = np.zeros(co4p * 4, np.float32)
    if b is not None:
        out[:co] = np.asarray(b, np.float32).reshape(-1)
    return out.reshape(-1, 4)


def _pack_blocks(wd: np.ndarray, co4p: int) -> np.ndarray:
    """Dense weights (co, ci, kh, kw) -> [co4][ky][kx][ci4] blocks of 4 vec4: vec4 j of a block
    holds the 4 output channels' weights of input lane j."""
    co, ci, kh, kw = wd.shape
    ci4 = (ci + 3) // 4
    full = np.zeros((co4p * 4, ci4 * 4, kh, kw), np.float32)
    full[:co, :ci] = wd
    blocks = full.reshape(co4p, 4, ci4, 4, kh, kw).transpose(0, 4, 5, 2, 3, 1)
    return np.ascontiguousarray(blocks).reshape(-1, 4)


def _grouped_dense(w: np.ndarray, group: int, transpose: bool) -> np.ndarray:
    """(co, ci, kh, kw) dense weights from Conv (co, ci/g, ...) or ConvTranspose (ci, co/g, ...)."""
    w = np.asarray(w, np.float32)
    if transpose:
        ci, cog, kh, kw = w.shape
        co, cig = cog * group, ci // group
        dense = np.zeros((co, ci, kh, kw), np.float32)
        for g in range(group):
            dense[g * cog:(g + 1) * cog, g * cig:(g + 1) * cig] = w[g * cig:(g + 1) * cig].transpose(1, 0, 2, 3)
        return dense
    co, cig, kh, kw = w.shape
    if group == 1:
        return w
    cog = co // group
    dense = np.zeros((co, cig * group, kh, kw), np.float32)
    for g in range(group):
        dense[g * cog:(g + 1) * cog, g * cig:(g + 1) * cig] = w[g * cog:(g + 1) * cog]
    return dense


def _conv_geometry(node: Node, graph: Graph, transpose: bool = False) -> dict:
    x = node.inputs[0]
    xs = _float_tensor(graph, x)
    if len(xs) != 4:
        raise Decline(f"only 2-D {'transposed ' if transpose else ''}convolution (rank 4 NCHW) is supported")
    if len(node.inputs) < 2 or not node.inputs[1]:
        raise Decline("no weight")
    rec = ops.require(node, graph, ops.ConvRecord)
    (kh, kw), (sh, sw), (dh, dw) = rec.kernel, rec.strides, rec.dilations
    (ih, iw), (oh, ow), (pt, pl) = rec.in_spatial, rec.out_spatial, rec.pads_begin
    return dict(n=xs[0], ih=ih, iw=iw, ci=rec.in_channels, oh=oh, ow=ow, co=rec.out_channels, kh=kh, kw=kw, sh=sh,
                sw=sw, pt=pt, pl=pl, dh=dh, dw=dw, group=rec.group, wc1=_shape(graph, node.inputs[1])[1], act=rec.act)


# ---- generators ----------------------------------------------------------------------------------
def _conv1x1(node: Node, graph: Graph, precision: str) -> list[Record]:
    g = _conv_geometry(node, graph)
    if (g["kh"], g["kw"], g["sh"], g["sw"], g["pt"], g["pl"], g["group"]) != (1, 1, 1, 1, 0, 0, 1) \
            or (g["oh"], g["ow"]) != (g["ih"], g["iw"]):
        raise Decline("not a 1x1 stride-1 unpadded ungrouped convolution")
    co, ci = g["co"], g["ci"]
    return [_gemm_record(node, graph, precision, node.inputs[0], node.outputs[0], g["n"] * g["ih"] * g["iw"], co, ci,
                         lambda w: w.reshape(co, ci), 2, lambda b: b, "conv1x1", g["act"])]


def _gemm_record(node: Node, graph: Graph, precision: str, x: str, y: str, rows: int, co: int, ci: int,
                 to_wd: Callable[[np.ndarray], np.ndarray], bias_idx: int,
                 to_bias: Callable[[np.ndarray], np.ndarray], kernel: str,
                 act_rec: ops.Activation | None) -> Kernel:
    """y = x @ wd.T + b with ``to_wd(input 1) -> wd`` (co, ci) and ``to_bias(input bias_idx)``."""
    co4, ci4 = (co + 3) // 4, (ci + 3) // 4
    choice = _choose_blocking("gemm", _gemm_class(ci, co, rows), node.name, co4)
    px, cb = choice.variant.define("PX"), choice.variant.define("CB")
    cob = -(-co4 // cb)
    act, a0, a1 = _act(act_rec)
    groups, local = _grid_rows(-(-rows // px), cob, 1, choice.variant.local, _sg_lanes(choice.variant))
    wsrc = _source(graph, node, 1, "the weight", f"{node.name}/w",
                   lambda w: _pack_blocks(to_wd(w)[:, :, None, None], cob * cb))
    bsrc = _source(graph, node, bias_idx, "the bias", f"{node.name}/b",
                   lambda b: _bias(None if b is None else to_bias(b), co, cob * cb))
    return Kernel(kernel, "compute/gemm.comp", _variant(precision, ACT=act, **dict(choice.variant.defines)),
                  (("rows", rows), ("ci4", ci4), ("co4", co4), ("co", co), ("cob", cob), ("act0", a0), ("act1", a1),
                   ("oc4s", co4), ("oc4o", 0)),
                  (Binding("in", x), wsrc, bsrc, Binding("out", y)), groups, local, node.name,
                  choice.variant.name, choice.why)


def _depthwise(node: Node, graph: Graph, precision: str) -> list[Record]:
    g = _conv_geometry(node, graph)
    if not (g["group"] == g["ci"] == g["co"] and g["group"] > 1 and g["wc1"] == 1):
        raise Decline("not a depthwise convolution (group == in == out channels)")
    c, c4 = g["co"], (g["co"] + 3) // 4

    def pack_w(w: np.ndarray) -> np.ndarray:
        wp = np.zeros((c4 * 4, g["kh"], g["kw"]), np.float32)
        wp[:c] = w[:, 0]
        return np.ascontiguousarray(wp.reshape(c4, 4, g["kh"], g["kw"]).transpose(0, 2, 3, 1)).reshape(-1, 4)

    act, a0, a1 = _act(g["act"])
    choice = tuning.choose("reads", f"depthwise k{g['kh']}x{g['kw']} s{g['sh']} c{tuning.bucket(c)} "
                                    f"px{tuning.bucket(g['oh'] * g['ow'])}", node.name)
    extra = {"ACT": act, "BX": DW_BX, **dict(choice.variant.defines)}
    if DW3_BX and (g["kh"], g["kw"], g["dh"], g["dw"]) == (3, 3, 1, 1) and g["sh"] == g["sw"] and g["sh"] in (1, 2):
        extra.update(BX=DW3_BX, K3S=g["sh"])
    groups, local = _grid_rows(g["oh"] * -(-g["ow"] // extra["BX"]), c4, g["n"])
    params = tuple((k, g[k]) for k in ("n", "ih", "iw")) + (("c4s", c4),) + tuple(
        (k, g[k]) for k in ("oh", "ow")) + (("c", c),) + tuple(
        (k, g[k]) for k in ("kh", "kw", "sh", "sw", "pt", "pl", "dh", "dw")) + (
        ("act0", a0), ("act1", a1), ("oc4s", c4), ("oc4o", 0))
    return [Kernel("depthwise", "compute/depthwise.comp", _variant(precision, **extra), params,
                   (Binding("in", node.inputs[0]), _source(graph, node, 1, "the weight", f"{node.name}/w", pack_w),
                    _source(graph, node, 2, "the bias", f"{node.name}/b", lambda b: _bias(b, c, c4)),
                    Binding("out", node.outputs[0])), groups, local, node.name,
                   variant=choice.variant.name, variant_why=choice.why)]


def _conv_like(node: Node, graph: Graph, precision: str, transpose: bool) -> list[Record]:
    g = _conv_geometry(node, graph, transpose)
    group = g["group"]
    dense = (g["wc1"] * group, g["ci"]) if transpose else (g["co"], g["wc1"] * group)
    if dense != (g["co"], g["ci"]) or g["ci"] % group or g["co"] % group:
        raise Decline(f"weight shape {_shape(graph, node.inputs[1])} does not match {g['ci']} -> {g['co']} "
                      f"channels in {group} groups")
    co4, ci4 = (g["co"] + 3) // 4, (g["ci"] + 3) // 4
    act, a0, a1 = _act(g["act"])
    choice = None
    if transpose:
        cbk = CONVT_CB
        cob = -(-co4 // cbk)
        groups, local = _grid_rows(g["ow"] * g["oh"], cob, g["n"])
        defines = _variant(precision, ACT=act, CB=cbk)
    else:
        shape_class = (f"k{g['kh']}x{g['kw']} s{g['sh']}x{g['sw']} d{g['dh']}x{g['dw']} g{min(group, 2)} "
                       f"ci{tuning.bucket(g['ci'])} co{tuning.bucket(g['co'])} px{tuning.bucket(g['oh'] * g['ow'])}")
        choice = _choose_blocking("conv", shape_class, node.name, co4)
        bx, cbk = choice.variant.define("BX"), choice.variant.define("CB")
        cob = -(-co4 // cbk)
        groups, local = _grid_rows(g["oh"] * -(-g["ow"] // bx), cob, g["n"], choice.variant.local,
                                   _sg_lanes(choice.variant))
        blocking = dict(choice.variant.defines)
        if blocking.pop("STRIP", 0) and _strip_stride(g):
            blocking["K3S"] = _strip_stride(g)
        defines = _variant(precision, ACT=act, **blocking)
    params = tuple((k, g[k]) for k in ("n", "ih", "iw")) + (("ci4", ci4),) + tuple(
        (k, g[k]) for k in ("oh", "ow")) + (("co4", co4), ("co", g["co"])) + tuple(
        (k, g[k]) for k in ("kh", "kw", "sh", "sw", "pt", "pl", "dh", "dw")) + (
        ("cob", cob), ("act0", a0), ("act1", a1), ("oc4s", co4), ("oc4o", 0))
    name = "convtranspose" if transpose else "conv"
    return [Kernel(name, f"compute/{name}.comp", defines, params,
                   (Binding("in", node.inputs[0]),
                    _source(graph, node, 1, "the weight", f"{node.name}/w",
                            lambda w: _pack_blocks(_grouped_dense(w, group, transpose), cob * cbk)),
                    _source(graph, node, 2, "the bias", f"{node.name}/b", lambda b: _bias(b, g["co"], cob * cbk)),
                    Binding("out", node.outputs[0])), groups, local, node.name,
                   choice.variant.name if choice else "", choice.why if choice else "")]


def _conv(node: Node, graph: Graph, precision: str) -> list[Record]:
    return _conv_like(node, graph, precision, False)


# Winograd F(2x2, 3x3) (Lavin and Gray's minimal filtering) for 3x3 stride-1 undilated ungrouped
# convolutions of enough channels: the input transform (winograd_in.comp), 16 GEMMs of the
# transformed operands in one dispatch (gemm.comp BATCH, the gemm unit's blocking) and the output
# transform with bias and epilogue (winograd_out.comp): 16 multiplies per 2x2 output tile and
# input channel instead of 36.
# The tuning unit conv3x3 chooses it over the direct kernel per layer shape class (`gpubackend
# tune`); untuned, a layer takes Winograd where :func:`winograd_pays` (measured on llvmpipe and
# lavapipe; not on a real GPU).
WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# at fewer channels the three dispatches cost more than the multiplies saved: 8 -> 8 channels ran
# 0.8-0.9x as fast on llvmpipe, 8 -> 16 and 16 -> 8 1.1-1.7x faster on both drivers
WINOGRAD_MIN_CHANNELS = 8
WINOGRAD_MIN_CHANNEL_PRODUCT = 128
# and on small planes: 16 channels at 8x8 and 32 -> 48 at 5x6 ran slower, 10x10 faster from 32 channels
WINOGRAD_MIN_PIXELS = 100
tuning.register("conv3x3", [tuning.Variant("direct", ()), tuning.Variant("winograd", (("WINOGRAD", 1),))],
                {"*": "winograd"})


def winograd_pays(ci: int, co: int, pixels: int) -> bool:
    """Whether an untuned 3x3 layer takes Winograd: from ``gpubackend tune`` on yolov8n, ppocr_v4_det
    and the U-Net-like test model (gles31 and vulkan, quiet machine), Winograd won 1.3-3.5x from 64
    output channels, and with fewer lost where the input has over twice the output's channels
    (128 -> 32: 0.8-1.0x on llvmpipe) or on planes over 8192 pixels (16 -> 16 at 128x128: 0.7x on
    llvmpipe), whose transformed operands no longer stay in the CPU's caches."""
    return co >= 64 or (ci * co >= 256 and ci <= 2 * co and pixels <= 8192)


def winograd_weights(w: np.ndarray, cob: int) -> np.ndarray:
    """(co, ci, 3, 3) weights -> the 16 transformed weight matrices G g G^T, entry k = 4a + b of
    the 4x4 transform each packed as gemm.comp's [co4][ci4] blocks (``cob`` blocks, zero padded)."""
    u = np.einsum("ak,ockl,bl->aboc", WINOGRAD_G, np.asarray(w, np.float64), WINOGRAD_G)
    return np.concatenate([_pack_blocks(u[a, b].astype(np.float32)[:, :, None, None], cob)
                           for a in range(4) for b in range(4)])


def _tile_grid(c4: int, tw: int, rows: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Winograd transform dispatch: x = channel block, y = tile column, z = one workgroup per tile
    row (uniform, so its division is not done per lane)."""
    lx = _pow2_at_least(c4, 64)
    ly = _pow2_at_least(tw, max(1, 64 // lx))
    groups = (-(-c4 // lx), -(-tw // ly), rows)
    if max(groups) > MAX_GROUPS:
        raise Decline(f"dispatch of {groups} workgroups exceeds {MAX_GROUPS} per axis")
    return groups, (lx, ly, 1)


def _conv_winograd(node: Node, graph: Graph, precision: str) -> list[Record]:
    g = _conv_geometry(node, graph)
    if (g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"], g["group"]) != (3, 3, 1, 1, 1, 1, 1):
        raise Decline("not a 3x3 stride-1 undilated ungrouped convolution")
    ci, co = g["ci"], g["co"]
    if min(ci, co) < WINOGRAD_MIN_CHANNELS or ci * co < WINOGRAD_MIN_CHANNEL_PRODUCT:
        raise Decline(f"{ci} -> {co} channels: too few for Winograd (at least {WINOGRAD_MIN_CHANNELS} each "
                      f"and {WINOGRAD_MIN_CHANNEL_PRODUCT} in product)")
    if g["oh"] * g["ow"] < WINOGRAD_MIN_PIXELS:
        raise Decline(f"a {g['oh']}x{g['ow']} output: too small for Winograd (at least {WINOGRAD_MIN_PIXELS} pixels)")
    shape_class = f"ci{tuning.bucket(ci)} co{tuning.bucket(co)} px{tuning.bucket(g['oh'] * g['ow'])}"
    choice = tuning.choose("conv3x3", shape_class, node.name)
    if not dict(choice.variant.defines).get("WINOGRAD"):
        raise Decline(f"the direct kernel is chosen ({choice.why})")
    if not choice.exact and not winograd_pays(ci, co, g["oh"] * g["ow"]):
        raise Decline(f"the direct kernel is chosen (untuned, and {ci} -> {co} channels on {g['oh']}x{g['ow']} "
                      "is a layer where Winograd was measured slower)")
    if precision != "fp32":
        raise Decline("Winograd keeps fp32 storage only (its transformed operands would round to fp16)")
    ci4, co4 = (ci + 3) // 4, (co + 3) // 4
    th, tw = (g["oh"] + 1) // 2, (g["ow"] + 1) // 2
    tiles = g["n"] * th * tw
    v_shape, m_shape = (16, ci4 * 4, tiles, 1), (16, co4 * 4, tiles, 1)
    if max(vec4_count(v_shape), vec4_count(m_shape)) * 16 > MAX_SCRATCH_BYTES:
        raise Decline(f"its transformed operands would exceed {MAX_SCRATCH_BYTES} bytes")
    vname, mname = f"{node.name}/winograd_v", f"{node.name}/winograd_m"
    reads = tuning.choose("reads", f"winograd ci{tuning.bucket(ci)} px{tuning.bucket(g['ih'] * g['iw'])}",
                          node.name)
    groups, local = _tile_grid(ci4, tw, g["n"] * th)
    transform_in = Kernel("conv_winograd", "compute/winograd_in.comp",
                          _variant(precision, **_input_texture(reads)),
                          (("ih", g["ih"]), ("iw", g["iw"]), ("ci4", ci4), ("th", th), ("tw", tw), ("pt", g["pt"]),
                           ("pl", g["pl"]), ("tiles", tiles)),
                          (Binding("in", node.inputs[0]), Binding("out", vname, shape=v_shape)), groups, local,
                          node.name, reads.variant.name, reads.why)
    blocking = _choose_blocking("gemm", _gemm_class(ci, co, tiles), node.name, co4)
    px, cb = blocking.variant.define("PX"), blocking.variant.define("CB")
    cob = -(-co4 // cb)
    groups, local = _grid_rows(-(-tiles // px), cob, 16, blocking.variant.local, _sg_lanes(blocking.variant))
    products = Kernel("conv_winograd", "compute/gemm.comp",
                      _variant(precision, ACT=0, BATCH=1, **dict(blocking.variant.defines)),
                      (("rows", tiles), ("ci4", ci4), ("co4", co4), ("co", co), ("cob", cob), ("act0", 0.0),
                       ("act1", 0.0), ("oc4s", co4), ("oc4o", 0)),
                      (Binding("in", vname),
                       _source(graph, node, 1, "the weight", f"{node.name}/wino_w",
                               lambda w: winograd_weights(w, cob * cb)),
                       Binding("const", f"{node.name}/wino_zero", np.zeros((cob * cb, 4), np.float32), True),
                       Binding("out", mname, shape=m_shape)), groups, local, node.name,
                      f"winograd {blocking.variant.name}", f"{choice.why}; blocking {blocking.why}")
    act, a0, a1 = _act(g["act"])
    groups, local = _tile_grid(co4, tw, g["n"] * th)
    transform_out = Kernel("conv_winograd", "compute/winograd_out.comp", _variant(precision, ACT=act),
                           (("oh", g["oh"]), ("ow", g["ow"]), ("co4", co4), ("co", co), ("th", th), ("tw", tw),
                            ("tiles", tiles), ("act0", a0), ("act1", a1), ("oc4s", co4), ("oc4o", 0),
                            ("ih", g["ih"]), ("iw", g["iw"]), ("ci4", ci4), ("pt", g["pt"]), ("pl", g["pl"])),
                           (Binding("in", mname),
                            _source(graph, node, 2, "the bias", f"{node.name}/b", lambda b: _bias(b, co, co4)),
                            Binding("out", node.outputs[0]),
                            Binding("in", node.inputs[0]),  # the direct sum of a tile that is not finite
                            _source(graph, node, 1, "the weight", f"{node.name}/wino_direct_w",
                                    lambda w: _pack_blocks(w, co4))),
                           groups, local, node.name)
    return [transform_in, products, transform_out]


def _convtranspose_taps(node: Node, graph: Graph, precision: str) -> list[Record]:
    """ConvTranspose with kernel == stride, no padding, dilation 1 (the taps do not overlap: a
    pointwise GEMM per tap, ``convtranspose_tap.comp``)."""
    g = _conv_geometry(node, graph, True)
    if (g["kh"], g["kw"], g["pt"], g["pl"], g["dh"], g["dw"]) != (g["sh"], g["sw"], 0, 0, 1, 1) \
            or (g["oh"], g["ow"]) != (g["ih"] * g["sh"], g["iw"] * g["sw"]):
        raise Decline("not a ConvTranspose with kernel == stride, no padding, dilation 1, no output padding")
    group = g["group"]
    if (g["wc1"] * group, g["ci"] % group) != (g["co"], 0):
        raise Decline(f"weight shape {_shape(graph, node.inputs[1])} does not match {g['ci']} -> {g['co']} "
                      f"channels in {group} groups")
    co4, ci4 = (g["co"] + 3) // 4, (g["ci"] + 3) // 4
    cb = min(CONVT_CB, co4)  # one output block (a mask head): no second block computed and dropped
    cob = -(-co4 // cb)
    rows = g["n"] * g["ih"] * g["iw"]
    act, a0, a1 = _act(g["act"])
    choice = tuning.choose("reads", f"convtranspose_tap ci{tuning.bucket(g['ci'])} co{tuning.bucket(g['co'])} "
                                    f"rows{tuning.bucket(rows)}", node.name)
    groups, local = _grid_rows(-(-rows // CONVT_PX), cob, g["kh"] * g["kw"])
    params = (("rows", rows), ("ih", g["ih"]), ("iw", g["iw"]), ("ci4", ci4), ("oh", g["oh"]), ("ow", g["ow"]),
              ("co4", co4), ("co", g["co"]), ("kh", g["kh"]), ("kw", g["kw"]), ("cob", cob), ("act0", a0),
              ("act1", a1), ("oc4s", co4), ("oc4o", 0))
    return [Kernel("convtranspose", "compute/convtranspose_tap.comp",
                   _variant(precision, ACT=act, PX=CONVT_PX, CB=cb, **dict(choice.variant.defines)), params,
                   (Binding("in", node.inputs[0]),
                    _source(graph, node, 1, "the weight", f"{node.name}/w",
                            lambda w: _pack_blocks(_grouped_dense(w, group, True), cob * cb)),
                    _source(graph, node, 2, "the bias", f"{node.name}/b", lambda b: _bias(b, g["co"], cob * cb)),
                    Binding("out", node.outputs[0])), groups, local, node.name,
                   variant=choice.variant.name, variant_why=choice.why)]


def _convtranspose(node: Node, graph: Graph, precision: str) -> list[Record]:
    return _conv_like(node, graph, precision, True)


def _gemm(node: Node, graph: Graph, precision: str) -> list[Record]:
    a = node.inputs[0]
    shape = _float_tensor(graph, a)
    if len(shape) != 2:
        raise Decline("Gemm input must be rank 2")
    rec = ops.require(node, graph, ops.GemmRecord)
    if rec.trans_a:
        raise Decline("transA=1 on a runtime A")
    trans_b = rec.trans_b
    alpha, beta = np.float32(rec.alpha), np.float32(rec.beta)
    bs = _shape(graph, node.inputs[1])
    if len(bs) != 2:
        raise Decline("B must be rank 2")
    n_out, k = (bs[0], bs[1]) if trans_b else (bs[1], bs[0])
    if len(node.inputs) > 2 and node.inputs[2]:
        cs = _shape(graph, node.inputs[2])
        if math.prod(cs) not in (1, n_out) or (len(cs) == 2 and cs[0] != 1):
            raise Decline(f"C of shape {cs} is not a per-column bias")
    return [_gemm_record(node, graph, precision, a, node.outputs[0], shape[0], n_out, k,
                         lambda b: (b if trans_b else b.T) * alpha, 2,
                         lambda c: np.broadcast_to(c.reshape(-1), (n_out,)) * beta, "gemm", rec.act)]


def _matmul(node: Node, graph: Graph, precision: str) -> list[Record]:
    a, bname = node.inputs[0], node.inputs[1]
    sa, sb, sy = _float_tensor(graph, a), _float_tensor(graph, bname), _shape(graph, node.outputs[0])
    act = ops.require(node, graph, ops.MatMulRecord).act
    if len(sa) < 2 or len(sb) < 2 or len(sa) == 4 or len(sb) == 4:
        raise Decline("MatMul operands must be rank 2 or 3 (rank 4 tensors are channel-packed)")
    if bname in graph.constants and len(sb) == 2:
        return [_gemm_record(node, graph, precision, a, node.outputs[0], math.prod(sa[:-1]), sb[1], sb[0],
                             lambda b: b.T, 2, lambda b: b, "matmul", act)]
    if act is not None:
        raise Decline("a fused activation on MatMul of two runtime tensors")
    batch = sy[0] if len(sy) == 3 else 1
    m, k, n = sa[-2], sa[-1], sb[-1]
    k4, n4 = (k + 3) // 4, (n + 3) // 4
    a_stride = m * k4 if len(sa) == 3 and sa[0] > 1 else 0
    b_stride = k * n4 if len(sb) == 3 and sb[0] > 1 else 0
    groups, local = _grid_3d(n4, m, batch)
    return [Kernel("matmul", "compute/matmul.comp", _variant(precision),
                   (("batch", batch), ("m", m), ("k", k), ("k4", k4), ("n4", n4), ("n", n),
                    ("a_stride", a_stride), ("b_stride", b_stride)),
                   (Binding("in", a), Binding("in", bname), Binding("out", node.outputs[0])), groups, local, node.name)]


def _operand(graph: Graph, name: str, out_shape: tuple[int, ...], key: str) -> tuple[Binding, list[int], int]:
    shape = _float_tensor(graph, name)
    r = len(out_shape)
    if len(shape) > r:
        raise Decline(f"{name!r} has a higher rank than the output")
    padded = (1,) * (r - len(shape)) + shape
    if name in graph.constants:
        # fp32 whatever the precision: a constant rounded to fp16 biases every element it meets
        # (x * 1.3 came out up to 1 ulp low in 20% of elements; binary.comp A32 / B32)
        binding = Binding("const", key, pack(np.asarray(graph.constants[name], np.float32).reshape(padded)), True)
    else:
        if len(shape) != r and not same_layout(shape, padded):
            raise Decline(f"runtime operand {name!r} of rank {len(shape)} broadcast to rank {r} "
                          "has a different packed layout")
        binding = Binding("in", name)
    s4, pa = view4(padded)
    o4, _ = view4(out_shape)
    c = s4[pa]
    c4 = (c + 3) // 4
    axes = [k for k in range(4) if k != pa]
    strides = [0, 0, 0]
    step = c4
    for j in (2, 1, 0):
        k = axes[j]
        strides[j] = 0 if s4[k] == 1 else step
        step *= s4[k]
    splat = int(c == 1 and o4[pa] > 1)
    return binding, strides + [0 if splat else 1], splat


def _binary(node: Node, graph: Graph, precision: str) -> list[Record]:
    key = ew.binary_key(node.op_type)
    if key is None:
        raise Decline(f"{node.op_type} is not a binary table op")
    if len([i for i in node.inputs if i]) != 2:
        raise Decline(f"{node.op_type} with {len(node.inputs)} inputs (2 supported)")
    y = node.outputs[0]
    ys = _shape(graph, y)
    if len(ys) > 4:
        raise Decline(f"rank {len(ys)} output (broadcasting handles at most 4)")
    ba, sa, fa = _operand(graph, node.inputs[0], ys, f"{node.name}/a")
    bb, sb, fb = _operand(graph, node.inputs[1], ys, f"{node.name}/b")
    d0, d1, d2, c4, c = mem_dims(ys)
    total = d0 * d1 * d2 * c4
    groups, local = _grid_flat(total)
    params = (("d0", d0), ("d1", d1), ("d2", d2), ("c4s", c4), ("c", c),
              ("a0", sa[0]), ("a1", sa[1]), ("a2", sa[2]), ("a3", sa[3]), ("a_splat", fa),
              ("b0", sb[0]), ("b1", sb[1]), ("b2", sb[2]), ("b3", sb[3]), ("b_splat", fb))
    wide = {f"{k}32": 1 for k, b in (("A", ba), ("B", bb)) if b.fp32 and precision == "fp16"}
    contiguous, dims, per_channel = [d1 * d2 * c4, d2 * c4, c4, 1], (d0, d1, d2, c4), [0, 0, 0, 1]
    same = [not splat and all(s[k] == contiguous[k] or dims[k] == 1 for k in range(4))
            for s, splat in ((sa, fa), (sb, fb))]
    if all(same) and c % 4 == 0:
        wide["FLAT"] = 1
    elif same[0] and not fb and sb == per_channel:
        wide["CHAN"] = 1
    elif same[1] and not fa and sa == per_channel:
        wide["CHAN"] = 2
    return [Kernel("binary", "compute/binary.comp", _variant(precision, BOP=ew.BOP_CODES[key], **wide), params,
                   (ba, bb, Binding("out", y)),
                   groups, local, node.name)]


def _unary(node: Node, graph: Graph, precision: str) -> list[Record]:
    resolved = ew.resolve_unary(node, graph)
    if isinstance(resolved, str):
        raise Decline(resolved)
    key, a0, a1 = resolved
    x = node.inputs[0]
    return [_unary_record(x, node.outputs[0], _float_tensor(graph, x), precision, ew.ACT_CODES[key], a0, a1,
                          node.name)]


def _unary_record(x: str, y: str, shape: tuple[int, ...], precision: str, code: int, a0: float, a1: float,
                  node: str, **wide: int) -> Kernel:
    d0, d1, d2, c4, c = mem_dims(shape)
    total = d0 * d1 * d2 * c4
    groups, local = _grid_flat(total)
    flat = {"FLAT": 1} if c % 4 == 0 else {}
    return Kernel("unary", "compute/unary.comp", _variant(precision, ACT=code, **flat, **wide),
                  (("total", total), ("c4s", c4), ("c", c), ("act0", a0), ("act1", a1)),
                  (Binding("in", x), Binding("out", y)), groups, local, node)


def cast_record(x: str, y: str, shape: tuple[int, ...], to_fp32: bool, node: str) -> Kernel:
    """A copy of fp16 ``x`` into fp32 ``y`` (``to_fp32``) or of fp32 ``x`` into fp16 ``y``: the
    casts around a kernel that runs in fp32 for a tensor a precision plan keeps."""
    return _unary_record(x, y, shape, "fp16", 0, 0.0, 0.0, node, **{"Y32" if to_fp32 else "X32": 1})


def _pool(node: Node, graph: Graph, precision: str) -> list[Record]:
    x, y = node.inputs[0], node.outputs[0]
    if len([o for o in node.outputs if o]) > 1:
        raise Decline("MaxPool Indices output")
    xs, ys = _float_tensor(graph, x), _shape(graph, y)
    if len(xs) != 4:
        raise Decline("only 2-D pooling (rank 4 NCHW)")
    rec = ops.require(node, graph, ops.PoolRecord)
    (kh, kw), (sh, sw), (dh, dw) = rec.kernel, rec.strides, rec.dilations
    (pt, pl), (pb, pr) = rec.pads_begin, rec.pads_end
    (ih, iw), (oh, ow) = rec.in_spatial, rec.out_spatial
    if tuple(ys[2:]) != rec.out_spatial:
        raise Decline(f"the graph's output shape {ys} does not match the pooling attributes' {rec.out_spatial}")
    c4 = (xs[1] + 3) // 4
    groups, local = _grid_3d(ow, oh, xs[0] * c4)
    is_max = int(node.op_type == "MaxPool")
    params = (("n", xs[0]), ("ih", ih), ("iw", iw), ("c4s", c4), ("oh", oh), ("ow", ow), ("c", xs[1]),
              ("kh", kh), ("kw", kw), ("sh", sh), ("sw", sw), ("pt", pt), ("pl", pl), ("dh", dh), ("dw", dw),
              ("pb", pb), ("pr", pr), ("is_max", is_max), ("include_pad", int(rec.count_include_pad)),
              ("oc4s", c4), ("oc4o", 0))
    choice = tuning.choose("reads", f"pool k{kh}x{kw} c{tuning.bucket(xs[1])} px{tuning.bucket(oh * ow)}", node.name)
    return [Kernel("pool", "compute/pool.comp", _variant(precision, **_input_texture(choice)), params,
                   (Binding("in", x), Binding("out", y)), groups, local, node.name,
                   variant=choice.variant.name, variant_why=choice.why)]


def _globalpool(node: Node, graph: Graph, precision: str) -> list[Record]:
    return [globalpool_record(node, graph, precision, node.op_type == "GlobalMaxPool")]


def globalpool_record(node: Node, graph: Graph, precision: str, is_max: bool) -> Kernel:
    """``globalpool.comp``: the mean (or maximum) over H x W of a rank-4 NCHW input 0, one
    invocation per (n, c4) reducing four channels at once."""
    x = node.inputs[0]
    xs = _float_tensor(graph, x)
    if len(xs) != 4:
        raise Decline("only 2-D global pooling (rank 4 NCHW)")
    c4 = (xs[1] + 3) // 4
    groups, local = _grid_flat(xs[0] * c4, 16)
    return Kernel("globalpool", "compute/globalpool.comp", _variant(precision),
                  (("n", xs[0]), ("hw", xs[2] * xs[3]), ("c4s", c4), ("c", xs[1]), ("is_max", int(is_max))),
                  (Binding("in", x), Binding("out", node.outputs[0])), groups, local, node.name)


def _affine_taps(idx: np.ndarray, w: np.ndarray, n: int) -> np.ndarray | None:
    """(a, s, b, 0) where the shader's coordinate ``x = clamp((o + a) * s - b, 0, n - 1)`` gives
    every entry of a two-tap linear axis exactly (``i0 = min(floor(x), n - 1)``, ``i1 = min(i0 + 1,
    n - 1)``, ``w1 = x - i0``, ``w0 = 1 - w1``, or 0.5 and 0.5 where ``i0 == i1``: onnxruntime's
    border form), else None. Checked here in float64 with every intermediate a float32: then each
    of the shader's float32 operations is exact, and no rounding mode, division or fma
    contraction of a driver can move a tie. Power-of-two scales (a 2x upsample) pass, and their
    table is one entry per axis whatever the size."""
    out = len(idx)
    if n >= 2 ** 23 or out >= 2 ** 23:
        return None
    o = np.arange(out, dtype=np.float64)
    want = np.concatenate([idx, w], axis=1).astype(np.float32)
    for a, b in ((0.5, 0.5), (0.0, 0.0)):  # half_pixel (pytorch_half_pixel), asymmetric
        for s in {float(np.float32(n / out)), float(np.float32(out / n) ** -1)}:
            steps = [o + a]
            steps.append(steps[-1] * s)
            steps.append(steps[-1] - b)
            x = np.clip(steps[-1], 0, n - 1)
            i0 = np.minimum(np.floor(x), n - 1)
            i1 = np.minimum(i0 + 1, n - 1)
            w1 = x - i0
            w0 = 1 - w1
            steps += [w1, w0]
            if any(not np.array_equal(v, v.astype(np.float32)) for v in steps):
                continue
            same = i0 == i1
            w0[same], w1[same] = 0.5, 0.5
            if np.array_equal(np.stack([i0, i1, w0, w1], axis=1).astype(np.float32), want):
                return np.array([a, s, b, 0], np.float32)
    return None


def _axis_taps(rec: ops.ResizeRecord, xs: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per resized axis (H, W): each output's two source indices and weights as the reference
    computes them (nearest: its one index twice, weights 1 and 0), and the axis's source length."""
    axes = []
    for axis in (2, 3):
        idx, w = rec.taps(axis, xs[axis])
        if w is None:
            idx, w = np.repeat(idx[:, :1], 2, axis=1), np.tile([1.0, 0.0], (len(idx), 1))
        axes.append((np.asarray(idx, np.int64), np.asarray(w, np.float32), xs[axis]))
    return axes


def _resize_taps(rec: ops.ResizeRecord, axes: list[tuple[np.ndarray, np.ndarray, int]]) -> tuple[np.ndarray, int, int]:
    """The tap table of a resize, the index of its first column entry and the floats per entry.
    Per output row (then column, unless they are the same as the rows) the two source indices and
    their weights as the reference computes them: (i0, i1, w0, w1), or just (i0, w1) where every
    entry has i1 = min(i0 + 1, n - 1) and w0 = fl(1 - w1), which the shader derives exactly (a
    correctly rounded subtraction), a quarter of the bytes where rows and columns share; or, floats
    per entry 0, one entry per axis (:func:`_affine_taps`) from which the shader computes them
    exactly: 16 or 32 bytes instead of 8 per output row and column (a 2x upsample to 256x256:
    2,048 bytes, the same in a float model and its int8 model, whose weights are a quarter).
    ``axes``: :func:`_axis_taps`."""
    same = all(np.array_equal(a, b) for a, b in zip(axes[0][:2], axes[1][:2])) and axes[0][2] == axes[1][2]
    used = axes[:1] if same else axes
    affine = [_affine_taps(idx, w, n) for idx, w, n in used] if rec.mode == "linear" else [None]
    if all(t is not None for t in affine):
        return np.stack(affine), 0 if same else 1, 0
    short = all(np.array_equal(idx[:, 1], np.minimum(idx[:, 0] + 1, n - 1)) and idx.max() < 2 ** 24
                and np.array_equal(w[:, 0], np.float32(1) - w[:, 1]) for idx, w, n in used)
    rows = [np.stack([idx[:, 0], w[:, 1]], axis=1) if short else np.concatenate([idx, w], axis=1)
            for idx, w, _ in used]
    flat = np.concatenate(rows).astype(np.float32).reshape(-1)
    flat = np.concatenate([flat, np.zeros((-flat.size) % 4, np.float32)])
    return flat.reshape(-1, 4), 0 if same else len(axes[0][0]), 2 if short else 4


def _pairs_in_window(idx: np.ndarray, span: int) -> bool:
    """Whether every tap of each pair of outputs (2k, 2k + 1) of an axis lies within ``span``
    source pixels from the first output's first tap (resize.comp's BLOCK2 window): true of every
    upsample (consecutive outputs step at most one source pixel), checked here on the taps."""
    lo = idx[0::2, :1]
    pairs = [idx[0::2], idx[1::2]]
    return all(bool(((t >= lo[:len(t)]) & (t < lo[:len(t)] + span)).all()) for t in pairs)


def _resize(node: Node, graph: Graph, precision: str) -> list[Record]:
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = _float_tensor(graph, x), _shape(graph, y)
    if len(xs) != 4:
        raise Decline("only 2-D resize (rank 4 NCHW)")
    if xs[:2] != ys[:2]:
        raise Decline("resize of the batch or channel axis")
    rec = ops.require(node, graph, ops.ResizeRecord)
    if rec.mode not in ("nearest", "linear"):
        raise Decline(f"mode {rec.mode!r} (nearest and linear are supported)")
    if rec.antialias or rec.axes is not None:
        raise Decline("antialias / axes")
    if rec.keep_aspect_ratio_policy != "stretch":
        raise Decline("keep_aspect_ratio_policy")
    if rec.coordinate_mode == "tf_crop_and_resize":
        raise Decline("coordinate mode 'tf_crop_and_resize'")
    scales = list(rec.scales)
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1:
        raise Decline(f"scales {scales}")
    c4 = (xs[1] + 3) // 4
    axes = _axis_taps(rec, xs)
    span = 3 if rec.mode == "linear" else 2  # source pixels a pair of outputs may read per axis
    block = all(_pairs_in_window(idx, span) for idx, _, _ in axes)
    per = 2 if block else 1  # outputs per invocation along each axis
    groups, local = _grid_3d(-(-ys[3] // per), -(-ys[2] // per), xs[0] * c4)
    params = (("n", xs[0]), ("ih", xs[2]), ("iw", xs[3]), ("c4s", c4), ("oh", ys[2]), ("ow", ys[3]), ("c", xs[1]),
              ("linear", int(rec.mode == "linear")), ("oc4s", c4), ("oc4o", 0))
    table, tcol, tw = _resize_taps(rec, axes)
    params += (("tcol", tcol), ("tw", tw))
    taps = Binding("const", f"{node.name}/taps", table, True)
    choice = tuning.choose("reads", f"resize c{tuning.bucket(xs[1])} px{tuning.bucket(ys[2] * ys[3])}", node.name)
    defines = _input_texture(choice)
    if defines:
        defines["TEXT"] = 1  # the tap table through a buffer texture too
    if block:
        defines["BLOCK2"] = 1
    return [Kernel("resize", "compute/resize.comp", _variant(precision, **defines), params,
                   (Binding("in", x), Binding("out", y), taps), groups, local, node.name,
                   variant=choice.variant.name, variant_why=choice.why)]


def _concat(node: Node, graph: Graph, precision: str) -> list[Record]:
    y = node.outputs[0]
    ys = _shape(graph, y)
    r = len(ys)
    axis = ops.require(node, graph, ops.AxisRecord).axis
    o4, pa = view4(ys)
    ax4 = axis + 4 - r
    d0, d1, d2, oc4, oc = mem_dims(ys)
    mem_axes = [k for k in range(4) if k != pa]
    out: list[Record] = []
    offset = 0
    for idx, name in enumerate(node.inputs):
        if not name:
            continue
        shape = _float_tensor(graph, name)
        if len(shape) != r:
            raise Decline("Concat inputs of different ranks")
        e0, e1, e2, ic4, ic = mem_dims(shape)
        offs = [0, 0, 0]
        coff = 0
        if ax4 == pa:
            coff = offset
        else:
            offs[mem_axes.index(ax4)] = offset
        offset += shape[axis]
        lo = coff // 4
        nc4 = -(-(coff + ic) // 4) - lo
        groups, local = _grid_flat(e0 * e1 * e2 * nc4)
        b = Binding("const", f"{node.name}/in{idx}", pack(graph.constants[name])) if name in graph.constants \
            else Binding("in", name)
        params = (("e0", e0), ("e1", e1), ("e2", e2), ("in_c4s", ic4), ("in_c", ic), ("nc4", nc4), ("c4_lo", lo),
                  ("od1", d1), ("od2", d2), ("out_c4s", oc4), ("out_c", oc), ("o0", offs[0]), ("o1", offs[1]),
                  ("o2", offs[2]), ("coff", coff))
        choice = tuning.choose("reads", f"concat c{tuning.bucket(ic)} px{tuning.bucket(e0 * e1 * e2)}", node.name)
        index = {"CHANNELS": 1} if ax4 == pa else {}
        out.append(Kernel("concat", "compute/concat.comp",
                          _variant(precision, **_input_texture(choice), **index), params,
                          (b, Binding("out", y)), groups, local, node.name,
                          variant=choice.variant.name, variant_why=choice.why))
    return out


def _softmax(node: Node, graph: Graph, precision: str) -> list[Record]:
    x = node.inputs[0]
    xs = _float_tensor(graph, x)
    r = len(xs)
    axis = ops.require(node, graph, ops.AxisRecord).axis
    s4, pa = view4(xs)
    if axis + 4 - r != pa:
        packed = "channels" if r == 4 else "last"
        raise Decline(f"softmax along axis {axis}: only the packed axis ({packed}) is supported")
    if graph.opset < 13 and any(d != 1 for d in xs[axis + 1:]):
        raise Decline("opset < 13 softmax flattens the trailing axes")
    d0, d1, d2, c4, c = mem_dims(xs)
    rows = d0 * d1 * d2
    groups, local = _grid_flat(rows, 16)
    return [Kernel("softmax", "compute/softmax.comp", _variant(precision),
                   (("rows", rows), ("c4s", c4), ("c", c), ("log_out", int(node.op_type == "LogSoftmax"))),
                   (Binding("in", x), Binding("out", node.outputs[0])), groups, local, node.name)]


def _pad(node: Node, graph: Graph, precision: str) -> list[Record]:
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = _float_tensor(graph, x), _shape(graph, y)
    if len(xs) != 4:
        raise Decline("only rank 4 Pad")
    rec = ops.require(node, graph, ops.PadRecord)
    mode, p, value = rec.mode, list(rec.pads), rec.value
    if mode not in ("constant", "reflect", "edge"):
        raise Decline(f"Pad mode {mode!r}")
    if len(p) != 8 or p[0] or p[1] or p[4] or p[5] or min(p) < 0:
        raise Decline(f"pads {p}: only non-negative padding of H and W")
    c4 = (xs[1] + 3) // 4
    groups, local = _grid_3d(ys[3], ys[2], xs[0] * c4)
    params = (("n", xs[0]), ("ih", xs[2]), ("iw", xs[3]), ("c4s", c4), ("oh", ys[2]), ("ow", ys[3]), ("c", xs[1]),
              ("pt", p[2]), ("pl", p[3]), ("mode", {"constant": 0, "reflect": 1, "edge": 2}[mode]), ("value", value))
    return [Kernel("pad", "compute/pad.comp", _variant(precision), params,
                   (Binding("in", x), Binding("out", y)), groups, local, node.name)]


def _layout(node: Node, graph: Graph, precision: str) -> list[Record]:
    x, y = node.inputs[0], node.outputs[0]
    if x in graph.constants:
        raise Decline("layout op on a constant (folded on the host)")
    xs, ys = _float_tensor(graph, x), _shape(graph, y)
    view4(ys)
    if node.op_type == "Reshape" and len(node.inputs) > 1 and node.inputs[1] not in graph.constants:
        raise Decline("Reshape with a runtime shape")
    if node.op_type in ("Squeeze", "Unsqueeze") and len(node.inputs) > 1 and node.inputs[1] \
            and node.inputs[1] not in graph.constants:
        raise Decline(f"{node.op_type} with runtime axes")
    perm = [0, 1, 2, 3]
    mode = 0
    if node.op_type == "Transpose":
        r = len(xs)
        pr = list(ops.require(node, graph, ops.TransposeRecord).perm)
        if pr == list(range(r)):
            return [Alias(x, y, "layout", node.name)]
        lead = 4 - r
        perm = list(range(lead)) + [v + lead for v in pr]
        mode = 1
    elif same_layout(xs, ys):
        return [Alias(x, y, "layout", node.name)]
    i4, ipa = view4(xs)
    o4, opa = view4(ys)
    total = vec4_count(ys)
    groups, local = _grid_flat(total)
    params = (("os0", o4[0]), ("os1", o4[1]), ("os2", o4[2]), ("os3", o4[3]), ("opa", opa),
              ("is0", i4[0]), ("is1", i4[1]), ("is2", i4[2]), ("is3", i4[3]), ("ipa", ipa),
              ("mode", mode), ("perm0", perm[0]), ("perm1", perm[1]), ("perm2", perm[2]), ("perm3", perm[3]))
    return [Kernel("layout", "compute/relayout.comp", _variant(precision), params,
                   (Binding("in", x), Binding("out", y)), groups, local, node.name)]


_VIEW_KERNELS = {"compute/conv.comp", "compute/convtranspose.comp", "compute/convtranspose_tap.comp",
                 "compute/resize.comp", "compute/gemm.comp", "compute/depthwise.comp", "compute/pool.comp",
                 "compute/winograd_out.comp"}


def _record_index(records: list[Record]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(readers per tensor, index of the record writing each tensor, records writing each tensor:
    more than one where several dispatches share an output, as a Concat's copies do)."""
    readers: dict[str, int] = {}
    producer: dict[str, int] = {}
    writers: dict[str, int] = {}
    for i, r in enumerate(records):
        if isinstance(r, Alias):
            readers[r.src] = readers.get(r.src, 0) + 1
            continue
        for b in r.bindings:
            if b.role == "in":
                readers[b.name] = readers.get(b.name, 0) + 1
            elif b.role == "out":
                producer[b.name] = i
                writers[b.name] = writers.get(b.name, 0) + 1
    return readers, producer, writers


# Shaders whose finished sums go through compute/epilogue.glsl (ACT, GATE).
_EPILOGUE_KERNELS = {"compute/conv.comp", "compute/convtranspose.comp", "compute/convtranspose_tap.comp",
                     "compute/gemm.comp", "compute/depthwise.comp", "compute/winograd_out.comp"}
# Activations an epilogue applies as a gate, y = x * act(x) (GATE): Sigmoid, for SiLU.
GATE_ACTS = ("Sigmoid",)


def fuse_gates(records: list[Record], keep: set[str]) -> list[Record]:
    """SiLU written as two nodes, s = Sigmoid(t) then z = Mul(t, s) (YOLOv8's conv blocks), after
    the one kernel writing t, with an epilogue (conv, gemm, depthwise, ConvTranspose, Winograd's
    last pass) and no activation: that kernel writes z itself (GATE, z = t * Sigmoid(t)) and the unary and
    binary dispatches are dropped. Only when t and s are read by nothing else and not in ``keep``."""
    readers, producer, writers = _record_index(records)
    gate_codes = {ACT_CODES[a] for a in GATE_ACTS}
    muls: dict[frozenset[str], int] = {}
    for j, r in enumerate(records):
        if isinstance(r, Kernel) and r.kernel == "binary" and dict(r.defines).get("BOP") == ew.BOP_CODES["Mul"]:
            p = dict(r.params)
            ins = [b for b in r.bindings if b.role == "in" and b.transform is None]
            if len(ins) == 2 and not p["a_splat"] and not p["b_splat"] \
                    and all(p[f"a{k}"] == p[f"b{k}"] for k in range(4)):
                muls.setdefault(frozenset(b.name for b in ins), j)
    out: list[Record | None] = list(records)
    for i, u in enumerate(records):
        if not isinstance(u, Kernel) or u.kernel != "unary" or dict(u.defines).get("ACT") not in gate_codes:
            continue
        t, s = u.bindings[0].name, u.bindings[1].name
        j, p = muls.get(frozenset((t, s))), producer.get(t)
        if j is None or p is None or t == s or t in keep or s in keep or readers.get(t) != 2 \
                or readers.get(s) != 1 or out[j] is None:
            continue
        prod = out[p]
        if not isinstance(prod, Kernel) or prod.shader not in _EPILOGUE_KERNELS or writers[t] != 1 \
                or dict(prod.defines).get("ACT", 0) != 0 or "GATE" in dict(prod.defines):
            continue
        extra = dict(prod.defines, ACT=dict(u.defines)["ACT"], GATE=1)
        precision = "fp16" if extra.pop("FP16", 0) else "fp32"
        act = dict(u.params)
        params = tuple((k, act[k] if k in ("act0", "act1") else v) for k, v in prod.params)
        z = next(b.name for b in records[j].bindings if b.role == "out")
        bindings = tuple(Binding("out", z) if b.role == "out" else b for b in prod.bindings)
        out[p] = replace(prod, defines=_variant(precision, **extra), params=params, bindings=bindings)
        out[i] = out[j] = None
    return [r for r in out if r is not None]


def elide_concats(records: list[Record], keep: set[str]) -> list[Record]:
    """Channel Concat without copies where possible: an input written by one kernel only, which
    writes through an output view (``oc4s``/``oc4o``), read by nothing but the
    Concat and not in ``keep`` (tensors needed outside), at a channel offset that is a multiple
    of 4 (and with a multiple of 4 channels unless it is the last input), is written straight
    into the Concat's output; its copy dispatch is dropped. Other inputs keep their copy."""
    readers, producer, writers = _record_index(records)
    out: list[Record | None] = list(records)
    for i, r in enumerate(records):
        if not isinstance(r, Kernel) or r.kernel != "concat":
            continue
        p = dict(r.params)
        src, dst = r.bindings[0], r.bindings[1].name
        j = producer.get(src.name)
        if (src.role != "in" or src.transform is not None or j is None or src.name in keep
                or readers.get(src.name) != 1 or p["o0"] or p["o1"] or p["o2"] or p["coff"] % 4
                or (p["in_c"] % 4 and p["coff"] + p["in_c"] != p["out_c"])):
            continue
        prod = out[j]
        if not isinstance(prod, Kernel) or prod.shader not in _VIEW_KERNELS or writers[src.name] != 1:
            continue
        params = tuple((k, p["out_c4s"] if k == "oc4s" else p["coff"] // 4 if k == "oc4o" else v)
                       for k, v in prod.params)
        bindings = tuple(Binding("out", dst) if b.role == "out" else b for b in prod.bindings)
        out[j] = replace(prod, params=params, bindings=bindings)
        out[i] = None
    return [r for r in out if r is not None]


def variant_notes(records: list[Record]) -> list[str]:
    """``explain()``'s lines on the tuning variants the records run (kernel, variant, why, count)."""
    return tuning.explain_lines([(r.kernel, r.variant, r.variant_why) for r in records
                                 if isinstance(r, Kernel) and r.variant])


def _check(node: Node, graph: Graph) -> str | None:
    for o in node.outputs[:1]:
        if o:
            _shape(graph, o)  # declines a shape not known statically
    if node.op_type in compute_quant.INTEGER_OUTPUT_OPS or node.op_type in compute_exact.EXACT_OUTPUT_OPS:
        return None  # non-float tensors travel as floats holding their exact values (the generators check)
    return non_float32(graph, node.outputs[:1], "compute kernels handle float32 tensors only")


# Candidates per op type, most specialised first: (kernel name, generator(node, graph, precision)).
REGISTRY = KernelRegistry("compute", {
    "Conv": [("conv1x1", _conv1x1), ("depthwise", _depthwise), ("conv_winograd", _conv_winograd), ("conv", _conv)],
    # one kernel name for both (per-kernel verdicts and conformance cases name "convtranspose")
    "ConvTranspose": [("convtranspose", _convtranspose_taps), ("convtranspose", _convtranspose)],
    "Gemm": [("gemm", _gemm)],
    "MatMul": [("matmul", _matmul)],
    **{op: [("binary", _binary)] for op in ew.BINARY_OP_TYPES},
    **{op: [("unary", _unary)] for op in ew.UNARY_OP_TYPES},
    "MaxPool": [("pool", _pool)], "AveragePool": [("pool", _pool)],
    "GlobalAveragePool": [("globalpool", _globalpool)], "GlobalMaxPool": [("globalpool", _globalpool)],
    "Resize": [("resize", _resize)], "Upsample": [("resize", _resize)],
    "Concat": [("concat", _concat)],
    "Softmax": [("softmax", _softmax)], "LogSoftmax": [("softmax", _softmax)],
    "Pad": [("pad", _pad)],
    **{op: [("layout", _layout)] for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity")},
}, check=_check)


def generate(node: Node, graph: Graph, precision: str = "fp32",
             disabled: frozenset[str] = frozenset()) -> Generated | str:
    """(kernel name, records) of the first candidate that accepts ``node``, or the reason none
    does (:func:`.kernel_contract.generate` over :data:`REGISTRY`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    return _generate(REGISTRY, node, graph, precision, disabled)


def variants() -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """Every (shader, defines) variant the generators can emit: what the Vulkan path precompiles."""
    out = []
    fused = [0] + [ACT_CODES[op] for op in ew.FUSABLE]
    epilogues = [{"ACT": a} for a in fused] + [{"ACT": ACT_CODES[op], "GATE": 1} for op in GATE_ACTS]
    for prec in PRECISIONS:
        for epi in epilogues:
            for unit, shader in (("conv", "compute/conv.comp"), ("gemm", "compute/gemm.comp")):
                blockings = sorted({d for v in tuning.variants(unit) for d in shader_blockings(v.defines)})
                out += [(shader, _variant(prec, **epi, **dict(d))) for d in blockings]
            out.append(("compute/depthwise.comp", _variant(prec, **epi, BX=DW_BX)))
            for stride in (1, 2):
                out.append(("compute/depthwise.comp", _variant(prec, **epi, BX=DW3_BX, K3S=stride)))
            out.append(("compute/convtranspose.comp", _variant(prec, **epi, CB=CONVT_CB)))
            out += [("compute/convtranspose_tap.comp", _variant(prec, **epi, PX=CONVT_PX, CB=cb))
                    for cb in (1, CONVT_CB)]
        for act in ACT_CODES.values():
            out += [("compute/unary.comp", _variant(prec, ACT=act, **flat)) for flat in ({}, {"FLAT": 1})]
        # ACT 0 (a copy): the casts of compute_mixed, and their plain forms
        out += [("compute/unary.comp", _variant(prec, ACT=0, **flat, **wide))
                for flat in ({}, {"FLAT": 1}) for wide in ([{}, {"X32": 1}, {"Y32": 1}] if prec == "fp16" else [{}])]
        for bop in ew.BOP_CODES.values():
            for index in ({}, {"FLAT": 1}, {"CHAN": 1}, {"CHAN": 2}):
                out.append(("compute/binary.comp", _variant(prec, BOP=bop, **index)))
                if prec == "fp16":
                    out += [("compute/binary.comp", _variant(prec, BOP=bop, **index, **dict.fromkeys(wide, 1)))
                            for wide in (("A32",), ("B32",), ("A32", "B32"))]
        for shader in ("matmul", "pool", "globalpool", "resize", "concat", "softmax", "pad", "relayout"):
            out.append((f"compute/{shader}.comp", _variant(prec)))
        out.append(("compute/concat.comp", _variant(prec, CHANNELS=1)))
        out.append(("compute/resize.comp", _variant(prec, BLOCK2=1)))
        if prec == "fp16":  # the pooled mean kept fp32 (compute_mixed)
            out.append(("compute/globalpool.comp", _variant(prec, Y32=1)))
    # Winograd (fp32 only): its transforms, and the 16 GEMMs in one dispatch with the gemm blockings
    out.append(("compute/winograd_in.comp", _variant("fp32")))
    out += [("compute/winograd_out.comp", _variant("fp32", **epi)) for epi in epilogues]
    out += [("compute/gemm.comp", _variant("fp32", ACT=0, BATCH=1, **dict(d)))
            for d in sorted({d for v in tuning.variants("gemm") for d in shader_blockings(v.defines)})]
    return out + compute_ops.variants() + compute_exact.variants() + compute_quant.variants(PRECISIONS, fused)


__all__ = ["Alias", "Binding", "Decline", "GATE_ACTS", "Kernel", "REGISTRY", "Record", "as_storage", "elide_concats",
           "fuse_gates", "generate",
           "glsl_source",
           "mem_dims", "pack", "pack_params", "param_layout", "same_layout", "scratch_shapes", "storage_bytes",
           "unpack", "variant_notes", "winograd_weights",
           "variants",
           "vec4_count", "view4"]

# More generators (index-map layout ops, reductions, normalisations, ...) register themselves here;
# so do the bool / integer ones (ArgMax, comparisons, Where, Cast: compute_exact) and the quantized
# (int8-weight, Quantize/DequantizeLinear) candidates of compute_quant.
from . import compute_exact, compute_ops, compute_quant  # noqa: E402
