// Every gles3 fragment shader: full precision (ES 3.0 guarantees highp in fragment shaders),
// except float arithmetic under FP16_COMPUTE (see shaders/compute/prelude.glsl).
#ifdef FP16_COMPUTE
precision mediump float;
#else
precision highp float;
#endif
precision highp int;
precision highp sampler2D;
