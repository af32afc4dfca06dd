// Winograd F(2x2, 3x3), pass 3 of 3: the output transform Y = A^T M A of the 16 products of
// pass 2 (M[k][tile][co4], dense, co4 blocks per tile), plus the bias, the epilogue (ACT, GATE)
// and the store of the tile's 2x2 outputs (those inside the output) through the output view
// (oc4s / oc4o: a Concat written in place).
// IEEE: the transforms mix a patch's 16 inputs, so one infinite input would turn its tile's other
// outputs (and those of the tiles around it) into NaN where the direct sum is +-Inf. A tile whose
// transformed sums are not all finite is recomputed here as the direct convolution, from the
// input x and the untransformed weights wd (conv.comp's [co4][ky][kx][ci4] blocks): rare, and
// the same IEEE result as the direct kernel (padding taps multiply zero, as the reference does).
// Dispatch: x = output block, y = tile column, z = batch * tile rows + tile row.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int oh; int ow; int co4; int co;
    int th; int tw; int tiles; float act0;
    float act1; int oc4s; int oc4o; int ih;
    int iw; int ci4; int pt; int pl;
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"

layout(std430, binding = 0) readonly buffer M { SVEC4 m[]; };
layout(std430, binding = 1) readonly buffer B { vec4 bias[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };
layout(std430, binding = 3) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 4) readonly buffer WD { vec4 wd[]; };

bool all_finite(vec4 v) { return !any(isnan(v)) && !any(isinf(v)); }

// The direct 3x3 sum of output pixel (oy, ox), output block c4, image n (no bias).
vec4 direct_sum(int n, int oy, int ox, int c4) {
    vec4 acc = vec4(0.0);
    for (int ky = 0; ky < 3; ky++) {
        int iy = oy + ky - p.pt;
        bool oky = iy >= 0 && iy < p.ih;
        for (int kx = 0; kx < 3; kx++) {
            int ix = ox + kx - p.pl;
            bool ok = oky && ix >= 0 && ix < p.iw;
            int xb = ((n * p.ih + clamp(iy, 0, p.ih - 1)) * p.iw + clamp(ix, 0, p.iw - 1)) * p.ci4;
            int wb = ((c4 * 3 + ky) * 3 + kx) * p.ci4 * 4;
            for (int cb = 0; cb < p.ci4; cb++) {
                vec4 xv = ok ? LD(x, xb + cb) : vec4(0.0);
                int k = wb + cb * 4;
                acc += xv.x * wd[k] + xv.y * wd[k + 1] + xv.z * wd[k + 2] + xv.w * wd[k + 3];
            }
        }
    }
    return acc;
}

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
    vec4 z[4];
    for (int r = 0; r < 2; r++) {
        z[r * 2] = s[r * 4] + s[r * 4 + 1] + s[r * 4 + 2];
        z[r * 2 + 1] = s[r * 4 + 1] - s[r * 4 + 2] - s[r * 4 + 3];
    }
    int oy = ty * 2, ox = tx * 2;
    if (!(all_finite(z[0]) && all_finite(z[1]) && all_finite(z[2]) && all_finite(z[3]))) {
        for (int k = 0; k < 4; k++) z[k] = direct_sum(n, min(oy + k / 2, p.oh - 1), min(ox + k % 2, p.ow - 1), c4);
    }
    vec4 b = bias[c4];
    for (int r = 0; r < 2; r++) {
        if (oy + r >= p.oh) break;
        int row = (n * p.oh + oy + r) * p.ow;
        ST(y, (row + ox) * p.oc4s + p.oc4o + c4, tail_zero(epilogue(z[r * 2] + b), c4, p.co));
        if (ox + 1 < p.ow) ST(y, (row + ox + 1) * p.oc4s + p.oc4o + c4, tail_zero(epilogue(z[r * 2 + 1] + b), c4, p.co));
    }
}
