// Vulkan path self-test (owned by the vulkan path, not a model kernel): y = activate(x * scale +
// shift) over n vec4s. Exercises the prelude's push constants, specialisation-constant local
// sizes, FP16 storage and the shared activation snippet without depending on any model kernel;
// the benchmarks also use it as the cheapest possible dispatch (overhead timing).
#include "compute/prelude.glsl"

PARAMS_BEGIN
    int n; float scale; float shift; float act0; float act1;
PARAMS_END
#define ACT_P0 p.act0
#define ACT_P1 p.act1
#include "common/elementwise.glsl"

layout(std430, binding = 0) readonly buffer X { SVEC4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { SVEC4 y[]; };

void main() {
    int i = flat_id();
    if (i >= p.n) return;
    ST(y, i, activate(LD(x, i) * p.scale + p.shift));
}
