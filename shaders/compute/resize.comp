// Resize (nearest or bilinear) of the H and W axes of a PHWC4 tensor. The ONNX coordinate rules
// are applied on the host: taps[] holds, per output row (first oh entries) and column (from entry
// tcol: oh, or 0 where the columns' taps are the rows'), the two source indices and their weights
// (i0, i1, w0, w1) as the reference computes them, so a driver's division or fma rounding cannot
// move a tie (NVIDIA did, in shader arithmetic). tw 2: entries of two floats (i0, w1), with
// i1 = min(i0 + 1, n - 1) and w0 = 1 - w1 (the host checked both; a correctly rounded subtraction).
// tw 0 (linear only): one entry per axis (a, s, b, 0), the coordinate clamp((o + a) * s - b, 0, n - 1)
// whose every step the host found exact in float32 (e.g. a 2x upsample), and the taps from it.
#ifndef VULKAN
#extension GL_OES_gpu_shader5 : enable
#endif
#if (defined(TEXX) || defined(TEXT)) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
// precise: the bilinear sum must not be contracted into fma (it would round ties differently)
#if defined(VULKAN) || defined(GL_OES_gpu_shader5)
#define PRECISE precise
#else
#define PRECISE
#endif

PARAMS_BEGIN
    int n; int ih; int iw; int c4s;
    int oh; int ow; int c; int linear;
    int oc4s; int oc4o;  // output view: vec4s per pixel, first block (a Concat writes in place)
    int tcol; int tw;  // first column entry, floats per entry (0: per axis, from its coordinate)
PARAMS_END

#include "compute/input_x.glsl"
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };
#if defined(TEXT) && !defined(VULKAN)
layout(binding = 2) uniform highp samplerBuffer taps_tex;
#define TAP(i) texelFetch(taps_tex, i)
#else
layout(std430, binding = 2) readonly buffer T { vec4 taps[]; };
#define TAP(i) taps[i]
#endif

// the taps of output o of an axis of n source pixels whose entries start at entry
vec4 tap(int entry, int o, int n) {
    if (p.tw == 0) {
        vec4 t = TAP(entry);
        float last = float(n - 1);
        PRECISE float x = clamp((float(o) + t.x) * t.y - t.z, 0.0, last);
        float i0 = min(floor(x), last), i1 = min(i0 + 1.0, last);
        if (i0 == i1) return vec4(i0, i1, 0.5, 0.5);  // onnxruntime's border form
        PRECISE float w1 = x - i0;
        PRECISE float w0 = 1.0 - w1;
        return vec4(i0, i1, w0, w1);
    }
    int e = entry + o;
    if (p.tw == 4) return TAP(e);
    vec4 t = TAP(e >> 1);
    vec2 v = (e & 1) == 0 ? t.xy : t.zw;
    PRECISE float w0 = 1.0 - v.y;
    return vec4(v.x, min(v.x + 1.0, float(n - 1)), w0, v.y);
}

void main() {
    int ox = int(gl_GlobalInvocationID.x);
    int oy = int(gl_GlobalInvocationID.y);
    int z = int(gl_GlobalInvocationID.z);
    if (ox >= p.ow || oy >= p.oh || z >= p.n * p.c4s) return;
    int n = z / p.c4s;
    int c4 = z - n * p.c4s;
    vec4 ty = tap(0, oy, p.ih);
    vec4 tx = tap(p.tcol, ox, p.iw);
    int base = n * p.ih * p.iw;
    int y0 = int(ty.x), x0 = int(tx.x);
    vec4 v = LDX((base + y0 * p.iw + x0) * p.c4s + c4);
    if (p.linear != 0) {
        int y1 = int(ty.y), x1 = int(tx.y);
        vec4 v01 = LDX((base + y0 * p.iw + x1) * p.c4s + c4);
        vec4 v10 = LDX((base + y1 * p.iw + x0) * p.c4s + c4);
        vec4 v11 = LDX((base + y1 * p.iw + x1) * p.c4s + c4);
        // the four products summed in onnxruntime's order (its bilinear kernel), so the ties of
        // a quantized model round as there
        PRECISE vec4 r = (tx.z * ty.z) * v;
        r += (tx.w * ty.z) * v01;
        r += (tx.z * ty.w) * v10;
        r += (tx.w * ty.w) * v11;
        v = r;
    }
    ST(y, ((n * p.oh + oy) * p.ow + ox) * p.oc4s + p.oc4o + c4, tail_zero(v, c4, p.c));
}
