// Pad over H and W. PAD_MODE 0 constant (PAD_VALUE), 1 reflect, 2 edge. Negative pads crop.
vec4 compute(int n, int g, int p, int y, int x) {
    int iy = y - PT;
    int ix = x - PL;
#if PAD_MODE == 0
    if (iy < 0 || iy >= X_H || ix < 0 || ix >= X_W) return vec4(PAD_VALUE);
#elif PAD_MODE == 1
    iy = iy < 0 ? -iy : (iy >= X_H ? 2 * (X_H - 1) - iy : iy);
    ix = ix < 0 ? -ix : (ix >= X_W ? 2 * (X_W - 1) - ix : ix);
#else
    iy = clamp(iy, 0, X_H - 1);
    ix = clamp(ix, 0, X_W - 1);
#endif
    return X_plane(p, n, g, iy, ix);
}

#include "gles3/main.glsl"
