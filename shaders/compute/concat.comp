// One input of a Concat (one dispatch per input, in order): copies the input, viewed as
// [e0][e1][e2][c] packed, into the output at offsets (o0, o1, o2, coff) of the output view.
// Lanes of a shared output vec4 that belong to another input keep their value (read-modify-
// write), so a channel offset need not be a multiple of 4.
// CHANNELS: a concat along the packed axis (no pixel offsets, the output's pixels are the
// input's): the pixel index is the output's, one division instead of five (integer division by
// a non-literal runs lane by lane on llvmpipe and lavapipe).
#if defined(TEXX) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int e0; int e1; int e2; int in_c4s;
    int in_c; int nc4; int c4_lo;
    int od1; int od2; int out_c4s; int out_c;
    int o0; int o1; int o2; int coff;
PARAMS_END

#include "compute/input_x.glsl"
layout(std430, binding = 1) buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.e0 * p.e1 * p.e2 * p.nc4) return;
    int pixel = i / p.nc4;
    int c4 = p.c4_lo + i - pixel * p.nc4;
#ifdef CHANNELS
    int src = pixel * p.in_c4s;
    int dst = pixel * p.out_c4s + c4;
#else
    int i2 = pixel % p.e2;
    int r = pixel / p.e2;
    int i1 = r % p.e1;
    int i0 = r / p.e1;
    int src = ((i0 * p.e1 + i1) * p.e2 + i2) * p.in_c4s;
    int dst = (((i0 + p.o0) * p.od1 + i1 + p.o1) * p.od2 + i2 + p.o2) * p.out_c4s + c4;
#endif
    vec4 v;
    if ((p.coff & 3) == 0 && (c4 + 1) * 4 <= p.coff + p.in_c) {
        v = LDX(src + c4 - p.c4_lo);  // whole aligned vec4
    } else {
        v = LD(y, dst);
        for (int l = 0; l < 4; l++) {
            int ch = c4 * 4 + l - p.coff;
            if (ch >= 0 && ch < p.in_c) v[l] = LDX(src + ch / 4)[ch & 3];
        }
    }
    ST(y, dst, tail_zero(v, c4, p.out_c));
}
