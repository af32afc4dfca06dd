// Elementwise unary op: activate() chosen by ACT (see common/elementwise.glsl).
#include "common/elementwise.glsl"

vec4 compute(int n, int g, int p, int y, int x) {
    return activate(X_plane(p, n, g, y, x));
}

#include "gles3/main.glsl"
