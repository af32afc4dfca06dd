// Convolution family (general, 1x1, strided, dilated, depthwise, grouped; Gemm/MatMul as a 1x1
// convolution over a 1x1 image). One draw per output tile: every fragment computes R_OUT output
// slices (4 channels each, one per render target) of one pixel and reads each input texel once
// for all of them. The preamble supplies the shape constants (KH KW SH SW DH DW PT PL and the X_*
// input geometry) and the generated conv_init(acc) / conv_pixel(n, g, iy, ix, k, acc), which
// unroll over input planes and output targets so that every weight index is uniform in the draw.
#define CUSTOM_SLOTS
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"

#include "gles3/conv_tap.glsl"

// No divergent branches: a tap outside the input reads a clamped texel and selects zero, so the
// weight indices stay uniform. With CONV_UNROLLED the preamble's conv_all() has every tap, input
// slice and target written out with constant weight indices (llvmpipe then loads each weight
// once per SIMD batch of fragments instead of once per fragment); otherwise loops call
// conv_pixel() per tap.
void compute_slots(int n, int g, int oy, int ox, out vec4 r[R_OUT]) {
    ACC4 acc[R_OUT];
    conv_init(g, acc);
#ifdef CONV_UNROLLED
    conv_all(n, g, oy, ox, acc);
#else
    int iy, ix;
    for (int ky = 0; ky < KH; ++ky) {
        for (int kx = 0; kx < KW; ++kx) {
            bool inside = tap(oy, ox, ky, kx, iy, ix);
            conv_pixel(n, g, iy, ix, ky * KW + kx, inside, acc);
        }
    }
#endif
#ifdef QW
    conv_dequant(acc);  // int8 weights: scale * sum + bias (gpubackend/paths/gles3/quant.py)
#endif
    for (int p = 0; p < R_OUT; ++p) r[p] = epilogue(acc[p]);
}

#include "gles3/main.glsl"
