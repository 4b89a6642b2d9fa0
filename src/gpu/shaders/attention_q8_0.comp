// Attention over q8_0 pages (attention.glsl; kv.glsl reads their values).
#version 450
#define KV_F16 0
#define KV_Q8 1
#extension GL_GOOGLE_include_directive : require
#include "attention.glsl"
