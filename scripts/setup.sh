#!/usr/bin/env bash
# Installs the Debian packages kvtier needs to build and test, only those missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(build-essential cmake pkg-config libpcre2-dev libxxhash-dev libcjson-dev liburing-dev libzstd-dev libmicrohttpd-dev libsodium-dev libhiredis-dev
  # the GPU layer (src/gpu): Vulkan headers and loader, the shader compiler, lavapipe (Vulkan
  # on the CPU, so its tests run on any machine) and the validation layer the tests turn on
  glslc libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers)
# Tools the tests call, installed only when the command is missing: a machine may
# already have them from elsewhere (e.g. a Node.js build that ships npm, which
# Debian's npm package would conflict with).
# redis-server (with redis-cli, redis-benchmark) backs the T3 tests and bench/remote.sh;
# each test starts its own server on a loopback port. groff renders kvtier.1 in tests/install.
# chromium-headless-shell loads /dashboard in a real browser in test_server_ops. clang-format
# (14, Debian 12's) checks in tests/install/test_format.sh that the C sources keep .clang-format.
# spirv-val (spirv-tools) validates the built shaders in tests/gpu/test_gpu_spirv.sh, the only
# check CI can make of the tensor-core shader, which lavapipe cannot run.
TOOLS=(curl:curl jq:jq python3:python3 node:nodejs npm:npm redis-server:redis-server groff:groff-base
  chromium-headless-shell:chromium-headless-shell clang-format:clang-format spirv-val:spirv-tools)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
for t in "${TOOLS[@]}"; do
  command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
