// Elementwise unary op: UNOP(v) (activation-family ops go through activate()).
#include "common/activation.glsl"

vec4 compute(int n, int g, int p, int y, int x) {
    vec4 v = X_plane(p, n, g, y, x);
    return UNOP(v);
}

#include "gles3/main.glsl"
