// Resize over H and W. RESIZE_LINEAR 1: bilinear, 0: nearest with NEAREST_MODE 0
// round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil. COORD_MODE 0 half_pixel,
// 1 pytorch_half_pixel, 2 align_corners, 3 asymmetric, 4 tf_half_pixel_for_nn.
// SCALE_Y / SCALE_X are the output/input scale factors (float literals).
// ONNX measures the output length as scale * isz, not the rounded-down osz (scales 0.6 on 4:
// align_corners divides by 2.4 - 1).
float src_coord(int o, float scale, int isz, int osz) {
    float out_len = scale * float(isz);
#if COORD_MODE == 0
    return (float(o) + 0.5) / scale - 0.5;
#elif COORD_MODE == 1
    return out_len == 1.0 ? -0.5 : (float(o) + 0.5) / scale - 0.5;
#elif COORD_MODE == 2
    return out_len == 1.0 ? 0.0 : float(o) * float(isz - 1) / (out_len - 1.0);
#elif COORD_MODE == 3
    return float(o) / scale;
#else
    return (float(o) + 0.5) / scale;
#endif
}

int nearest(float c, int isz) {
#if NEAREST_MODE == 0
    int i = int(ceil(c - 0.5));
#elif NEAREST_MODE == 1
    int i = int(floor(c + 0.5));
#elif NEAREST_MODE == 2
    int i = int(floor(c));
#else
    int i = int(ceil(c));
#endif
    return clamp(i, 0, isz - 1);
}

vec4 compute(int n, int g, int p, int y, int x) {
    float cy = src_coord(y, SCALE_Y, X_H, O_H);
    float cx = src_coord(x, SCALE_X, X_W, O_W);
#if RESIZE_LINEAR
    cy = clamp(cy, 0.0, float(X_H - 1));
    cx = clamp(cx, 0.0, float(X_W - 1));
    int y0 = int(floor(cy));
    int x0 = int(floor(cx));
    int y1 = min(y0 + 1, X_H - 1);
    int x1 = min(x0 + 1, X_W - 1);
    // onnxruntime's bilinear form, so a quantized model's .5 ties round as there: weights
    // |c - c0| and |c - c1| (0.5 and 0.5 on one repeated border pixel), the four products summed
    // in its order
    float dy1 = y0 == y1 ? 0.5 : cy - float(y0);
    float dy2 = y0 == y1 ? 0.5 : float(y1) - cy;
    float dx1 = x0 == x1 ? 0.5 : cx - float(x0);
    float dx2 = x0 == x1 ? 0.5 : float(x1) - cx;
    vec4 r = (dx2 * dy2) * X_plane(p, n, g, y0, x0);
    r += (dx1 * dy2) * X_plane(p, n, g, y0, x1);
    r += (dx2 * dy1) * X_plane(p, n, g, y1, x0);
    r += (dx1 * dy1) * X_plane(p, n, g, y1, x1);
    return r;
#else
    return X_plane(p, n, g, nearest(cy, X_H), nearest(cx, X_W));
#endif
}

#include "gles3/main.glsl"
