// Reshape / Flatten / Squeeze / Unsqueeze (mode 0: same row-major flat index) or Transpose
// (mode 1: output axis k reads input axis perm_k) between packed layouts. Shapes are padded to
// rank 4 with leading 1s; a tensor's packed axis (opa / ipa) is innermost in memory, the others
// keep their order.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int os0; int os1; int os2; int os3; int opa;
    int is0; int is1; int is2; int is3; int ipa;
    int mode; int perm0; int perm1; int perm2; int perm3;
PARAMS_END

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

int addr(ivec4 c, ivec4 s, int pa) {  // vec4 index; the lane is c[pa] & 3
    int a = 0;
    for (int k = 0; k < 4; k++) {
        if (k != pa) a = a * s[k] + c[k];
    }
    return a * ((s[pa] + 3) / 4) + c[pa] / 4;
}

void main() {
    ivec4 os = ivec4(p.os0, p.os1, p.os2, p.os3);
    ivec4 is_ = ivec4(p.is0, p.is1, p.is2, p.is3);
    int oc4 = (os[p.opa] + 3) / 4;
    int i = flat_id();
    if (i >= os[0] * os[1] * os[2] * os[3] / os[p.opa] * oc4) return;
    // memory index -> output coordinates (packed axis innermost)
    ivec4 oc = ivec4(0);
    int r = i / oc4;
    int c4 = i - r * oc4;
    for (int k = 3; k >= 0; k--) {
        if (k == p.opa) continue;
        oc[k] = r % os[k];
        r /= os[k];
    }
    vec4 v = vec4(0.0);
    for (int l = 0; l < 4; l++) {
        oc[p.opa] = c4 * 4 + l;
        if (oc[p.opa] >= os[p.opa]) break;
        ivec4 ic;
        if (p.mode == 0) {
            int f = ((oc[0] * os[1] + oc[1]) * os[2] + oc[2]) * os[3] + oc[3];
            for (int k = 3; k >= 0; k--) {
                ic[k] = f % is_[k];
                f /= is_[k];
            }
        } else {
            ic[p.perm0] = oc[0];
            ic[p.perm1] = oc[1];
            ic[p.perm2] = oc[2];
            ic[p.perm3] = oc[3];
        }
        v[l] = LD(x, addr(ic, is_, p.ipa))[ic[p.ipa] & 3];
    }
    ST(y, i, v);
}
