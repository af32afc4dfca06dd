// Batched MatMul of two runtime tensors packed along their last axis: A [batch][m][k4],
// B [batch][k][n4] -> Y [batch][m][n4]. A batch stride of 0 broadcasts an operand.
// Each invocation computes one row and one block of 4 columns.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int batch; int m; int k; int k4;
    int n4; int n; int a_stride; int b_stride;
PARAMS_END

layout(std430, binding = 0) readonly buffer A { SVEC4 a[]; };
layout(std430, binding = 1) readonly buffer Bm { SVEC4 b[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int j4 = int(gl_GlobalInvocationID.x);
    int row = int(gl_GlobalInvocationID.y);
    int bi = int(gl_GlobalInvocationID.z);
    if (j4 >= p.n4 || row >= p.m || bi >= p.batch) return;
    int ai = bi * p.a_stride + row * p.k4;
    int bb = bi * p.b_stride + j4;
    ACC4 acc = vec4(0.0);
    for (int c4 = 0; c4 < p.k4; c4++) {
        vec4 av = LD(a, ai + c4);
        // rows past k meet zero lanes of A; clamp so they read real (finite) data
        int r = c4 * 4;
        acc += av.x * LD(b, bb + min(r, p.k - 1) * p.n4) + av.y * LD(b, bb + min(r + 1, p.k - 1) * p.n4)
             + av.z * LD(b, bb + min(r + 2, p.k - 1) * p.n4) + av.w * LD(b, bb + min(r + 3, p.k - 1) * p.n4);
    }
    ST(y, (bi * p.m + row) * p.n4 + j4, tail_zero(acc, j4, p.n));
}
