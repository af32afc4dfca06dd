// MaxPool / AveragePool over H and W (POOL_MAX 1 or 0). Windows start at o * S - PT and step
// by D; AveragePool divides by the positions inside [-PT, X_H + PB) x [-PL, X_W + PR) when
// COUNT_PAD is 1, else by the positions inside the input.
#include "common/elementwise.glsl"
vec4 compute(int n, int g, int p, int oy, int ox) {
#if POOL_MAX
    vec4 acc = vec4(uintBitsToFloat(0xff800000u));  // -Inf
#else
    vec4 acc = vec4(0.0);
    float cnt = 0.0;
#endif
    for (int ky = 0; ky < KH; ++ky) {
        int iy = oy * SH - PT + ky * DH;
        bool yin = iy >= 0 && iy < X_H;
#if !POOL_MAX && COUNT_PAD
        bool ypad = iy < X_H + PB;
#endif
        for (int kx = 0; kx < KW; ++kx) {
            int ix = ox * SW - PL + kx * DW;
            bool inside = yin && ix >= 0 && ix < X_W;
#if POOL_MAX
            if (inside) acc = ew_fmax(acc, X_plane(p, n, g, iy, ix));  // NaN-propagating
#else
            if (inside) acc += X_plane(p, n, g, iy, ix);
#if COUNT_PAD
            if (ypad && ix < X_W + PR) cnt += 1.0;
#else
            if (inside) cnt += 1.0;
#endif
#endif
        }
    }
#if POOL_MAX
    return acc;
#else
    return acc / max(cnt, 1.0);
#endif
}

#include "gles3/main.glsl"
