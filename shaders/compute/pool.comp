// MaxPool / AveragePool on PHWC4 tensors. Average divides by the whole window clipped to the
// padded input (count_include_pad = 1) or by the in-bounds taps only (count_include_pad = 0).
#if defined(TEXX) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"
#include "common/elementwise.glsl"

PARAMS_BEGIN
    int n; int ih; int iw; int c4s;
    int oh; int ow; int c;
    int kh; int kw; int sh; int sw;
    int pt; int pl; int dh; int dw;
    int pb; int pr; int is_max; int include_pad;
    int oc4s; int oc4o;  // output view: vec4s per pixel, first block (a Concat writes in place)
PARAMS_END

#include "compute/input_x.glsl"
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int ox = int(gl_GlobalInvocationID.x);
    int oy = int(gl_GlobalInvocationID.y);
    int z = int(gl_GlobalInvocationID.z);
    if (ox >= p.ow || oy >= p.oh || z >= p.n * p.c4s) return;
    int n = z / p.c4s;
    int c4 = z - n * p.c4s;
    vec4 acc = p.is_max != 0 ? vec4(uintBitsToFloat(0xff800000u)) : vec4(0.0);  // -Inf
    int taps = 0;
    int padded = 0;
    for (int ky = 0; ky < p.kh; ky++) {
        int iy = oy * p.sh - p.pt + ky * p.dh;
        bool yin = iy >= 0 && iy < p.ih;
        bool ypad = iy >= -p.pt && iy < p.ih + p.pb;
        for (int kx = 0; kx < p.kw; kx++) {
            int ix = ox * p.sw - p.pl + kx * p.dw;
            if (ypad && ix >= -p.pl && ix < p.iw + p.pr) padded++;
            if (!yin || ix < 0 || ix >= p.iw) continue;
            vec4 v = LDX(((n * p.ih + iy) * p.iw + ix) * p.c4s + c4);
            acc = p.is_max != 0 ? ew_fmax(acc, v) : acc + v;  // NaN-propagating, as NumPy and ONNX
            taps++;
        }
    }
    if (p.is_max == 0) acc /= float(max(p.include_pad != 0 ? padded : taps, 1));
    ST(y, ((n * p.oh + oy) * p.ow + ox) * p.oc4s + p.oc4o + c4, tail_zero(acc, c4, p.c));
}
