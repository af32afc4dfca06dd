// Depthwise convolution (groups == channels, one filter per channel) on PHWC4 tensors with bias
// and fused activation. Each invocation computes BX output pixels along x of one channel block.
// Weights: [c4][ky][kx] vec4. Dispatch: x over pixel blocks, workgroup y = channel block,
// z = batch (uniform weight loads, see conv.comp).
#if (defined(TEXW) || defined(TEXX)) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
#ifndef BX
#define BX 4
#endif

PARAMS_BEGIN
    int n; int ih; int iw; int c4s;
    int oh; int ow; int c;
    int kh; int kw; int sh; int sw;
    int pt; int pl; int dh; int dw;
    float act0; float act1;
    int oc4s; int oc4o;  // output view: vec4s per pixel, first block (a Concat writes in place)
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"

#include "compute/input_x.glsl"
#include "compute/weights.glsl"
layout(std430, binding = 3) writeonly buffer Y { SVEC4 y[]; };

#ifdef K3S
// 3x3, dilation 1, stride K3S: each input row strip is loaded once and feeds all BX outputs
// and all 3 horizontal taps (loads, not FMAs, bound software drivers).
#define SPAN ((BX - 1) * K3S + 3)
void main() {
    int owb = (p.ow + BX - 1) / BX;
    int pb = int(gl_GlobalInvocationID.x);
    int oy = pb / owb;
    int ox0 = (pb - oy * owb) * BX;
    if (oy >= p.oh) return;
    int n = int(gl_WorkGroupID.z);
    int c4 = int(gl_WorkGroupID.y);
    ACC4 acc[BX];
    vec4 b = ACC_INIT(c4);
    UNROLL for (int i = 0; i < BX; i++) acc[i] = b;
    int ixb = ox0 * K3S - p.pl;
    for (int ky = 0; ky < 3; ky++) {
        int iy = oy * K3S - p.pt + ky;
        if (iy < 0 || iy >= p.ih) continue;
        int row = (n * p.ih + iy) * p.iw;
        vec4 strip[SPAN];
        UNROLL for (int j = 0; j < SPAN; j++) {
            int xx = ixb + j;
            strip[j] = (xx >= 0 && xx < p.iw) ? LDX((row + clamp(xx, 0, p.iw - 1)) * p.c4s + c4) : vec4(0.0);
        }
        int wi = (c4 * 3 + ky) * 3;
        vec4 w0 = WLOAD(wi), w1 = WLOAD(wi + 1), w2 = WLOAD(wi + 2);
        UNROLL for (int i = 0; i < BX; i++)
            acc[i] += strip[i * K3S] * w0 + strip[i * K3S + 1] * w1 + strip[i * K3S + 2] * w2;
    }
    UNROLL for (int i = 0; i < BX; i++) {
        if (ox0 + i < p.ow) ST(y, ((n * p.oh + oy) * p.ow + ox0 + i) * p.oc4s + p.oc4o + c4, tail_zero(epilogue(ACC_DONE(acc[i], c4)), c4, p.c));
    }
}
#else
void main() {
    int owb = (p.ow + BX - 1) / BX;
    int pb = int(gl_GlobalInvocationID.x);
    int oy = pb / owb;
    int ox0 = (pb - oy * owb) * BX;
    if (oy >= p.oh) return;
    int n = int(gl_WorkGroupID.z);
    int c4 = int(gl_WorkGroupID.y);
    ACC4 acc[BX];
    vec4 b = ACC_INIT(c4);
    UNROLL for (int i = 0; i < BX; i++) acc[i] = b;
    for (int ky = 0; ky < p.kh; ky++) {
        int iy = oy * p.sh - p.pt + ky * p.dh;
        if (iy < 0 || iy >= p.ih) continue;
        int row = (n * p.ih + iy) * p.iw;
        for (int kx = 0; kx < p.kw; kx++) {
            vec4 wv = WLOAD((c4 * p.kh + ky) * p.kw + kx);
            UNROLL for (int i = 0; i < BX; i++) {
                int xx = (ox0 + i) * p.sw - p.pl + kx * p.dw;
                bool ok = xx >= 0 && xx < p.iw;
                vec4 xv = LDX((row + clamp(xx, 0, p.iw - 1)) * p.c4s + c4);
                acc[i] += ok ? xv * wv : vec4(0.0);
            }
        }
    }
    UNROLL for (int i = 0; i < BX; i++) {
        if (ox0 + i < p.ow) ST(y, ((n * p.oh + oy) * p.ow + ox0 + i) * p.oc4s + p.oc4o + c4, tail_zero(epilogue(ACC_DONE(acc[i], c4)), c4, p.c));
    }
}
#endif
