// Winograd F(2x2, 3x3), pass 3 of 3: the output transform Y = A^T M A of the 16 products of
// pass 2 (M[k][tile][co4], dense, co4 blocks per tile), plus the bias, the epilogue (ACT, GATE)
// and the store of the tile's 2x2 outputs (those inside the output) through the output view
// (oc4s / oc4o: a Concat written in place).
// Dispatch: x = output block, y = tile column, z = batch * tile rows + tile row.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int oh; int ow; int co4; int co;
    int th; int tw; int tiles; float act0;
    float act1; int oc4s; int oc4o;
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"

layout(std430, binding = 0) readonly buffer M { SVEC4 m[]; };
layout(std430, binding = 1) readonly buffer B { vec4 bias[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int c4 = int(gl_GlobalInvocationID.x);
    int tx = int(gl_GlobalInvocationID.y);
    if (c4 >= p.co4 || tx >= p.tw) return;
    int nz = int(gl_WorkGroupID.z);
    int n = nz / p.th;
    int ty = nz - n * p.th;
    int stride = p.tiles * p.co4;
    int base = (nz * p.tw + tx) * p.co4 + c4;
    // A^T M: rows (m0 + m1 + m2, m1 - m2 - m3) per column, then the same on the rows
    vec4 s[8];
    for (int c = 0; c < 4; c++) {
        vec4 m0 = LD(m, base + c * stride), m1 = LD(m, base + (4 + c) * stride);
        vec4 m2 = LD(m, base + (8 + c) * stride), m3 = LD(m, base + (12 + c) * stride);
        s[c] = m0 + m1 + m2;
        s[4 + c] = m1 - m2 - m3;
    }
    vec4 b = bias[c4];
    int oy = ty * 2, ox = tx * 2;
    for (int r = 0; r < 2; r++) {
        if (oy + r >= p.oh) break;
        int row = (n * p.oh + oy + r) * p.ow;
        vec4 y0 = s[r * 4] + s[r * 4 + 1] + s[r * 4 + 2] + b;
        vec4 y1 = s[r * 4 + 1] - s[r * 4 + 2] - s[r * 4 + 3] + b;
        ST(y, (row + ox) * p.oc4s + p.oc4o + c4, tail_zero(epilogue(y0), c4, p.co));
        if (ox + 1 < p.ow) ST(y, (row + ox + 1) * p.oc4s + p.oc4o + c4, tail_zero(epilogue(y1), c4, p.co));
    }
}
