// Winograd F(2x2, 3x3), pass 1 of 3: the input transform V = B^T d B of every 4x4 input patch d
// (one patch per 2x2 output tile, stride 2, zero outside the input), per input block of 4
// channels. V is 16 GEMM operands, one per entry k of the 4x4 transform: V[k][tile][ci4], so
// that pass 2 (gemm.comp with BATCH) multiplies each with its transformed weights, and pass 3
// (winograd_out.comp) turns the 16 products back into the 2x2 outputs.
// Dispatch: x = input block, y = tile column, z = batch * tile rows + tile row (workgroup z is
// uniform: its division is not done per lane).
#if defined(TEXX) && !defined(VULKAN)
#extension GL_EXT_texture_buffer : require
#endif
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int ih; int iw; int ci4; int th;
    int tw; int pt; int pl; int tiles;
PARAMS_END

#include "compute/input_x.glsl"
layout(std430, binding = 1) writeonly buffer V { SVEC4 v[]; };

void main() {
    int c4 = int(gl_GlobalInvocationID.x);
    int tx = int(gl_GlobalInvocationID.y);
    if (c4 >= p.ci4 || tx >= p.tw) return;
    int nz = int(gl_WorkGroupID.z);
    int n = nz / p.th;
    int ty = nz - n * p.th;
    int y0 = ty * 2 - p.pt, x0 = tx * 2 - p.pl;
    vec4 d[16];
    for (int r = 0; r < 4; r++) {
        int iy = y0 + r;
        bool oky = iy >= 0 && iy < p.ih;
        int row = (n * p.ih + clamp(iy, 0, p.ih - 1)) * p.iw;
        for (int c = 0; c < 4; c++) {
            int ix = x0 + c;
            d[r * 4 + c] = oky && ix >= 0 && ix < p.iw ? LDX((row + ix) * p.ci4 + c4) : vec4(0.0);
        }
    }
    // B^T d: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then the same on the columns
    vec4 e[16];
    for (int c = 0; c < 4; c++) {
        e[c] = d[c] - d[8 + c];
        e[4 + c] = d[4 + c] + d[8 + c];
        e[8 + c] = d[8 + c] - d[4 + c];
        e[12 + c] = d[4 + c] - d[12 + c];
    }
    int t = nz * p.tw + tx;
    int stride = p.tiles * p.ci4;  // one transform entry k
    int base = t * p.ci4 + c4;
    for (int r = 0; r < 4; r++) {
        int k = base + r * 4 * stride;
        ST(v, k, e[r * 4] - e[r * 4 + 2]);
        ST(v, k + stride, e[r * 4 + 1] + e[r * 4 + 2]);
        ST(v, k + 2 * stride, e[r * 4 + 2] - e[r * 4 + 1]);
        ST(v, k + 3 * stride, e[r * 4 + 1] - e[r * 4 + 3]);
    }
}
