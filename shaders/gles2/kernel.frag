// Head of every gles2 kernel: the generated loaders, compute() and main() follow
// (gpubackend/paths/gles2/kernels.py). GLSL ES 1.00, needs highp in the fragment stage.
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
precision highp sampler2D;
#else
#error "gles2 kernels need highp float in fragment shaders"
#endif
#include "gles2/encoding.glsl"
