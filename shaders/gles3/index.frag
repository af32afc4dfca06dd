// Every output element from input elements at computed positions: layout ops, reductions,
// Softmax on any axis, normalisations, n-ary ops, batched MatMul (gpubackend/paths/gles3/index_ops.py).
// The preamble defines float value_at(int l), l being the element's linear (row-major) index in
// the output tensor, which the NCHW texture view shares because that view is a reshape.
// A texel's four lanes are four consecutive channels: linear indices O_H * O_W apart.
#include "common/elementwise.glsl"

vec4 compute(int n, int g, int p, int y, int x) {
    int c = 4 * (g * R_OUT + p);
    int l = ((n * O_C + c) * O_H + y) * O_W + x;
    vec4 v = vec4(0.0);
    if (c < O_C) v.x = value_at(l);
    if (c + 1 < O_C) v.y = value_at(l + O_H * O_W);
    if (c + 2 < O_C) v.z = value_at(l + 2 * O_H * O_W);
    if (c + 3 < O_C) v.w = value_at(l + 3 * O_H * O_W);
    return activate(v);
}

#include "gles3/main.glsl"
