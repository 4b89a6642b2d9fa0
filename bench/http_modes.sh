#!/usr/bin/env bash
# libmicrohttpd's threading modes under load: kvtier's default (a thread per
# connection) against epoll with a pool of N threads ($KVT_HTTP_THREAD_POOL,
# read by the server for this benchmark only). Prints, per mode:
#   A. /health throughput and latency, C keep-alive clients, nothing else running;
#   B. /health latency while G clients run long generations (what a pool costs
#      when its threads block on generations: kvtier's handlers wait for them);
#   server threads at the peak.
# Numbers, never pass/fail. usage: bench/http_modes.sh [--pool N] [--clients C] [--gens G] [--seconds S]
set -u
cd "$(dirname "$0")/.."
POOL=4 C=32 G=8 S=5
while [ $# -gt 0 ]; do
  case $1 in
    --pool) POOL=$2; shift 2 ;; --clients) C=$2; shift 2 ;; --gens) G=$2; shift 2 ;; --seconds) S=$2; shift 2 ;;
    *) echo "usage: $0 [--pool N] [--clients C] [--gens G] [--seconds S]" >&2; exit 2 ;;
  esac
done
KVT_BIN=${KVT_BIN:-build/kvtier}
. tests/testutil.sh
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 128 --layers 4 --heads 4 --kv-heads 2 --ff 256 --vocab 2000 >/dev/null 2>&1

cat >"$TMP/load.py" <<'PY'
import http.client, json, sys, threading, time
port, mode, clients, gens, secs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
lat, errors, stop = [], [0], threading.Event()
def health():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while not stop.is_set():
        t = time.perf_counter()
        try:
            c.request("GET", "/health"); r = c.getresponse(); r.read()
            if r.status != 200: errors[0] += 1
            lat.append(time.perf_counter() - t)
        except Exception:
            errors[0] += 1; c.close(); c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
def gen():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": "a long generation", "max_tokens": 400, "ignore_eos": True})
    while not stop.is_set():
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"}); c.getresponse().read()
        except Exception:
            c.close(); c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
ts = [threading.Thread(target=gen, daemon=True) for _ in range(gens)]
for t in ts: t.start()
if gens: time.sleep(1.0)  # the generations are running
hs = [threading.Thread(target=health, daemon=True) for _ in range(clients)]
t0 = time.perf_counter()
for t in hs: t.start()
time.sleep(secs); stop.set()
for t in hs: t.join(70)
dt = time.perf_counter() - t0
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else float("nan")
print(f"{mode}: {len(lat) / dt:8.0f} /health per s, p50 {q(0.5):7.2f} ms, p99 {q(0.99):8.2f} ms, max {q(1.0):8.1f} ms, {errors[0]} errors")
PY

run_mode() { # NAME VAR=VALUE...: a server with these in its environment
  local name=$1; shift
  local -x "$@"
  kvt_start_server srv -m "$TMP/m.gguf" -t 2 --parallel "$G" --queue 1024
  python3 "$TMP/load.py" "$PORT" "A $name, $C clients" "$C" 0 "$S"
  python3 "$TMP/load.py" "$PORT" "B $name, 4 clients + $G generations" 4 "$G" "$S" &
  local lp=$! peak=0
  while kill -0 $lp 2>/dev/null; do
    local th; th=$(awk '/^Threads/ {print $2}' "/proc/$SRV_PID/status"); [ "${th:-0}" -gt "$peak" ] && peak=$th; sleep 0.2
  done
  echo "   $name: at most $peak server threads"
  kvt_stop_server srv
}
echo "kvtier HTTP threading, $(nproc) CPUs; load: python http.client threads on the same machine"
run_mode "thread-per-connection" KVT_HTTP_THREAD_POOL=
run_mode "epoll, pool of $POOL" KVT_HTTP_THREAD_POOL="$POOL"
