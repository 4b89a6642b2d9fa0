// IQ4_XS weights (matmul_q.glsl), plain integer multiplies, for devices without integer dot products.
#version 450
#extension GL_GOOGLE_include_directive : require
#define MM_TYPE MM_IQ4_XS
#include "matmul_q.glsl"
