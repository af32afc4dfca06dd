// Head of every gles2 kernel: the generated loaders, compute() and main() follow
// (gpubackend/paths/gles2/kernels.py). GLSL ES 1.00, needs highp in the fragment stage.
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
// Loop counters are ints: at the default mediump, Mesa computes float(i) in fp16, which holds
// integers exactly only up to 2048 (a Softmax over 2100 elements read the wrong texels).
precision highp int;
precision highp sampler2D;
#else
#error "gles2 kernels need highp float in fragment shaders"
#endif
#include "gles2/encoding.glsl"
