// Attention over f16 pages (attention.glsl).
#version 450
#define KV_F16 1
#extension GL_GOOGLE_include_directive : require
#include "attention.glsl"
