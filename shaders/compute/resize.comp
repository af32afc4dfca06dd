// Resize (nearest or bilinear) of the H and W axes of a PHWC4 tensor, ONNX coordinate rules.
// coord: 0 half_pixel, 1 pytorch_half_pixel, 2 align_corners, 3 asymmetric, 4 tf_half_pixel_for_nn.
// nearest: 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int n; int ih; int iw; int c4s;
    int oh; int ow; int c; int linear;
    int coord; int nearest; float scale_h; float scale_w;
    int oc4s; int oc4o;  // output view: vec4s per pixel, first block (a Concat writes in place)
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

float source_coord(int o, int out_len, int in_len, float scale) {
    float f = float(o);
    if (p.coord == 0) return (f + 0.5) / scale - 0.5;
    float out_w = scale * float(in_len);  // the ONNX reference's resized length, fractional for scales
    if (p.coord == 1) return out_w > 1.0 ? (f + 0.5) / scale - 0.5 : -0.5;
    if (p.coord == 2) return out_w != 1.0 ? f * float(in_len - 1) / (out_w - 1.0) : 0.0;
    if (p.coord == 3) return f / scale;
    return (f + 0.5) / scale;
}

int nearest_index(float s, int in_len) {
    float r;
    if (p.nearest == 0) r = ceil(s - 0.5);
    else if (p.nearest == 1) r = floor(s + 0.5);
    else if (p.nearest == 2) r = floor(s);
    else r = ceil(s);
    return clamp(int(r), 0, in_len - 1);
}

void main() {
    int ox = int(gl_GlobalInvocationID.x);
    int oy = int(gl_GlobalInvocationID.y);
    int z = int(gl_GlobalInvocationID.z);
    if (ox >= p.ow || oy >= p.oh || z >= p.n * p.c4s) return;
    int n = z / p.c4s;
    int c4 = z - n * p.c4s;
    float sy = source_coord(oy, p.oh, p.ih, p.scale_h);
    float sx = source_coord(ox, p.ow, p.iw, p.scale_w);
    int base = n * p.ih * p.iw;
    vec4 v;
    if (p.linear == 0) {
        v = LD(x, (base + nearest_index(sy, p.ih) * p.iw + nearest_index(sx, p.iw)) * p.c4s + c4);
    } else {
        sy = clamp(sy, 0.0, float(p.ih - 1));
        sx = clamp(sx, 0.0, float(p.iw - 1));
        int y0 = int(floor(sy)), x0 = int(floor(sx));
        int y1 = min(y0 + 1, p.ih - 1), x1 = min(x0 + 1, p.iw - 1);
        float fy = sy - float(y0), fx = sx - float(x0);
        vec4 v00 = LD(x, (base + y0 * p.iw + x0) * p.c4s + c4);
        vec4 v01 = LD(x, (base + y0 * p.iw + x1) * p.c4s + c4);
        vec4 v10 = LD(x, (base + y1 * p.iw + x0) * p.c4s + c4);
        vec4 v11 = LD(x, (base + y1 * p.iw + x1) * p.c4s + c4);
        v = mix(mix(v00, v01, fx), mix(v10, v11, fx), fy);
    }
    ST(y, ((n * p.oh + oy) * p.ow + ox) * p.oc4s + p.oc4o + c4, tail_zero(v, c4, p.c));
}
