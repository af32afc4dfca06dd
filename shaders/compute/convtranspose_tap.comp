// Transposed 2-D convolution whose kernel equals its stride (no padding, dilation 1): the taps do
// not overlap, so each output pixel is one input pixel times one tap's weights (a pointwise GEMM
// per tap). Each invocation computes PX input pixels times CB output-channel blocks of 4 for the
// tap of workgroup z (register blocking as in gemm.comp); workgroup y = output block, so the
// weight index is uniform in a workgroup. The generic gather (convtranspose.comp) ran this
// shape 60x slower than a 1x1 conv of the same work on llvmpipe and lavapipe.
// Weights: [co4][ky][kx][ci4] blocks of 4 vec4, co4 padded with zero blocks to a multiple of CB.
#if (defined(TEXW) || defined(TEXX)) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
#ifndef PX
#define PX 8
#endif
#ifndef CB
#define CB 2
#endif

PARAMS_BEGIN
    int rows; int ih; int iw; int ci4;
    int oh; int ow; int co4; int co;
    int kh; int kw; int cob; float act0; float act1;
    int oc4s; int oc4o;  // output view: vec4s per pixel, first block (a Concat writes in place)
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"

#include "compute/input_x.glsl"
#include "compute/weights.glsl"
layout(std430, binding = 3) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int r0 = int(gl_GlobalInvocationID.x) * PX;  // input pixels, batch folded in
    if (r0 >= p.rows) return;
    int co4_0 = int(gl_WorkGroupID.y) * CB;
    int tap = int(gl_WorkGroupID.z);
    int ky = tap / p.kw;
    int kx = tap - ky * p.kw;
    ACC4 acc[PX * CB];
    UNROLL for (int c = 0; c < CB; c++) {
        vec4 b = ACC_INIT(min(co4_0 + c, p.co4 - 1));
        UNROLL for (int i = 0; i < PX; i++) acc[c * PX + i] = b;
    }
    int xr[PX];
    UNROLL for (int i = 0; i < PX; i++) xr[i] = min(r0 + i, p.rows - 1) * p.ci4;
    int wstride = p.kh * p.kw * p.ci4 * 4;  // one co4 block of weights
    int wb = ((co4_0 * p.kh + ky) * p.kw + kx) * p.ci4 * 4;
    for (int c4 = 0; c4 < p.ci4; c4++) {
        vec4 xv[PX];
        UNROLL for (int i = 0; i < PX; i++) xv[i] = LDX(xr[i] + c4);
        UNROLL for (int c = 0; c < CB; c++) {
            int wi = wb + c * wstride + c4 * 4;
            vec4 w0 = WLOAD(wi), w1 = WLOAD(wi + 1), w2 = WLOAD(wi + 2), w3 = WLOAD(wi + 3);
            UNROLL for (int i = 0; i < PX; i++)
                acc[c * PX + i] += xv[i].x * w0 + xv[i].y * w1 + xv[i].z * w2 + xv[i].w * w3;
        }
    }
    int hw = p.ih * p.iw;
    int n = r0 / hw;  // the input pixel (n, iy, ix) of r0; later ones step along the row
    int iy = (r0 - n * hw) / p.iw;
    int ix = r0 - n * hw - iy * p.iw;
    UNROLL for (int i = 0; i < PX; i++) {
        if (r0 + i >= p.rows) break;
        if (i > 0 && ++ix == p.iw) {
            ix = 0;
            if (++iy == p.ih) { iy = 0; n++; }
        }
        int o = ((n * p.oh + iy * p.kh + ky) * p.ow + ix * p.kw + kx) * p.oc4s + p.oc4o;
        UNROLL for (int c = 0; c < CB; c++) {
            int co4 = co4_0 + c;
            if (co4 >= p.co4) break;
            ST(y, o + co4, tail_zero(epilogue(ACC_DONE(acc[c * PX + i], co4)), co4, p.co));
        }
    }
}
