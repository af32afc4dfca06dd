// LayerNormalization / InstanceNormalization: one invocation per group of normalised elements.
// mode 0: the group is len contiguous vec4s whose real lanes are all in it (the packed axis is
//         normalised): statistics over lanes too; lane l of vec4 k is real if (k % c4s) * 4 + l < c.
// mode 1: the group is len vec4s c4s apart, and lanes are separate groups (the packed axis is not
//         normalised): base = (g / c4s) * len * c4s + g % c4s.
// Scale s and bias b (fp32 vec4 buffers) are read per smode: 0 vec4 s[k]; 1 scalar s[k];
// 2 vec4 s[g % c4s]; 3 scalar s[g % nch]. With STATS, group g's mean and 1 / std go to m[g] and
// r[g] (LayerNormalization's optional outputs: lane 0 in mode 0, the lanes' own in mode 1).
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int groups; int mode; int smode; int len; int c4s; int c; int nch; float count; float eps;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) readonly buffer S { vec4 s[]; };
layout(std430, binding = 2) readonly buffer Bb { vec4 b[]; };
layout(std430, binding = 3) writeonly buffer Y { SVEC4 y[]; };
#ifdef STATS
layout(std430, binding = 4) writeonly buffer M { SVEC4 m[]; };
layout(std430, binding = 5) writeonly buffer R { SVEC4 r[]; };
#endif

vec4 real(int k) {
    return vec4(lessThan(ivec4((k % p.c4s) * 4) + ivec4(0, 1, 2, 3), ivec4(p.c)));
}

vec4 pick(int smode, int k, int g, bool bias) {
    int i = smode == 0 || smode == 1 ? k : smode == 2 ? g % p.c4s : g % p.nch;
    vec4 v = bias ? b[smode == 0 || smode == 2 ? i : i >> 2] : s[smode == 0 || smode == 2 ? i : i >> 2];
    return smode == 0 || smode == 2 ? v : vec4(v[i & 3]);
}

void main() {
    int g = flat_id();
    if (g >= p.groups) return;
    int base, step;
    if (p.mode == 0) {
        base = g * p.len;
        step = 1;
    } else {
        base = (g / p.c4s) * p.len * p.c4s + g % p.c4s;
        step = p.c4s;
    }
    vec4 acc = vec4(0.0);
    for (int k = 0; k < p.len; k++) {
        vec4 v = LD(x, base + k * step);
        acc += p.mode == 0 ? v * real(k) : v;
    }
    vec4 mean = p.mode == 0 ? vec4((acc.x + acc.y) + (acc.z + acc.w)) / p.count : acc / p.count;
    acc = vec4(0.0);
    for (int k = 0; k < p.len; k++) {
        vec4 d = LD(x, base + k * step) - mean;
        acc += p.mode == 0 ? d * d * real(k) : d * d;
    }
    vec4 var = p.mode == 0 ? vec4((acc.x + acc.y) + (acc.z + acc.w)) / p.count : acc / p.count;
    vec4 inv = 1.0 / sqrt(var + p.eps);
#ifdef STATS
    vec4 keep = p.mode == 0 ? vec4(1.0, 0.0, 0.0, 0.0) : vec4(1.0);
    ST(m, g, tail_zero(mean * keep, p.mode == 0 ? 0 : g % p.c4s, p.mode == 0 ? 1 : p.c));
    ST(r, g, tail_zero(inv * keep, p.mode == 0 ? 0 : g % p.c4s, p.mode == 0 ? 1 : p.c));
#endif
    for (int k = 0; k < p.len; k++) {
        int i = base + k * step;
        vec4 v = (LD(x, i) - mean) * inv * pick(p.smode, k, g, false) + pick(p.smode, k, g, true);
        ST(y, i, tail_zero(v, p.mode == 0 ? k % p.c4s : g % p.c4s, p.c));
    }
}
