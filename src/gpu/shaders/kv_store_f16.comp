// KV store into f16 pages (kv_store.glsl).
#version 450
#define KV_F16 1
#extension GL_GOOGLE_include_directive : require
#include "kv_store.glsl"
