// Concat along channels. With every input's channel offset a multiple of 4 (CONCAT_ALIGNED)
// each slice comes whole from one input (concat_slice); otherwise lane by lane (concat_lane).
// Both are generated in the preamble as if-chains over the inputs.
vec4 compute(int n, int g, int p, int y, int x) {
    int s = g * R_OUT + p;
#if CONCAT_ALIGNED
    return concat_slice(n, s, y, x);
#else
    vec4 v;
    v.x = concat_lane(n, min(4 * s, O_C - 1), y, x);
    v.y = concat_lane(n, min(4 * s + 1, O_C - 1), y, x);
    v.z = concat_lane(n, min(4 * s + 2, O_C - 1), y, x);
    v.w = concat_lane(n, min(4 * s + 3, O_C - 1), y, x);
    return v;
#endif
}

#include "gles3/main.glsl"
