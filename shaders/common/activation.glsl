// Fused activations, chosen at compile time: ACT is 0 none, 1 Relu, 2 Clip, 3 LeakyRelu,
// 4 HardSigmoid, 5 HardSwish, 6 Sigmoid, 7 Tanh. ACT_P0 / ACT_P1 are the parameters
// (Clip min/max, LeakyRelu alpha, HardSigmoid alpha/beta). Valid in GLSL ES 1.00, 3.00, 3.10
// and Vulkan GLSL. Sigmoid and Tanh are written to stay finite for large |x|.
#ifndef ACT
#define ACT 0
#endif
#ifndef ACT_P0
#define ACT_P0 0.0
#endif
#ifndef ACT_P1
#define ACT_P1 0.0
#endif

vec4 activate(vec4 x) {
#if ACT == 1
    return max(x, vec4(0.0));
#elif ACT == 2
    return min(max(x, vec4(ACT_P0)), vec4(ACT_P1));  // not clamp(): defined (= max) when min > max, as ONNX's np.clip
#elif ACT == 3
    return mix(x * ACT_P0, x, step(vec4(0.0), x));
#elif ACT == 4
    return clamp(x * ACT_P0 + ACT_P1, vec4(0.0), vec4(1.0));
#elif ACT == 5
    return x * clamp(x / 6.0 + 0.5, vec4(0.0), vec4(1.0));
#elif ACT == 6
    vec4 e = exp(-abs(x));
    return mix(e / (1.0 + e), 1.0 / (1.0 + e), step(vec4(0.0), x));
#elif ACT == 7
    vec4 e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
#else
    return x;
#endif
}

float activate(float x) { return activate(vec4(x)).x; }
