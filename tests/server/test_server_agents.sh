#!/usr/bin/env bash
# Agent loops with tools against `kvtier serve`, driven by the clients agents
# are written with: the official `openai` package (6.x), LangChain
# (@langchain/openai 1.x) and the AI SDK (ai 6 with @ai-sdk/openai-compatible
# 2 and, for the Responses API, its default provider @ai-sdk/openai 3, the
# major built for ai 6), plus ajv to validate JSON-schema output; see
# tests/agent_clients.mjs (chat completions agent loops, 100 json_schema seeds)
# and tests/agent_clients_api.mjs (the Responses API, streamed tool calls and
# zod 4 structured output). The packages are installed once into the build
# tree (node_agents/); without node/npm or the registry the test is skipped
# (77).
set -u
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node and npm are not installed"; exit 77; }
NODE_DIR=$(cd "$(dirname "$BIN")" && pwd)/node_agents
PKGS="openai@6 @langchain/openai@1 @langchain/core@1 ai@6 @ai-sdk/openai@3 @ai-sdk/openai-compatible@2 zod@4 ajv@8"
if [ ! -f "$NODE_DIR/installed" ] || [ "$(cat "$NODE_DIR/installed")" != "$PKGS" ]; then
  mkdir -p "$NODE_DIR"
  ( cd "$NODE_DIR" && { [ -f package.json ] || echo '{"private":true}' >package.json; } &&
    # shellcheck disable=SC2086
    timeout 300 npm install --no-audit --no-fund --silent $PKGS ) >"$NODE_DIR/install.log" 2>&1 || {
    echo "SKIP: 'npm install $PKGS' failed (offline?); see $NODE_DIR/install.log"; exit 77; }
  echo "$PKGS" >"$NODE_DIR/installed"
fi
. "$(dirname "$0")/../testutil.sh"
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
kvt_start_server main -m "$TMP/m.gguf" --host 127.0.0.1 -t 1 -c 4096 --parallel 2 --api-key test-key
# the scripts run fewer seeds under the sanitizers, which are about 10x slower
grep -qa __asan_init "$BIN" && export KVT_SANITIZED=1
# ES modules resolve packages beside the script, so each runs from the install folder
rc=0
for script in agent_clients.mjs agent_clients_api.mjs; do
  cp "$SRC/tests/$script" "$NODE_DIR/"
  BASE=$URL KEY=test-key timeout 300 node "$NODE_DIR/$script" || rc=1
done
[ $rc -eq 0 ] || tail -n 20 "$TMP/main.log"
kvt_stop_server main
exit $rc
