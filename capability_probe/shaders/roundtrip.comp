#version 450
// The probe's Kompute round trip: a shared-memory reversal within each workgroup of 64, then
// y[i] = x[reversed] * 2 + i. Every value is exact in fp32, so the result must match bit for bit.
// Compiled into capability_probe/_spirv.py by tools/gen_probe_spirv.py (glslangValidator -V).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
shared float sh[64];
void main() {
    uint gid = gl_GlobalInvocationID.x;
    uint lid = gl_LocalInvocationID.x;
    sh[lid] = x[gid];
    barrier();
    y[gid] = sh[63u - lid] * 2.0 + float(gid);
}
