// epilogue(v): what a conv / gemm kernel applies to its finished sum before the store: the fused
// activation ACT, or with GATE the activation as a gate on the sum, v * activate(v) (SiLU is
// x * Sigmoid(x): the Sigmoid and Mul nodes fused by compute_kernels.fuse_gates). Include after
// common/elementwise.glsl.
vec4 epilogue(vec4 v) {
#ifdef GATE
    return v * activate(v);
#else
    return activate(v);
#endif
}
