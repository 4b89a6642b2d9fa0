// Attention over f32 pages (attention.glsl).
#version 450
#define KV_F16 0
#extension GL_GOOGLE_include_directive : require
#include "attention.glsl"
