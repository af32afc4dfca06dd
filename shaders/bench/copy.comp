#version 310 es
// Memory bandwidth (ES 3.1 compute and Vulkan): each invocation copies one vec4 (16 bytes read,
// 16 bytes written). Compiled for Vulkan with `glslangValidator -V` (which defines VULKAN).
precision highp float;

#ifdef VULKAN
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
#else
layout(local_size_x = 64) in;
#endif

layout(std430, binding = 0) readonly buffer Src { vec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { vec4 dst[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    dst[i] = src[i];
}
