// Transposed 2-D convolution on PHWC4 tensors with bias and fused activation, written as a
// gather: each output pixel sums the input pixels whose stride grid reaches it. Groups arrive
// as a dense block-diagonal weight. Each invocation computes CB output-channel blocks of 4.
// Weights: [co4][ky][kx][ci4] blocks of 4 vec4, co4 padded with zero blocks to a multiple of CB.
#if (defined(TEXW) || defined(TEXX)) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
#ifndef CB
#define CB 2
#endif

PARAMS_BEGIN
    int n; int ih; int iw; int ci4;
    int oh; int ow; int co4; int co;
    int kh; int kw; int sh; int sw;
    int pt; int pl; int dh; int dw;
    int cob; float act0; float act1;
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
    int pix = int(gl_GlobalInvocationID.x);  // workgroup y = output block, z = batch (uniform weights)
    int oy = pix / p.ow;
    int ox = pix - oy * p.ow;
    if (oy >= p.oh) return;
    int n = int(gl_WorkGroupID.z);
    int co4_0 = int(gl_WorkGroupID.y) * CB;
    ACC4 acc[CB];
    UNROLL for (int c = 0; c < CB; c++) acc[c] = ACC_INIT(min(co4_0 + c, p.co4 - 1));
    int wstride = p.kh * p.kw * p.ci4 * 4;
    // Only taps with (o + pad - k * dilation) divisible by the stride contribute; with dilation 1
    // they are every stride-th tap from the first one, so the loops visit just those.
    int ty0 = oy + p.pt, tx0 = ox + p.pl;
    int kys = p.dh == 1 ? p.sh : 1, kxs = p.dw == 1 ? p.sw : 1;
    for (int ky = p.dh == 1 ? ty0 % p.sh : 0; ky < p.kh; ky += kys) {
        int ty = ty0 - ky * p.dh;
        if (ty < 0) break;  // decreases with ky
        int iy = ty / p.sh;
        if (iy * p.sh != ty || iy >= p.ih) continue;
        for (int kx = p.dw == 1 ? tx0 % p.sw : 0; kx < p.kw; kx += kxs) {
            int tx = tx0 - kx * p.dw;
            if (tx < 0) break;
            int ix = tx / p.sw;
            if (ix * p.sw != tx || ix >= p.iw) continue;
            int xi = ((n * p.ih + iy) * p.iw + ix) * p.ci4;
            int wb = ((co4_0 * p.kh + ky) * p.kw + kx) * p.ci4 * 4;
            for (int c4 = 0; c4 < p.ci4; c4++) {
                vec4 xv = LDX(xi + c4);
                UNROLL for (int c = 0; c < CB; c++) {
                    int wi = wb + c * wstride + c4 * 4;
                    acc[c] += xv.x * WLOAD(wi) + xv.y * WLOAD(wi + 1) + xv.z * WLOAD(wi + 2) + xv.w * WLOAD(wi + 3);
                }
            }
        }
    }
    UNROLL for (int c = 0; c < CB; c++) {
        int co4 = co4_0 + c;
        if (co4 >= p.co4) break;
        ST(y, ((n * p.oh + oy) * p.ow + ox) * p.oc4s + p.oc4o + co4, tail_zero(epilogue(ACC_DONE(acc[c], co4)), co4, p.co));
    }
}
