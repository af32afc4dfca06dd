// Vulkan path self-test (owned by the vulkan path, not a model kernel): y = activate(x * scale +
// shift) over n vec4s. Exercises the prelude's push constants, specialisation-constant local
// sizes, FP16 storage and the shared activation snippet without depending on any model kernel.
// With PEAK it is the FMA-throughput probe of the benchmarks instead: 8 independent vec4 FMA
// chains of `iters` steps per invocation (64 * iters flops), one store so nothing is elided.
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int n; float scale; float shift; float act0; float act1; int iters;
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/activation.glsl"

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.n) return;
#ifdef PEAK
    vec4 v = LD(x, i);
    vec4 a0 = v, a1 = v + 1.0, a2 = v + 2.0, a3 = v + 3.0, a4 = v + 4.0, a5 = v + 5.0, a6 = v + 6.0, a7 = v + 7.0;
    for (int k = 0; k < p.iters; k++) {
        a0 = a0 * p.scale + p.shift; a1 = a1 * p.scale + p.shift;
        a2 = a2 * p.scale + p.shift; a3 = a3 * p.scale + p.shift;
        a4 = a4 * p.scale + p.shift; a5 = a5 * p.scale + p.shift;
        a6 = a6 * p.scale + p.shift; a7 = a7 * p.scale + p.shift;
    }
    ST(y, i, a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7);
#else
    ST(y, i, activate(LD(x, i) * p.scale + p.shift));
#endif
}
