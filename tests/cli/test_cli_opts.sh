#!/usr/bin/env bash
# run's and serve's option tables carry each numeric option's kind and bounds:
# a value outside them, or not a number, is a usage error (exit 2) that names
# the flag (or the environment variable) and the range; the bounds themselves
# are accepted. Values are checked in order, so "OPT VALUE --help" exits 0 when
# VALUE is accepted, without loading a model.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
rejects() { # rejects "TEXT THE ERROR MUST HOLD" COMMAND ARGS...: exit 2, the message names flag and range
  local want=$1; shift
  "$@" >"$TMP/out" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || { echo "  '$*' exited $rc, expected 2" >&2; return 1; }
  grep -qF -- "$want" "$TMP/out" || { echo "  '$*' said: $(head -2 "$TMP/out"), expected '$want'" >&2; return 1; }
}
accepts() { "$@" --help >/dev/null 2>"$TMP/err" || { echo "  '$*' rejected: $(head -2 "$TMP/err")" >&2; return 1; }; }

# integers
check "port above range" rejects "--port must be an integer in [0, 65535], got '65536'" "$BIN" serve --port 65536
check "port negative" rejects "--port must be an integer in [0, 65535], got '-1'" "$BIN" serve --port=-1
check "port 0 and 65535 accepted" accepts "$BIN" serve --port 0 --port 65535
check "parallel 0" rejects "--parallel must be an integer in [1, 256], got '0'" "$BIN" serve --parallel 0
check "-np 257 named as --parallel" rejects "--parallel must be an integer in [1, 256], got '257'" "$BIN" serve -np 257
check "ctx 1 (serve needs 2), named as typed" rejects "-c must be 0 (the model's) or at least 2, got '1'" "$BIN" serve -c 1
check "ctx -1" rejects "-c must be an integer in [0, 16777216], got '-1'" "$BIN" serve -c -1
check "alias --ctx named as given" rejects "--ctx must be 0 (the model's) or at least 2" "$BIN" serve --ctx 1
check "threads not a number" rejects "-t must be an integer in [-1, 512], got '4x'" "$BIN" run -t 4x
check "threads 0" rejects "--threads must be -1 (all CPUs) or at least 1, got '0'" "$BIN" run --threads 0
check "threads -2" rejects "--threads must be an integer in [-1, 512], got '-2'" "$BIN" serve --threads -2
check "threads -1 (llama.cpp's: all CPUs) accepted" accepts "$BIN" serve -t -1
check "n-predict below -2" rejects "--n-predict must be an integer in [-2, 16777216], got '-3'" "$BIN" run --n-predict -3 -p x
check "serve n-predict 0" rejects "--n-predict must be -1 (no limit) or at least 1, got '0'" "$BIN" serve --n-predict 0
check "block size 0" rejects "--block-size must be an integer in [1, 4096]" "$BIN" run --block-size 0
# the engine takes pages past the cache's largest block (1024 tokens), the cache does not: a usage
# error naming the flag unless --no-cache, and rag index (whose blocks are a server's) takes at most that
check "block size 1025 with the cache" rejects "--block-size 1025: the cache takes blocks of at most 1024 tokens" \
  "$BIN" run -p x --block-size 1025
check "... a usage error before any model is read" rejects "(or use --no-cache)" "$BIN" run -m "$TMP/none.gguf" -p x \
  --block-size 4096
check "rag index --block-size 2048" rejects "--block-size expects an integer in [1, 1024]" "$BIN" rag index \
  --block-size 2048
check "drain timeout past a day" rejects "--drain-timeout must be an integer in [0, 86400]" "$BIN" serve --drain-timeout 86401
check "disk wait past 10 min" rejects "--kv-disk-wait-ms must be an integer in [0, 600000]" "$BIN" run --kv-disk-wait-ms 600001
check "remote timeout 0" rejects "--kv-remote-timeout-ms must be an integer in [1, 600000]" "$BIN" serve --kv-remote-timeout-ms 0
check "request-timeout 0 and timeout 1 accepted" accepts "$BIN" serve --request-timeout 0 --timeout 1
# numbers
check "top-p 0 (open bound)" rejects "--top-p must be a number in (0, 1], got '0'" "$BIN" run --top-p 0
check "top-p above 1" rejects "--top-p must be a number in (0, 1], got '1.01'" "$BIN" run --top-p 1.01
check "top-p 1 accepted" accepts "$BIN" run --top-p 1
check "temp not a number" rejects "--temp must be a number, got 'hot'" "$BIN" run --temp hot
check "temp inf" rejects "--temp must be a number, got 'inf'" "$BIN" run --temp inf
check "temp 0 and 2.5 accepted" accepts "$BIN" run --temp 0 --temp 2.5
check "keep-warm above a day" rejects "--session-keep-warm must be a number in [0, 86400]" "$BIN" serve --session-keep-warm 86400.5
check "space retry 0 (open bound)" rejects "--kv-disk-space-retry must be a number in (0, 3600], got '0'" "$BIN" serve --kv-disk-space-retry 0
check "space retry 0.2 and 3600 accepted" accepts "$BIN" serve --kv-disk-space-retry 0.2 --kv-disk-space-retry 3600
check "live window negative" rejects "--kv-disk-live-window must be a number >= 0, got '-1'" "$BIN" run --kv-disk-live-window -1
# sizes
check "max-body 0" rejects "--max-body must be a size like 512M or 4G, at least 1 byte, got '0'" "$BIN" serve --max-body 0
check "kv-ram unit unknown" rejects "--kv-ram must be a size like 512M or 4G, at least 0 bytes, got '2Q'" "$BIN" run --kv-ram 2Q
check "remote size 0" rejects "--kv-remote-size must be a size like 512M or 4G, at least 1 byte" "$BIN" serve --kv-remote-size 0
check "remote retry size not a size" rejects "--kv-remote-retry-size must be a size like 512M or 4G" "$BIN" serve --kv-remote-retry-size lots
check "remote retry size 0 and 1G accepted" accepts "$BIN" serve --kv-remote-retry-size 0 --kv-remote-retry-size 1G
check "sizes with units accepted" accepts "$BIN" serve --kv-ram 2G --kv-active 256MiB --max-body 1k --kv-disk-size 1T
# the environment is checked the same way and named as such
check "env port" rejects "\$KVTIER_PORT must be an integer in [0, 65535], got '99999'" env KVTIER_PORT=99999 "$BIN" serve
check "env top-p" rejects "\$KVTIER_TOP_P must be a number in (0, 1]" env KVTIER_TOP_P=2 "$BIN" run -p x
# --help states the defaults the bounds protect
check "serve --help" accepts "$BIN" serve
# the GPU options, checked on the CPU too: the memory fraction in (0, 1], -ngl from -1 (all layers)
check "gpu-memory-fraction 0 (open bound)" rejects "--gpu-memory-fraction must be a number in (0, 1], got '0'" "$BIN" run --gpu-memory-fraction 0
check "gpu-memory-fraction above 1" rejects "--gpu-memory-fraction must be a number in (0, 1], got '1.5'" "$BIN" serve --gpu-memory-fraction 1.5
check "gpu-memory-fraction not a number" rejects "--gpu-memory-fraction must be a number" "$BIN" run --gpu-memory-fraction most
check "gpu-memory-fraction 1 and 0.05 accepted" accepts "$BIN" serve --gpu-memory-fraction 1 --gpu-memory-fraction 0.05
check "env gpu-memory-fraction" rejects "\$KVTIER_GPU_MEMORY_FRACTION must be a number in (0, 1]" env KVTIER_GPU_MEMORY_FRACTION=2 "$BIN" run -p x
check "-ngl -2 named as --n-gpu-layers" rejects "--n-gpu-layers must be an integer in [-1, 2147483647], got '-2'" "$BIN" run -ngl -2
check "-ngl -1 and 99 accepted" accepts "$BIN" run -ngl -1 -ngl 99
# llama.cpp's other device flags: kvtier runs a model on one device
check "--gpu-layers is -ngl" accepts "$BIN" run --gpu-layers 99
check "-sm none, layer and row accepted" accepts "$BIN" serve -sm none -sm layer --split-mode row
check "-sm bogus" rejects "--split-mode takes none, layer or row, got 'bogus'" "$BIN" run -sm bogus
check "-ts one share accepted" accepts "$BIN" run -ts 0,1
check "-ts with / accepted" accepts "$BIN" run -ts 1/0/0
check "-ts two shares refused" rejects "--tensor-split 3,1 shares the model over 2 GPUs; kvtier runs a model on one device" "$BIN" serve -ts 3,1
check "-ts malformed" rejects "--tensor-split takes shares like 3,1" "$BIN" run -ts 1,x
check "-mg range" rejects "--main-gpu must be an integer in [0, 1023], got '-1'" "$BIN" run -mg -1
check "-ts and -mg on different GPUs" rejects "--main-gpu 1 and --tensor-split name different GPUs" "$BIN" run -ts 1,0 -mg 1
check "-mg and --device both naming it" rejects "both name the device: give one" "$BIN" run -mg 1 --device cpu -p x
check "-mg 0 with --device cpu is llama.cpp's default" expect_rc 1 "$BIN" run -mg 0 --device cpu -m "$TMP/none.gguf" -p x
check "-dev none accepted" accepts "$BIN" run -dev none
check "--device of several refused" rejects "kvtier runs a model on one device; name one" "$BIN" serve --device cpu,Vulkan0
"$BIN" run -nkvo --help >/dev/null 2>"$TMP/err"
check "-nkvo accepted with a note" grep -q "no-kv-offload: accepted; the KV of the GPU's layers stays in GPU memory" "$TMP/err"
"$BIN" serve --list-devices >"$TMP/out" 2>&1
check "--list-devices lists them (or says why none)" grep -q "Vulkan devices: " "$TMP/out"
check "eval gpu-memory-fraction 0" rejects "--gpu-memory-fraction must be a number in (0, 1], got '0'" "$BIN" eval --gpu-memory-fraction 0 -m m x
check "eval -ngl not a number" rejects "--n-gpu-layers must be an integer in [-1, 2147483647], got 'all'" "$BIN" eval -ngl all -m m x
for cmd in run serve eval; do
  "$BIN" $cmd --help >"$TMP/help" 2>&1
  check "$cmd --help explains --gpu-memory-fraction" grep -q -- "--gpu-memory-fraction.*" "$TMP/help"
  check "$cmd --help explains --n-gpu-layers" grep -q -- "--n-gpu-layers" "$TMP/help"
done
check "run --help: the default fraction" grep -q "default 0.9" <("$BIN" run --help 2>&1)
# the Q8_0 order: a word, from the flag (run, serve, eval) or KVTIER_Q8_ORDER; the kernels' own
# environment variables are checked too, not silently replaced by a default
check "q8-order unknown" rejects "--q8-order must be lanes or block, not 'fast'" "$BIN" run --q8-order fast
check "eval q8-order unknown" rejects "--q8-order must be lanes or block, not 'x'" "$BIN" eval --q8-order x -m m
check "env q8-order" rejects "KVTIER_Q8_ORDER must be lanes or block" env KVTIER_Q8_ORDER=blok "$BIN" serve
check "q8-order lanes and block accepted" accepts "$BIN" serve --q8-order lanes --q8-order block
check "KVT_Q8_ORDER unknown" rejects "KVT_Q8_ORDER must be lanes or block, not 'blok'" env KVT_Q8_ORDER=blok "$BIN" run -p x
check "KVT_OPS_VARIANT unknown" rejects "KVT_OPS_VARIANT='avx513' is not a kernel variant" env KVT_OPS_VARIANT=avx513 "$BIN" run -p x
# and --q8-order block computes what KVT_Q8_ORDER=block does, which is not the default
"$BIN" mkmodel -o "$TMP/q8.gguf" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 384 --type q8_0 --vocab 512 2>/dev/null
ev() { "$BIN" eval -m "$TMP/q8.gguf" -n 4 --tokens "1 2 3 4 5 6 7 8" "$@" 2>/dev/null | sha256sum; }
flag=$(ev --q8-order block) envb=$(KVT_Q8_ORDER=block ev) lanes=$(ev --q8-order lanes) dflt=$(ev)
check "eval --q8-order block is KVT_Q8_ORDER=block" is "$flag" "$envb"
check "--q8-order lanes is the default" is "$lanes" "$dflt"
check "the two orders give other logits" test "$flag" != "$lanes"

kvt_test_done test_cli_opts
