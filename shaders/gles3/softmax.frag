// Softmax over the channel axis: every fragment recomputes the max and the sum over all X_C
// channels of its pixel (lanes past X_C masked), then writes its own slice.
vec4 lane_mask(int s) {
    return vec4(lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(X_C)));
}

vec4 compute(int n, int g, int p, int y, int x) {
    vec4 m4 = vec4(-3.402823e38);
    for (int s = 0; s < X_S; ++s) {
        vec4 v = X_get(n, s, y, x);
        m4 = max(m4, mix(vec4(-3.402823e38), v, lane_mask(s)));
    }
    float m = max(max(m4.x, m4.y), max(m4.z, m4.w));
    float total = 0.0;
    for (int s = 0; s < X_S; ++s) {
        total += dot(exp(X_get(n, s, y, x) - m), lane_mask(s));
    }
    return exp(X_plane(p, n, g, y, x) - m) / total;
}

#include "gles3/main.glsl"
