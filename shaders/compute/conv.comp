// General 2-D convolution on PHWC4 tensors with bias and fused activation; groups arrive as a
// dense block-diagonal weight. Each invocation computes BX output pixels along x times CB
// output-channel blocks of 4 (register blocking: every input vec4 loaded feeds 4*CB outputs).
// Weights: [co4][ky][kx][ci4] blocks of 4 vec4 (one vec4 of 4 output channels per input lane),
// co4 padded with zero blocks to a multiple of CB.
// Dispatch: x over pixel blocks (row-major, BX pixels each), workgroup y = output block, z =
// batch, so the weight index is the same in every lane of a workgroup. That does not make the
// load cheaper on Mesa 22.3: llvmpipe and lavapipe compile every storage-buffer load into a loop
// over the SIMD lanes whatever its index (docs/performance.md, "What lavapipe / llvmpipe compile
// the kernels into"); hence SG below, and K3S.
// K3S (3x3, dilation 1, stride K3S in both axes): per kernel row and input block, the SPAN input
// pixels that the BX outputs read are loaded once and feed all 3 horizontal taps (SPAN loads
// instead of 3 * BX: input loads, not multiply/adds, bound the software drivers).
// SG (Vulkan only; GL ignores it): as in gemm.comp, each of 8 lanes loads a different weight vec4
// and subgroupBroadcast hands them to all lanes; every lane then stays active (no early return,
// rows outside the input read clamped and zeroed) since a broadcast reads the other lanes.
#if defined(VULKAN) && defined(SG)
#extension GL_KHR_shader_subgroup_ballot : require
#define SG_ON
#if CB != 2 && CB != 4
#error "SG needs CB 2 or 4"
#endif
#define SG_BLOCK(c, h, o) { \
    vec4 w0 = subgroupBroadcast(wl[h], o), w1 = subgroupBroadcast(wl[h], o + 1u); \
    vec4 w2 = subgroupBroadcast(wl[h], o + 2u), w3 = subgroupBroadcast(wl[h], o + 3u); \
    UNROLL for (int i = 0; i < BX; i++) { vec4 xi = XV(i); acc[c * BX + i] += xi.x * w0 + xi.y * w1 + xi.z * w2 + xi.w * w3; } }
#endif
#if (defined(TEXW) || defined(TEXX)) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
#ifndef BX
#define BX 4
#endif
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

#ifdef K3S
#define SPAN ((BX - 1) * K3S + 3)
#define XV(i) xs[(i) * K3S + kx]
#else
#define XV(i) xv[i]
#endif
void main() {
    int owb = (p.ow + BX - 1) / BX;
    int pb = int(gl_GlobalInvocationID.x);
    int oy = pb / owb;
    int ox0 = (pb - oy * owb) * BX;
#ifdef SG_ON
    bool sg = gl_SubgroupSize >= 8u;  // 8 lanes hold the CB*4 weights in CB/2 rounds
    int lane = int(gl_SubgroupInvocationID & 7u);
    bool live = oy < p.oh;
    if (!sg && !live) return;
    oy = min(oy, p.oh - 1);
#else
    if (oy >= p.oh) return;
#endif
    int n = int(gl_WorkGroupID.z);
    int co4_0 = int(gl_WorkGroupID.y) * CB;
    ACC4 acc[BX * CB];
    UNROLL for (int c = 0; c < CB; c++) {
        vec4 b = ACC_INIT(min(co4_0 + c, p.co4 - 1));
        UNROLL for (int i = 0; i < BX; i++) acc[c * BX + i] = b;
    }
    int wstride = p.kh * p.kw * p.ci4 * 4;  // one co4 block of weights
#ifdef K3S
    int ixb = ox0 * K3S - p.pl;
    for (int ky = 0; ky < 3; ky++) {
        int iy = oy * K3S - p.pt + ky;
#ifdef SG_ON
        bool oky = iy >= 0 && iy < p.ih;  // no divergent continue: the broadcast needs every lane
        if (!sg && !oky) continue;
        iy = clamp(iy, 0, p.ih - 1);
#else
        bool oky = true;
        if (iy < 0 || iy >= p.ih) continue;
#endif
        int row = (n * p.ih + iy) * p.iw;
        int ix[SPAN];
        bool ok[SPAN];
        UNROLL for (int j = 0; j < SPAN; j++) {
            int xx = ixb + j;
            ok[j] = oky && xx >= 0 && xx < p.iw;
            ix[j] = (row + clamp(xx, 0, p.iw - 1)) * p.ci4;
        }
        int wb = (co4_0 * 9 + ky * 3) * p.ci4 * 4;
        for (int c4 = 0; c4 < p.ci4; c4++) {
            vec4 xs[SPAN];
#ifdef SG_ON
            if (sg) {
                UNROLL for (int j = 0; j < SPAN; j++) {
                    vec4 v = LDX(ix[j] + c4);  // clamped address: loaded by every lane, then zeroed
                    xs[j] = ok[j] ? v : vec4(0.0);
                }
                // the three taps written out, as below
#if CB == 4
#define SG_BLOCKS SG_BLOCK(0, 0, 0u) SG_BLOCK(1, 0, 4u) SG_BLOCK(2, 1, 0u) SG_BLOCK(3, 1, 4u)
#else
#define SG_BLOCKS SG_BLOCK(0, 0, 0u) SG_BLOCK(1, 0, 4u)
#endif
#define SG_TAP(KX) { const int kx = KX; \
                    int wk = wb + kx * p.ci4 * 4 + c4 * 4; \
                    vec4 wl[CB / 2]; \
                    UNROLL for (int h = 0; h < CB / 2; h++) wl[h] = WLOAD(wk + (2 * h + lane / 4) * wstride + lane % 4); \
                    SG_BLOCKS }
                // round h: lane l holds vec4 l % 4 of output block 2h + l / 4
                SG_TAP(0) SG_TAP(1) SG_TAP(2)
                continue;
            }
#endif
            UNROLL for (int j = 0; j < SPAN; j++) xs[j] = ok[j] ? LDX(ix[j] + c4) : vec4(0.0);
            // the three taps written out: under a loop over kx, XV(i) is no constant index and
            // lavapipe keeps xs[] in memory, read lane by lane (bx8cb2k3 on an 8 -> 8 channel
            // layer at 256x256: 14.8 ms looped, 8.3 ms written out)
#define K3_TAP(KX) { const int kx = KX; \
                UNROLL for (int c = 0; c < CB; c++) { \
                    int wi = wb + c * wstride + kx * p.ci4 * 4 + c4 * 4; \
                    vec4 w0, w1, w2, w3; \
                    WLOAD4(wi, w0, w1, w2, w3) \
                    UNROLL for (int i = 0; i < BX; i++) { \
                        vec4 xi = XV(i); \
                        acc[c * BX + i] += xi.x * w0 + xi.y * w1 + xi.z * w2 + xi.w * w3; \
                    } \
                } }
            K3_TAP(0) K3_TAP(1) K3_TAP(2)
        }
    }
#else
    for (int ky = 0; ky < p.kh; ky++) {
        int iy = oy * p.sh - p.pt + ky * p.dh;
#ifdef SG_ON
        bool oky = iy >= 0 && iy < p.ih;  // no divergent continue: the broadcast needs every lane
        if (!sg && !oky) continue;
        iy = clamp(iy, 0, p.ih - 1);
#else
        if (iy < 0 || iy >= p.ih) continue;
#endif
        int row = (n * p.ih + iy) * p.iw;
        for (int kx = 0; kx < p.kw; kx++) {
            int ix[BX];
            bool ok[BX];
            UNROLL for (int i = 0; i < BX; i++) {
                int xx = (ox0 + i) * p.sw - p.pl + kx * p.dw;
                ok[i] = xx >= 0 && xx < p.iw;
#ifdef SG_ON
                ok[i] = ok[i] && oky;
#endif
                ix[i] = (row + clamp(xx, 0, p.iw - 1)) * p.ci4;
            }
            int wb = ((co4_0 * p.kh + ky) * p.kw + kx) * p.ci4 * 4;
            for (int c4 = 0; c4 < p.ci4; c4++) {
                vec4 xv[BX];
#ifdef SG_ON
                if (sg) {
                    UNROLL for (int i = 0; i < BX; i++) {
                        vec4 v = LDX(ix[i] + c4);  // clamped address: loaded by every lane, then zeroed
                        xv[i] = ok[i] ? v : vec4(0.0);
                    }
                    vec4 wl[CB / 2];  // round h: lane l holds vec4 l % 4 of output block 2h + l / 4
                    UNROLL for (int h = 0; h < CB / 2; h++) wl[h] = WLOAD(wb + (2 * h + lane / 4) * wstride + c4 * 4 + lane % 4);
                    SG_BLOCK(0, 0, 0u) SG_BLOCK(1, 0, 4u)
#if CB == 4
                    SG_BLOCK(2, 1, 0u) SG_BLOCK(3, 1, 4u)
#endif
                    continue;
                }
#endif
                UNROLL for (int i = 0; i < BX; i++) xv[i] = ok[i] ? LDX(ix[i] + c4) : vec4(0.0);
                UNROLL for (int c = 0; c < CB; c++) {
                    int wi = wb + c * wstride + c4 * 4;
                    vec4 w0, w1, w2, w3;
                    WLOAD4(wi, w0, w1, w2, w3)
                    UNROLL for (int i = 0; i < BX; i++)
                        acc[c * BX + i] += xv[i].x * w0 + xv[i].y * w1 + xv[i].z * w2 + xv[i].w * w3;
                }
            }
        }
    }
#endif
    UNROLL for (int c = 0; c < CB; c++) {
        int co4 = co4_0 + c;
        if (co4 >= p.co4) break;
        UNROLL for (int i = 0; i < BX; i++) {
#ifdef SG_ON
            if (!live) break;
#endif
            if (ox0 + i < p.ow) ST(y, ((n * p.oh + oy) * p.ow + ox0 + i) * p.oc4s + p.oc4o + co4, tail_zero(epilogue(ACC_DONE(acc[c * BX + i], co4)), co4, p.co));
        }
    }
}
