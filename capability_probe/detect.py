"""Detection: what the GL and Vulkan drivers say, and feature tests that ask them.

Run inside the probe's child process (it loads drivers). Every function returns plain data:
``{"fingerprint": ..., "limits": ..., "features": ..., "extensions": [...]}``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from . import contexts
from .glutil import GLQuery, build_program, parse_gl_version

SOFTWARE_RE = re.compile(r"llvmpipe|softpipe|swrast|swiftshader|lavapipe|software rasterizer|"
                         r"microsoft basic render", re.IGNORECASE)

GL_INT_LIMITS = {
    "max_texture_size": 0x0D33,
    "max_renderbuffer_size": 0x84E8,
    "max_draw_buffers": 0x8824,
    "max_color_attachments": 0x8CDF,
    "max_texture_image_units": 0x8872,
    "max_vertex_attribs": 0x8869,
    "max_fragment_uniform_vectors": 0x8DFD,
    "max_vertex_uniform_vectors": 0x8DFB,
    "max_varying_vectors": 0x8DFC,
    "max_uniform_buffer_bindings": 0x8A2F,
    "max_fragment_uniform_blocks": 0x8A2D,
    "max_compute_work_group_invocations": 0x90EB,
    "max_compute_shared_memory_size": 0x8262,
    "max_compute_uniform_blocks": 0x91BB,
    "max_compute_texture_image_units": 0x91BC,
    "max_compute_shader_storage_blocks": 0x90DB,
    "max_shader_storage_buffer_bindings": 0x90DD,
}
GL_INT64_LIMITS = {"max_uniform_block_size": 0x8A30, "max_shader_storage_block_size": 0x90DE}
GL_INDEXED_LIMITS = {"max_compute_work_group_count": 0x91BE, "max_compute_work_group_size": 0x91BF}
GL_SHADING_LANGUAGE_VERSION = 0x8B8C
GL_FRAGMENT_SHADER, GL_VERTEX_SHADER = 0x8B30, 0x8B31
GL_HIGH_FLOAT, GL_MEDIUM_FLOAT, GL_HIGH_INT = 0x8DF2, 0x8DF1, 0x8DF5


def is_software(name: str) -> bool:
    return bool(SOFTWARE_RE.search(name or ""))


def gl_fingerprint(ctx: Any) -> dict[str, Any]:
    info = ctx.info
    version = str(info.get("GL_VERSION", ""))
    is_es, api, driver, driver_version = parse_gl_version(version)
    try:
        glsl = GLQuery().string(GL_SHADING_LANGUAGE_VERSION)
    except Exception:  # noqa: BLE001
        glsl = ""
    return {
        "vendor": str(info.get("GL_VENDOR", "")),
        "renderer": str(info.get("GL_RENDERER", "")),
        "version": version,
        "api": "gles" if is_es else "gl",
        "api_version": f"{api[0]}.{api[1]}",
        "driver": driver,
        "driver_version": driver_version,
        "glsl_version": glsl,
        "context": contexts.gl_context_kind(),
    }


def _renderable(ctx: Any, dtype: str) -> bool:
    try:
        tex = ctx.texture((4, 4), 4, dtype=dtype)
        try:
            fbo = ctx.framebuffer([tex])  # moderngl checks completeness
            fbo.release()
            return True
        finally:
            tex.release()
    except Exception:  # noqa: BLE001
        return False


_HIGHP_VS = "#version 100\nattribute vec2 a_pos;\nvoid main() { gl_Position = vec4(a_pos, 0.0, 1.0); }\n"
_HIGHP_FS = """#version 100
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
#else
precision mediump float;
#endif
uniform float u_one;
void main() {
    // 1 + 2^-20 is representable in fp32 (highp) but not in fp16 (mediump)
    float a = u_one + 0.00000095367431640625;
    gl_FragColor = vec4(a > u_one ? 1.0 : 0.0, 0.0, 0.0, 1.0);
}
"""


def _highp_test(ctx: Any) -> bool:
    """Does a fragment shader really compute in fp32? (asks the driver by running one)"""
    import numpy as np

    try:
        prog = build_program(ctx, "gl", _HIGHP_VS, _HIGHP_FS)
        prog["u_one"].value = 1.0
        tex = ctx.texture((1, 1), 4)
        fbo = ctx.framebuffer([tex])
        quad = np.array([-1, -1, 3, -1, -1, 3], dtype="f4")
        vbo = ctx.buffer(quad.tobytes())
        vao = ctx.vertex_array(prog, [(vbo, "2f", "a_pos")])
        fbo.use()
        vao.render()
        px = fbo.read(components=4)
        for o in (vao, vbo, fbo, tex, prog):
            o.release()
        return px[0] == 255
    except Exception:  # noqa: BLE001
        return False


def detect_gl(ctx: Any | None = None) -> dict[str, Any]:
    """Fingerprint, limits, features and extensions of the shared GL context."""
    ctx = ctx or contexts.gl_context()
    fp = gl_fingerprint(ctx)
    limits: dict[str, Any] = {}
    q = GLQuery()
    for name, pname in GL_INT_LIMITS.items():
        v = q.integer(pname)
        if v is not None and v >= 0:
            limits[name] = v
    for name, pname in GL_INT64_LIMITS.items():
        v = q.integer64(pname)
        if v is not None and v >= 0:
            limits[name] = v
    for name, pname in GL_INDEXED_LIMITS.items():
        v3 = q.indexed(pname)
        if v3 is not None and min(v3) >= 0:
            limits[name] = v3
    for key in ("GL_MAX_TEXTURE_SIZE", "GL_MAX_DRAW_BUFFERS", "GL_MAX_COLOR_ATTACHMENTS", "GL_MAX_UNIFORM_BLOCK_SIZE"):
        limits.setdefault(key[3:].lower(), ctx.info.get(key))
    hp = q.precision(GL_FRAGMENT_SHADER, GL_HIGH_FLOAT)
    if hp is not None:
        limits["fragment_highp_float_range"], limits["fragment_highp_float_precision"] = hp
    mp = q.precision(GL_FRAGMENT_SHADER, GL_MEDIUM_FLOAT)
    if mp is not None:
        limits["fragment_mediump_float_precision"] = mp[1]
    highp_run = _highp_test(ctx)
    limits["fragment_highp"] = bool(highp_run and (hp is None or hp[1] >= 23))
    exts = sorted(ctx.extensions)
    es = fp["api"] == "gles"
    v = int(ctx.version_code)
    features = {
        "rgba32f_renderable": _renderable(ctx, "f4"),
        "rgba16f_renderable": _renderable(ctx, "f2"),
        "fragment_highp": limits["fragment_highp"],
        "compute_shaders": v >= (310 if es else 430),
        "float_textures": (v >= 300) or "GL_OES_texture_float" in ctx.extensions,
        "software": is_software(fp["renderer"]),
    }
    tiers = []
    if features["compute_shaders"]:
        tiers.append("gles31")
    if v >= (300 if es else 330):
        tiers.append("gles3")
    tiers.append("gles2")
    features["tiers_offered"] = tiers
    return {"fingerprint": fp, "limits": limits, "features": features, "extensions": exts}


VK_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x13B5: "ARM", 0x5143: "Qualcomm",
              0x1010: "Imagination", 0x10005: "Mesa", 0x1AE0: "Google", 0x106B: "Apple", 0x14E4: "Broadcom"}


def _vk_version(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def _vulkaninfo_json(timeout: float = 20.0) -> dict[str, Any] | None:
    exe = shutil.which("vulkaninfo")
    if not exe:
        return None
    with tempfile.TemporaryDirectory(prefix="gpubackend-vkinfo-") as td:
        try:
            subprocess.run([exe, "--json"], cwd=td, capture_output=True, timeout=timeout,
                           env={**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", td)})
        except (OSError, subprocess.TimeoutExpired):
            return None
        files = [f for f in os.listdir(td) if f.endswith(".json")]
        if not files:
            return None
        with open(os.path.join(td, files[0]), encoding="utf-8") as f:
            return json.load(f)


def detect_vulkan(mgr: Any | None = None) -> dict[str, Any]:
    """Vulkan device properties, limits and 16/8-bit storage and float16 features.

    From ``vulkaninfo --json`` (package vulkan-tools) when installed, else Kompute's
    ``get_device_properties()`` (fewer fields).
    """
    fp: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    features: dict[str, Any] = {}
    exts: list[str] = []
    source = ""
    info = _vulkaninfo_json()
    if info:
        dev = info.get("capabilities", {}).get("device", {})
        props = dev.get("properties", {})
        p = props.get("VkPhysicalDeviceProperties", {})
        drv = props.get("VkPhysicalDeviceDriverProperties", {})
        vendor_id = int(p.get("vendorID", 0))
        dtype = str(p.get("deviceType", "")).replace("VK_PHYSICAL_DEVICE_TYPE_", "")
        driver_info = str(drv.get("driverInfo", ""))
        m = re.search(r"\d+\.\d+(?:\.\d+)?", driver_info)
        fp = {
            "vendor": f"{VK_VENDORS.get(vendor_id, 'unknown')} (0x{vendor_id:x})",
            "renderer": str(p.get("deviceName", "")),
            "device_id": f"0x{int(p.get('deviceID', 0)):x}",
            "device_type": dtype,
            "api_version": _vk_version(int(p.get("apiVersion", 0))),
            "driver": str(drv.get("driverName", "")),
            "driver_info": driver_info,
            "driver_version": m.group(0) if m else str(p.get("driverVersion", "")),
            "driver_version_raw": int(p.get("driverVersion", 0)),
        }
        limits = dict(p.get("limits", {}))
        f = dev.get("features", {})
        s16 = f.get("VkPhysicalDevice16BitStorageFeatures", {})
        s8 = f.get("VkPhysicalDevice8BitStorageFeatures", {})
        f16 = f.get("VkPhysicalDeviceShaderFloat16Int8Features", {})
        core = f.get("VkPhysicalDeviceFeatures", {})
        features = {
            "storageBuffer16BitAccess": bool(s16.get("storageBuffer16BitAccess", False)),
            "uniformAndStorageBuffer16BitAccess": bool(s16.get("uniformAndStorageBuffer16BitAccess", False)),
            "storagePushConstant16": bool(s16.get("storagePushConstant16", False)),
            "storageBuffer8BitAccess": bool(s8.get("storageBuffer8BitAccess", False)),
            "shaderFloat16": bool(f16.get("shaderFloat16", False)),
            "shaderInt8": bool(f16.get("shaderInt8", False)),
            "shaderInt16": bool(core.get("shaderInt16", False)),
            "shaderFloat64": bool(core.get("shaderFloat64", False)),
        }
        sub = props.get("VkPhysicalDeviceSubgroupProperties", {})
        if sub:
            limits["subgroupSize"] = sub.get("subgroupSize")
        exts = sorted(dev.get("extensions", {}).keys())
        source = "vulkaninfo"
    try:  # Kompute's own view (also what the vulkan path will use)
        mgr = mgr or contexts.kompute_manager(path="vulkan-detect")
        kprops = mgr.get_device_properties()
        if not fp:
            fp = {"renderer": str(kprops.get("device_name", "")), "vendor": "", "api_version": "",
                  "driver_version": "", "device_type": ""}
            source = "kompute"
        for k in ("max_work_group_count", "max_work_group_invocations", "max_work_group_size"):
            if k in kprops:
                limits.setdefault("kompute_" + k, list(kprops[k]) if isinstance(kprops[k], tuple) else kprops[k])
        features["kompute"] = True
    except Exception as e:  # noqa: BLE001
        features["kompute"] = False
        features["kompute_error"] = str(e)
    try:
        from importlib.metadata import version

        import kp  # noqa: F401

        fp["kp_version"] = version("kp")
    except Exception:  # noqa: BLE001
        fp.setdefault("kp_version", "")
    fp["source"] = source
    features["software"] = fp.get("device_type") == "CPU" or is_software(fp.get("renderer", ""))
    return {"fingerprint": fp, "limits": limits, "features": features, "extensions": exts}
