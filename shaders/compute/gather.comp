// Any layout op of one input as an index map (Slice, Split, Transpose, Reshape above rank 4, Gather
// with constant indices, Expand, Tile, DepthToSpace, SpaceToDepth): lane l of output vec4 i copies
// the input scalar at packed address m[i][l] (vec4 index * 4 + lane); -1 marks a padding lane (0).
// The map is built on the host (gpubackend/paths/compute_ops.py) and always stored as int32.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int total;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) readonly buffer M { ivec4 m[]; };
layout(std430, binding = 2) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.total) return;
    ivec4 a = m[i];
    vec4 v = vec4(0.0);
    for (int l = 0; l < 4; l++) {
        if (a[l] >= 0) v[l] = LD(x, a[l] >> 2)[a[l] & 3];
    }
    ST(y, i, v);
}
