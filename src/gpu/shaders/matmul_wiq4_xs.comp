// IQ4_XS weights (matmul_q.glsl), integer dot products through OpSDot.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
#define KVT_SDOT
#define MM_TYPE MM_IQ4_XS
#include "matmul_q.glsl"
