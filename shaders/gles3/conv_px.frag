// Convolution (group 1), first pass of conv_px (gpubackend/paths/gles3/conv_px.py): a fragment
// computes R_OUT / PX output slices (4 channels each) at PX neighbouring pixels, so each weight it
// loads serves PX pixels (llvmpipe loads a uniform-block weight lane by lane; that load, not the
// multiply-add, was the conv's cost). Render target sx * PX + q holds output slice
// g * R_OUT / PX + sx at pixel PX * x + q, which the second pass (conv_px_unpack.frag) puts in place.
// The preamble supplies the shape constants, conv_init(acc) (the bias) and either conv_all()
// (every tap written out, CONV_UNROLLED) or conv_tap() per tap.
#define CUSTOM_SLOTS
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"
#include "gles3/conv_tap.glsl"

void compute_slots(int n, int g, int oy, int qx, out vec4 r[R_OUT]) {
    ACC4 acc[R_OUT];
    conv_init(acc);
    int ox0 = qx * PX;
#ifdef CONV_UNROLLED
    conv_all(n, oy, ox0, acc);
#else
    for (int ky = 0; ky < KH; ++ky) {
        for (int kx = 0; kx < KW; ++kx) conv_tap(n, oy, ox0, ky, kx, acc);
    }
#endif
    for (int q = 0; q < R_OUT; ++q) r[q] = epilogue(acc[q]);
}

#include "gles3/main.glsl"
