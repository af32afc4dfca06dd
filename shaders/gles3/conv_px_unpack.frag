// Second pass of conv_px (gpubackend/paths/gles3/conv_px.py): output pixel x of slice s is in
// the first pass's tensor X at slot s / SX, plane (s % SX) * PX + x % PX, pixel x / PX.
vec4 compute(int n, int g, int p, int y, int x) {
    int s = min(g * R_OUT + p, O_S - 1);  // slices past O_S: finish() writes zeros
    int gq = s / SX;
    int qx = x / PX;
    return X_plane((s - gq * SX) * PX + x - qx * PX, n, gq, y, qx);
}

#include "gles3/main.glsl"
