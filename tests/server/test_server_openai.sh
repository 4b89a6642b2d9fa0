#!/usr/bin/env bash
# A real client against `kvtier serve`: the official `openai` npm package (v4)
# runs tests/openai_client.cjs over loopback. The package is installed once
# into the build tree (node_test/); without node/npm or the registry the test
# is skipped (77), since nothing else runs here.
set -u
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node and npm are not installed"; exit 77; }
NODE_DIR=$(cd "$(dirname "$BIN")" && pwd)/node_test
if [ ! -d "$NODE_DIR/node_modules/openai" ]; then
  mkdir -p "$NODE_DIR"
  ( cd "$NODE_DIR" && [ -f package.json ] || echo '{"private":true}' >package.json
    timeout 180 npm install --no-audit --no-fund --silent openai@4 ) >"$NODE_DIR/install.log" 2>&1 || {
    echo "SKIP: 'npm install openai@4' failed (offline?); see $NODE_DIR/install.log"; exit 77; }
fi
. "$(dirname "$0")/../testutil.sh"
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
kvt_start_server main -m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 2 --api-key test-key --embeddings
BASE=$URL KEY=test-key NODE_PATH="$NODE_DIR/node_modules" timeout 120 node "$SRC/tests/openai_client.cjs"
rc=$?
kvt_stop_server main
exit $rc
