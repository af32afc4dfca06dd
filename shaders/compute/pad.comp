// Pad of the H and W axes of a PHWC4 tensor. mode: 0 constant, 1 reflect, 2 edge.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int n; int ih; int iw; int c4s;
    int oh; int ow; int c; int pt;
    int pl; int mode; float value;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

int source(int o, int len) {
    if (p.mode == 1) {  // reflect without repeating the edge: symmetric about 0, period 2*(len-1)
        if (len == 1) return 0;
        int period = 2 * (len - 1);
        int m = abs(o) % period;  // % of a negative operand is undefined in GLSL
        return m < len ? m : period - m;
    }
    return clamp(o, 0, len - 1);
}

void main() {
    int ox = int(gl_GlobalInvocationID.x);
    int oy = int(gl_GlobalInvocationID.y);
    int z = int(gl_GlobalInvocationID.z);
    if (ox >= p.ow || oy >= p.oh || z >= p.n * p.c4s) return;
    int n = z / p.c4s;
    int c4 = z - n * p.c4s;
    int iy = oy - p.pt, ix = ox - p.pl;
    vec4 v;
    if (p.mode == 0 && (iy < 0 || iy >= p.ih || ix < 0 || ix >= p.iw)) {
        v = vec4(p.value);
    } else {
        v = LD(x, ((n * p.ih + source(iy, p.ih)) * p.iw + source(ix, p.iw)) * p.c4s + c4);
    }
    ST(y, ((n * p.oh + oy) * p.ow + ox) * p.c4s + c4, tail_zero(v, c4, p.c));
}
