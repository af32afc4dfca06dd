// Every gles3 fragment shader: full precision (ES 3.0 guarantees highp in fragment shaders),
// except float arithmetic under FP16_COMPUTE (see shaders/compute/prelude.glsl).
#ifdef FP16_COMPUTE
precision mediump float;
#else
precision highp float;
#endif
#ifndef ACC4
#define ACC4 highp vec4  // the running sum of a dot product (see shaders/compute/prelude.glsl)
#endif
precision highp int;
precision highp sampler2D;
