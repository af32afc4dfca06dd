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

// the bilinear sum of one output's four taps, in onnxruntime's order (its bilinear kernel), so
// the ties of a quantized model round as there
vec4 bilinear(vec4 ty, vec4 tx, vec4 v00, vec4 v01, vec4 v10, vec4 v11) {
    PRECISE vec4 r = (tx.z * ty.z) * v00;
    r += (tx.w * ty.z) * v01;
    r += (tx.z * ty.w) * v10;
    r += (tx.w * ty.w) * v11;
    return r;
}

#ifdef BLOCK2
// BLOCK2: a 2x2 block of outputs per invocation from one 3x3 window of source pixels (rows and
// columns from the block's first taps on, clamped): the host checked that every tap of each pair
// of outputs (2k, 2k + 1) of both axes lies in it, as it does for any upsample. 9 loads instead of
// 16 (linear), 4 (nearest); the same sums in the same order.
vec4 w00, w01, w02, w10, w11, w12, w20, w21, w22;

vec4 pick3(vec4 a, vec4 b, vec4 c, int d) { return d == 0 ? a : (d == 1 ? b : c); }

// the window's pixel at row offset dy, column offset dx
vec4 at(int dy, int dx) {
    return pick3(pick3(w00, w10, w20, dy), pick3(w01, w11, w21, dy), pick3(w02, w12, w22, dy), dx);
}

vec4 resized(vec4 ty, vec4 tx, int r0, int c0) {
    int y0 = int(ty.x) - r0, x0 = int(tx.x) - c0;
    if (p.linear == 0) return at(y0, x0);
    int y1 = int(ty.y) - r0, x1 = int(tx.y) - c0;
    return bilinear(ty, tx, at(y0, x0), at(y0, x1), at(y1, x0), at(y1, x1));
}

void main() {
    int ox = 2 * int(gl_GlobalInvocationID.x);
    int oy = 2 * int(gl_GlobalInvocationID.y);
    int z = int(gl_GlobalInvocationID.z);
    if (ox >= p.ow || oy >= p.oh || z >= p.n * p.c4s) return;
    int n = z / p.c4s;
    int c4 = z - n * p.c4s;
    bool right = ox + 1 < p.ow, down = oy + 1 < p.oh;
    vec4 ty0 = tap(0, oy, p.ih), ty1 = tap(0, down ? oy + 1 : oy, p.ih);
    vec4 tx0 = tap(p.tcol, ox, p.iw), tx1 = tap(p.tcol, right ? ox + 1 : ox, p.iw);
    int r0 = int(ty0.x), c0 = int(tx0.x);
    int r1 = min(r0 + 1, p.ih - 1), r2 = min(r0 + 2, p.ih - 1);
    int c1 = min(c0 + 1, p.iw - 1), c2 = min(c0 + 2, p.iw - 1);
    int base = n * p.ih * p.iw;
    w00 = LDX((base + r0 * p.iw + c0) * p.c4s + c4);
    w01 = LDX((base + r0 * p.iw + c1) * p.c4s + c4);
    w10 = LDX((base + r1 * p.iw + c0) * p.c4s + c4);
    w11 = LDX((base + r1 * p.iw + c1) * p.c4s + c4);
    if (p.linear != 0) {
        w02 = LDX((base + r0 * p.iw + c2) * p.c4s + c4);
        w12 = LDX((base + r1 * p.iw + c2) * p.c4s + c4);
        w20 = LDX((base + r2 * p.iw + c0) * p.c4s + c4);
        w21 = LDX((base + r2 * p.iw + c1) * p.c4s + c4);
        w22 = LDX((base + r2 * p.iw + c2) * p.c4s + c4);
    } else {  // a nearest pair of outputs reads one or two neighbouring source pixels
        w02 = w01; w12 = w11; w20 = w10; w21 = w11; w22 = w11;
    }
    int o = ((n * p.oh + oy) * p.ow + ox) * p.oc4s + p.oc4o + c4;
    ST(y, o, tail_zero(resized(ty0, tx0, r0, c0), c4, p.c));
    if (right) ST(y, o + p.oc4s, tail_zero(resized(ty0, tx1, r0, c0), c4, p.c));
    if (down) {
        int o1 = o + p.ow * p.oc4s;
        ST(y, o1, tail_zero(resized(ty1, tx0, r0, c0), c4, p.c));
        if (right) ST(y, o1 + p.oc4s, tail_zero(resized(ty1, tx1, r0, c0), c4, p.c));
    }
}
#else
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
        v = bilinear(ty, tx, v, v01, v10, v11);
    }
    ST(y, ((n * p.oh + oy) * p.ow + ox) * p.oc4s + p.oc4o + c4, tail_zero(v, c4, p.c));
}
#endif
