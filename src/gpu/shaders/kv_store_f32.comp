// KV store into f32 pages (kv_store.glsl).
#version 450
#define KV_F16 0
#extension GL_GOOGLE_include_directive : require
#include "kv_store.glsl"
