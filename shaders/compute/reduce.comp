// Reduce* over any axes. Lane l of output vec4 i reduces the input scalars at packed addresses
// base + k0*s0 + k1*s1 + k2*s2 + k3*s3 (k < l), with base = m[i][l] (-1: padding lane, 0). The
// packed address is linear in the coordinates, so the offsets are the same for every output.
// op: 0 sum, 1 mean, 2 max, 3 min, 4 prod, 5 L1, 6 L2, 7 log-sum, 8 log-sum-exp, 9 sum of squares,
// 10 ArgMax, 11 ArgMin, 12 / 13 the same with select_last_index: the position of the first (last)
// extreme in k0..k3 order, a NaN counting as the extreme (as NumPy), returned as an exact float.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int op; int l0; int l1; int l2; int l3; int s0; int s1; int s2; int s3; float count;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) readonly buffer M { ivec4 m[]; };
// Y32 (with FP16): the result is stored as fp32 (gpubackend/paths/compute_mixed.py keeps it so).
#ifdef Y32
layout(std430, binding = 2) writeonly buffer Y { vec4 y[]; };
#define STY(i, v) { y[i] = (v); }
#else
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };
#define STY(i, v) ST(y, i, v)
#endif

bool is_nan(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }

float at(int a) { return LD(x, a >> 2)[a & 3]; }

float arg_from(int base) {
    bool last = p.op >= 12, is_min = p.op == 11 || p.op == 13;
    float best = at(base);
    int at_k = 0, k = 0;
    for (int k0 = 0; k0 < p.l0; k0++)
    for (int k1 = 0; k1 < p.l1; k1++)
    for (int k2 = 0; k2 < p.l2; k2++)
    for (int k3 = 0; k3 < p.l3; k3++) {
        float v = at(base + k0 * p.s0 + k1 * p.s1 + k2 * p.s2 + k3 * p.s3);
        bool better = is_min ? v < best : v > best;
        bool tie = v == best;
        bool take = last ? is_nan(v) || (!is_nan(best) && (better || tie)) : !is_nan(best) && (is_nan(v) || better);
        if (take) { best = v; at_k = k; }
        k++;
    }
    return float(at_k);
}

float reduce_from(int base) {
    if (p.op >= 10) return arg_from(base);
    bool is_max = p.op == 2 || p.op == 8;
    float acc = p.op == 4 ? 1.0 : p.op == 2 || p.op == 8 ? -1.0 / 0.0 : p.op == 3 ? 1.0 / 0.0 : 0.0;
    for (int k0 = 0; k0 < p.l0; k0++)
    for (int k1 = 0; k1 < p.l1; k1++)
    for (int k2 = 0; k2 < p.l2; k2++)
    for (int k3 = 0; k3 < p.l3; k3++) {
        float v = at(base + k0 * p.s0 + k1 * p.s1 + k2 * p.s2 + k3 * p.s3);
        if (is_max) acc = is_nan(acc) || (!is_nan(v) && v <= acc) ? acc : v;
        else if (p.op == 3) acc = is_nan(acc) || (!is_nan(v) && v >= acc) ? acc : v;
        else if (p.op == 4) acc *= v;
        else if (p.op == 5) acc += abs(v);
        else if (p.op == 6 || p.op == 9) acc += v * v;
        else acc += v;
    }
    if (p.op == 8) {  // log-sum-exp: acc is the maximum
        if (is_nan(acc) || isinf(acc)) return acc;
        float s = 0.0;
        for (int k0 = 0; k0 < p.l0; k0++)
        for (int k1 = 0; k1 < p.l1; k1++)
        for (int k2 = 0; k2 < p.l2; k2++)
        for (int k3 = 0; k3 < p.l3; k3++) s += exp(at(base + k0 * p.s0 + k1 * p.s1 + k2 * p.s2 + k3 * p.s3) - acc);
        return acc + log(s);
    }
    if (p.op == 1) return acc / p.count;
    if (p.op == 6) return sqrt(acc);
    if (p.op == 7) return log(acc);
    return acc;
}

void main() {
    int i = flat_id();
    if (i >= p.total) return;
    ivec4 b = m[i];
    vec4 v = vec4(0.0);
    for (int l = 0; l < 4; l++) {
        if (b[l] >= 0) v[l] = reduce_from(b[l]);
    }
    STY(i, v);
}
