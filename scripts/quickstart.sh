#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run the main job:
# `kvtier run` on a prompt. With no model argument it uses a random-weight model
# kvtier generates itself; pass a GGUF to use a real one:
#   scripts/quickstart.sh [MODEL.gguf] ["prompt"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
model_args=()
if [ $# -ge 1 ] && [ -n "$1" ]; then model_args=(-m "$1"); fi
prompt=${2:-"The tiered KV cache keeps attention state so that"}
echo "== kvtier run ${model_args[*]} -p \"$prompt\" -n 48" >&2
exec ./build/kvtier run "${model_args[@]}" -p "$prompt" -n 48
