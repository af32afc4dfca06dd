// GlobalAveragePool / GlobalMaxPool on PHWC4 tensors: one invocation per (n, c4) reduces H*W.
#include "compute/prelude.glsl"
#include "common/elementwise.glsl"

PARAMS_BEGIN
    int n; int hw; int c4s; int c; int is_max;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
// Y32 (with FP16): the mean is stored as fp32 (gpubackend/paths/compute_mixed.py keeps it so).
#ifdef Y32
layout(std430, binding = 1) writeonly buffer Y { vec4 y[]; };
#define STY(i, v) { y[i] = (v); }
#else
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };
#define STY(i, v) ST(y, i, v)
#endif

void main() {
    int i = flat_id();
    if (i >= p.n * p.c4s) return;
    int n = i / p.c4s;
    int c4 = i - n * p.c4s;
    int base = n * p.hw * p.c4s + c4;
    vec4 acc = p.is_max != 0 ? vec4(uintBitsToFloat(0xff800000u)) : vec4(0.0);  // -Inf
    if (p.is_max != 0) {
        for (int j = 0; j < p.hw; j++) acc = ew_fmax(acc, LD(x, base + j * p.c4s));  // NaN-propagating
    } else {
        // Blocked: four partial sums over each block of GP_BLOCK positions, the block totals
        // summed apart. A running sum of a 120x160 plane lost enough of fp32 to be PP-OCRv6 det's
        // largest single error step; blocks keep each addend near the size of its sum.
        const int GP_BLOCK = 128;
        int j = 0;
        for (int j1 = min(GP_BLOCK, p.hw); j < p.hw; j1 = min(j1 + GP_BLOCK, p.hw)) {
            vec4 s0 = vec4(0.0), s1 = vec4(0.0), s2 = vec4(0.0), s3 = vec4(0.0);
            for (; j + 3 < j1; j += 4) {
                s0 += LD(x, base + j * p.c4s);
                s1 += LD(x, base + (j + 1) * p.c4s);
                s2 += LD(x, base + (j + 2) * p.c4s);
                s3 += LD(x, base + (j + 3) * p.c4s);
            }
            for (; j < j1; j++) s0 += LD(x, base + j * p.c4s);
            acc += (s0 + s1) + (s2 + s3);
        }
        acc /= float(p.hw);
    }
    STY(i, tail_zero(acc, c4, p.c));
}
