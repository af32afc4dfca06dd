// conv_blend, second pass (gpubackend/paths/gles3/conv_blend.py): output slice s of pixel (n, y, x)
// is the accumulator's slice s (A_R slices per tile) at the tile pixel of (n, y, x); the bias B
// and the fused activation are applied here, and finish() zeroes the lanes past the channels
// (the first pass's padded weights may have turned an input Inf into NaN there).
#include "common/elementwise.glsl"
#include "compute/epilogue.glsl"

vec4 compute(int n, int g, int p, int y, int x) {
    int s = min(g * R_OUT + p, O_S - 1);
    int ga = s / A_R;
#if ROWS
    int ly = n / A_W;
    int lx = n - ly * A_W;
#else
    int ly = n * O_H + y;
    int lx = x;
#endif
    return epilogue(A_plane(s - ga * A_R, 0, ga, ly, lx) + B_plane(p, 0, g, 0, 0));
}

#include "gles3/main.glsl"
