// Pointwise (1x1, stride 1, no pad) convolution, Gemm and MatMul with a constant right operand:
// y[r][co4] = act(bias[co4] + sum_ci4 x[r][ci4] * W[co4][ci4]) over rows r (pixels or matrix rows).
// Each invocation computes PX rows times CB output blocks of 4 (register blocking).
// Weights: [co4][ci4] blocks of 4 vec4 (one vec4 of 4 outputs per input lane), co4 padded with
// zero blocks to a multiple of CB.
// SG (Vulkan only; GL ignores it): the weights of one input block are the same in every lane, and a
// software driver (lavapipe) compiles every storage-buffer load into a loop over the 8 SIMD lanes
// whatever the index; so each of 8 lanes loads a different weight vec4 and subgroupBroadcast
// (an element extract) hands them to all lanes: CB*4/8 weight loads per input block instead of CB*4.
#if defined(VULKAN) && defined(SG)
#extension GL_KHR_shader_subgroup_ballot : require
#define SG_ON
#if CB != 2 && CB != 4
#error "SG needs CB 2 or 4"
#endif
// output block c from round h, lanes o..o+3 (broadcast takes a constant lane)
#define SG_BLOCK(c, h, o) { \
    vec4 w0 = subgroupBroadcast(wl[h], o), w1 = subgroupBroadcast(wl[h], o + 1u); \
    vec4 w2 = subgroupBroadcast(wl[h], o + 2u), w3 = subgroupBroadcast(wl[h], o + 3u); \
    UNROLL for (int i = 0; i < PX; i++) acc[c * PX + i] += xv[i].x * w0 + xv[i].y * w1 + xv[i].z * w2 + xv[i].w * w3; }
#endif
#if (defined(TEXW) || defined(TEXX)) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
#ifndef PX
#define PX 4
#endif
#ifndef CB
#define CB 2
#endif

PARAMS_BEGIN
    int rows; int ci4; int co4; int co;
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
    int r0 = int(gl_GlobalInvocationID.x) * PX;
    int cb = int(gl_WorkGroupID.y);  // uniform in a workgroup: weight loads are uniform
#ifdef SG_ON
    // no early return: a broadcast reads lanes that must all be active; rows past the end are
    // clamped on load and skipped on store
    bool sg = gl_SubgroupSize >= 8u;  // 8 lanes hold the CB*4 weights in CB/2 rounds (CB even)
    int lane = int(gl_SubgroupInvocationID & 7u);
#else
    if (r0 >= p.rows) return;
#endif
    int co4_0 = cb * CB;
#ifdef BATCH
    int bz = int(gl_WorkGroupID.z);
    int xoff = bz * p.rows * p.ci4, woff = bz * p.cob * CB * p.ci4 * 4, yoff = bz * p.rows * p.oc4s;
#else
    const int xoff = 0, woff = 0, yoff = 0;
#endif
    ACC4 acc[PX * CB];
    UNROLL for (int c = 0; c < CB; c++) {
        vec4 b = ACC_INIT(min(co4_0 + c, p.co4 - 1));
        UNROLL for (int i = 0; i < PX; i++) acc[c * PX + i] = b;
    }
    int xr[PX];
    UNROLL for (int i = 0; i < PX; i++) xr[i] = xoff + min(r0 + i, p.rows - 1) * p.ci4;
    int wstride = p.ci4 * 4;
    for (int c4 = 0; c4 < p.ci4; c4++) {
        vec4 xv[PX];
        UNROLL for (int i = 0; i < PX; i++) xv[i] = LDX(xr[i] + c4);
#ifdef SG_ON
        if (sg) {
            vec4 wl[CB / 2];  // round h: lane l holds vec4 l % 4 of output block 2h + l / 4
            UNROLL for (int h = 0; h < CB / 2; h++) wl[h] = WLOAD(woff + (co4_0 + 2 * h + lane / 4) * wstride + c4 * 4 + lane % 4);
            SG_BLOCK(0, 0, 0u) SG_BLOCK(1, 0, 4u)
#if CB == 4
            SG_BLOCK(2, 1, 0u) SG_BLOCK(3, 1, 4u)
#endif
            continue;
        }
#endif
        UNROLL for (int c = 0; c < CB; c++) {
            int wi = woff + (co4_0 + c) * wstride + c4 * 4;
            vec4 w0, w1, w2, w3;
            WLOAD4(wi, w0, w1, w2, w3)
            UNROLL for (int i = 0; i < PX; i++)
                acc[c * PX + i] += xv[i].x * w0 + xv[i].y * w1 + xv[i].z * w2 + xv[i].w * w3;
        }
    }
    UNROLL for (int c = 0; c < CB; c++) {
        int co4 = co4_0 + c;
        if (co4 >= p.co4) break;
        UNROLL for (int i = 0; i < PX; i++) {
            if (r0 + i < p.rows) ST(y, yoff + (r0 + i) * p.oc4s + p.oc4o + co4, tail_zero(epilogue(ACC_DONE(acc[c * PX + i], co4)), co4, p.co));
        }
    }
}
