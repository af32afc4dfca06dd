// ConvTranspose (group 1) as a gather: output pixel (oy, ox) sums input pixels iy with
// iy * SH - PT + ky * DH == oy. Same weight packing and generated conv_init / conv_pixel as
// conv.frag; one draw per output tile, R_OUT output slices per fragment.
#define CUSTOM_SLOTS
#include "common/elementwise.glsl"

// Tap (ky, kx) of output pixel (oy, ox): the input pixel it gathers (clamped) and whether
// one exists (inside the input, on the stride grid).
bool tap(int oy, int ox, int ky, int kx, out int iy, out int ix) {
    int ty = oy + PT - ky * DH;
    int tx = ox + PL - kx * DW;
    iy = ty >= 0 ? ty / SH : -1;
    ix = tx >= 0 ? tx / SW : -1;
    bool inside = ty >= 0 && tx >= 0 && iy * SH == ty && ix * SW == tx && iy < X_H && ix < X_W;
    iy = clamp(iy, 0, X_H - 1);
    ix = clamp(ix, 0, X_W - 1);
    return inside;
}

// Uniform control flow and unrolling as in conv.frag.
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
    for (int p = 0; p < R_OUT; ++p) r[p] = activate(acc[p]);
}

#include "gles3/main.glsl"
