// Comparisons, logic ops, Where and Cast to bool, with any broadcasting, through index maps (as
// gather.comp): lane l of output vec4 i reads operand k at packed scalar address mk[i][l]; -1
// marks a padding lane (written 0). Non-float tensors are held as exact floats: bool as 0.0 / 1.0,
// integers as their value (gpubackend/paths/compute_exact.py decides which may be).
// op: 0 Equal, 1 Greater, 2 Less, 3 GreaterOrEqual, 4 LessOrEqual, 5 And, 6 Or, 7 Xor,
//     8 Not, 9 Cast to bool (NaN is true), 10 Where (a: condition, b: where true, c: where false).
// OPERANDS (1, 2 or 3) is the number of inputs, each followed by its map.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total; int op;
PARAMS_END

layout(std430, binding = 0) readonly buffer A { SVEC4 a[]; };
layout(std430, binding = 1) readonly buffer MA { ivec4 ma[]; };
#if OPERANDS >= 2
layout(std430, binding = 2) readonly buffer B { SVEC4 b[]; };
layout(std430, binding = 3) readonly buffer MB { ivec4 mb[]; };
#endif
#if OPERANDS == 3
layout(std430, binding = 4) readonly buffer C { SVEC4 c[]; };
layout(std430, binding = 5) readonly buffer MC { ivec4 mc[]; };
layout(std430, binding = 6) writeonly buffer Y { SVEC4 y[]; };
#elif OPERANDS == 2
layout(std430, binding = 4) writeonly buffer Y { SVEC4 y[]; };
#else
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };
#endif

bool is_nan(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }

// NaN compares unequal and unordered to everything (spelled out: drivers may fold the unordered cases)
float compare(float u, float v) {
    if (is_nan(u) || is_nan(v)) return 0.0;
    bool r = p.op == 0 ? u == v : p.op == 1 ? u > v : p.op == 2 ? u < v : p.op == 3 ? u >= v : u <= v;
    return r ? 1.0 : 0.0;
}

void main() {
    int i = flat_id();
    if (i >= p.total) return;
    ivec4 ia = ma[i];
#if OPERANDS >= 2
    ivec4 ib = mb[i];
#endif
#if OPERANDS == 3
    ivec4 ic = mc[i];
#endif
    vec4 v = vec4(0.0);
    for (int l = 0; l < 4; l++) {
        if (ia[l] < 0) continue;
        float u = LD(a, ia[l] >> 2)[ia[l] & 3];
#if OPERANDS == 1
        bool t = is_nan(u) || u != 0.0;
        v[l] = (p.op == 8 ? !t : t) ? 1.0 : 0.0;
#elif OPERANDS == 2
        float w = LD(b, ib[l] >> 2)[ib[l] & 3];
        bool ut = u != 0.0, wt = w != 0.0;
        v[l] = p.op <= 4 ? compare(u, w) : (p.op == 5 ? ut && wt : p.op == 6 ? ut || wt : ut != wt) ? 1.0 : 0.0;
#else
        v[l] = u != 0.0 ? LD(b, ib[l] >> 2)[ib[l] & 3] : LD(c, ic[l] >> 2)[ic[l] & 3];
#endif
    }
    ST(y, i, v);
}
