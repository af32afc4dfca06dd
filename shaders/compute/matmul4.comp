// MatMul of two rank-4 tensors (N, H, M, K) x (N, H, K, P), both packed on H (axis 1): the four
// heads of a vec4 multiply lane by lane. An operand with one head (a_splat / b_splat) is broadcast
// over the heads, one with one batch (a_n / b_n = 0) over the batch.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int n; int h4; int h; int m; int k; int pn; int a_n; int b_n; int a_splat; int b_splat;
PARAMS_END

layout(std430, binding = 0) readonly buffer A { SVEC4 a[]; };
layout(std430, binding = 1) readonly buffer B { SVEC4 b[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.n * p.m * p.pn * p.h4) return;
    int hi = i % p.h4;
    int r = i / p.h4;
    int pi = r % p.pn;
    r /= p.pn;
    int mi = r % p.m;
    int ni = r / p.m;
    int ah4 = p.a_splat != 0 ? 1 : p.h4;
    int bh4 = p.b_splat != 0 ? 1 : p.h4;
    int ah = p.a_splat != 0 ? 0 : hi;
    int bh = p.b_splat != 0 ? 0 : hi;
    int abase = (ni * p.a_n * p.m + mi) * p.k * ah4 + ah;
    int bbase = (ni * p.b_n * p.k * p.pn + pi) * bh4 + bh;
    ACC4 acc = vec4(0.0);
    for (int kk = 0; kk < p.k; kk++) {
        vec4 av = LD(a, abase + kk * ah4);
        vec4 bv = LD(b, bbase + kk * p.pn * bh4);
        if (p.a_splat != 0) av = vec4(av.x);
        if (p.b_splat != 0) bv = vec4(bv.x);
        acc += av * bv;
    }
    ST(y, i, tail_zero(acc, hi, p.h));
}
