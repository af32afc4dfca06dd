// ConvTranspose, second pass (gpubackend/paths/gles3/kernels.py conv_transpose_taps). The first
// pass, a 1x1 convolution at the input's resolution, wrote every tap's products: slot
// (ky * KW + kx) * O_G + g of the input X holds W[:, slice g * R_OUT + p, ky, kx] . x in plane p.
// Output pixel (oy, ox) adds only the taps of its own stride phase, ky = (oy + PT) % SH + t * SH
// (t < TH = ceil(KH / SH)), read at input row (oy + PT - ky) / SH, then the bias and the fused
// activation. A tap outside the kernel or the input reads a clamped texel and selects zero, so
// NaN and Inf of the taps it does not use cannot leak in.
#define CUSTOM_SLOTS
#include "common/elementwise.glsl"

void compute_slots(int n, int g, int oy, int ox, out vec4 r[R_OUT]) {
    ACC4 acc[R_OUT];
    ct_bias(acc);
    int ty = oy + PT;
    int tx = ox + PL;
    int ky0 = ty - (ty / SH) * SH;
    int kx0 = tx - (tx / SW) * SW;
    for (int t = 0; t < TH; ++t) {
        int ky = ky0 + t * SH;
        int iy = (ty - ky0) / SH - t;
        bool in_y = ky < KH && iy >= 0 && iy < X_H;
        int cy = clamp(iy, 0, X_H - 1);
        for (int s = 0; s < TW; ++s) {
            int kx = kx0 + s * SW;
            int ix = (tx - kx0) / SW - s;
            bvec4 inside = bvec4(in_y && kx < KW && ix >= 0 && ix < X_W);
            int gq = (min(ky, KH - 1) * KW + min(kx, KW - 1)) * O_G + g;
            int cx = clamp(ix, 0, X_W - 1);
            for (int p = 0; p < R_OUT; ++p) acc[p] += mix(vec4(0.0), X_plane(p, n, gq, cy, cx), inside);
        }
    }
    for (int p = 0; p < R_OUT; ++p) r[p] = activate(acc[p]);
}

#include "gles3/main.glsl"
