#!/usr/bin/env python3
"""Multi-session agent workload over HTTP against an OpenAI-compatible server
(kvtier serve, or llama.cpp's llama-server for comparison).

6 sessions x 3 rounds. Each session: a shared ~300-word system prompt, its own
~1,200-word document, and a history that grows by one ~60-word tool result per
round (plus the assistant's previous replies). 16 generated tokens, temperature
0, sessions served round-robin. Prints TTFT per request, TTFT p50 per round,
prompt tokens computed per round (prompt_tokens - cached_tokens, or llama.cpp's
timings.prompt_n), output tokens per second of the round's wall time, the
inter-token latency (ITL: time between streamed content chunks) p50/p99,
and total wall time. Loopback only. Standard library only.

usage: agent_bench.py --url http://127.0.0.1:8090 [--label NAME] [--sessions 6] [--rounds 3]
       [--system-words 300] [--doc-words 1200] [--tool-words 60] [--kvtier-sessions] [--summary FILE]
       [--url2 URL [--switch-round 1]] [--dump FILE]

--kvtier-sessions names each session (kvtier.session_id), as an agent framework
would; --summary appends one JSON line per round (computed, TTFT p50/p99, wall
time, cached tokens by tier) for bench/expansion.sh. --url2 sends the rounds
from --switch-round on to a second server (node B continues the sessions
node A started: bench/remote_agents.sh, where the two share T3). --dump appends
one JSON line per request (reply text, prompt and completion tokens,
finish_reason) so runs can be compared reply by reply. A failed request is not
retried: it stops the run with exit status 1.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("the cache keeps attention state for tokens it has already seen so that later requests "
         "reuse it instead of recomputing prefill over identical input while memory tiers hold "
         "blocks of keys and values in order from fast to slow with disks and remote stores "
         "adding capacity rather than speed agents call tools read documents write answers plan "
         "steps check results and keep their growing context warm between steps").split()


def text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def served_model(url):
    """The model id the server at url serves (its /v1/models), so requests name it as the server expects."""
    u = urllib.parse.urlparse(url)
    assert u.hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"GET /v1/models: HTTP {resp.status}: {resp.read()[:300]!r}")
    return json.loads(resp.read())["data"][0]["id"]


def t3_read_counters(urls):
    """Sum over the nodes at urls of their T3 value bytes read and T3 read-call seconds (/metrics)."""
    total_bytes, total_s = 0.0, 0.0
    for url in urls:
        u = urllib.parse.urlparse(url)
        assert u.hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        conn.request("GET", "/metrics")
        for line in conn.getresponse().read().decode().splitlines():
            if line.startswith('kvtier_remote_bytes_total{direction="read"} '):
                total_bytes += float(line.split()[-1])
            elif line.startswith("kvtier_remote_latency_seconds_sum "):
                total_s += float(line.split()[-1])
    return total_bytes, total_s


def post_stream(url, body):
    """Streams a chat completion; returns (ttft_s, total_s, usage, timings, reply, finish_reason, gaps_s), gaps_s
    being the times between consecutive content chunks (the inter-token latencies)."""
    u = urllib.parse.urlparse(url)
    assert u.hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, usage, timings, content, finish, arrivals = None, None, None, [], None, []
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                obj = json.loads(data)
                for ch in obj.get("choices", []):
                    delta = ch.get("delta", {}).get("content")
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
                    if delta:
                        now = time.monotonic()
                        if ttft is None:
                            ttft = now - t0
                        arrivals.append(now)
                        content.append(delta)
                if obj.get("usage"):
                    usage = obj["usage"]
                if obj.get("timings"):
                    timings = obj["timings"]
                if obj.get("kvtier"):
                    usage = dict(usage or {}, kvtier=obj["kvtier"])
    total = time.monotonic() - t0
    conn.close()
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return (ttft if ttft is not None else total), total, usage, timings, "".join(content), finish, gaps


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def computed_tokens(usage, timings):
    if timings and "prompt_n" in timings:  # llama.cpp: tokens it evaluated
        return timings["prompt_n"]
    if usage:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
        return usage.get("prompt_tokens", 0) - cached
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8090")
    ap.add_argument("--label", default="server")
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=2,
                    help="client threads; sessions are dealt round-robin to them (match --parallel)")
    ap.add_argument("--system-words", type=int, default=300)
    ap.add_argument("--doc-words", type=int, default=1200)
    ap.add_argument("--tool-words", type=int, default=60)
    ap.add_argument("--kvtier-sessions", action="store_true", help="name each session (kvtier.session_id)")
    ap.add_argument("--summary", help="append one JSON line per round to this file")
    ap.add_argument("--dump", help="append one JSON line per request (session, round, reply text, token counts, "
                    "finish_reason) to this file, to compare runs")
    ap.add_argument("--url2", help="a second server for the rounds from --switch-round on")
    ap.add_argument("--switch-round", type=int, default=1)
    ap.add_argument("--node-metrics", help="comma-separated node URLs whose /metrics give each round's T3 reads "
                    "(bytes, seconds in read calls: the restore bandwidth)")
    args = ap.parse_args()

    rng = random.Random(1234)
    system = "You are an agent that works through tasks with tools. " + text(rng, args.system_words)
    sessions = []
    for s in range(args.sessions):
        doc = f"Document {s}: " + text(rng, args.doc_words)
        sessions.append([{"role": "system", "content": system},
                         {"role": "user", "content": doc + "\nTask: summarise the document, then call tools."}])
    tool_results = [[f"Tool result {r}: " + text(rng, args.tool_words) for r in range(args.rounds)] for _ in sessions]
    models = {u: served_model(u) for u in (args.url, args.url2) if u}
    t_start = time.monotonic()
    lock = threading.Lock()
    failed = []
    for r in range(args.rounds):
        ttfts, stats = [], {"computed": 0, "prompt": 0, "tiers": {}, "output": 0, "gaps": []}
        nodes = args.node_metrics.split(",") if args.node_metrics else []
        t3_before = t3_read_counters(nodes)
        t_round = time.monotonic()

        def worker(ids):
            for s in ids:
                msgs = sessions[s]
                if r > 0:
                    msgs.append({"role": "user", "content": tool_results[s][r]})
                url = args.url2 if args.url2 and r >= args.switch_round else args.url
                body = {"model": models[url], "messages": msgs, "max_tokens": args.max_tokens, "temperature": 0,
                        "stream": True, "stream_options": {"include_usage": True}}
                if args.kvtier_sessions:
                    body["kvtier"] = {"session_id": f"agent-{s}"}
                try:
                    ttft, total, usage, timings, reply, finish, gaps = post_stream(url, body)
                except Exception as e:  # no retry: a failed request ends the run (the next rounds would differ)
                    with lock:
                        failed.append(f"round {r} session {s}: {e!r}")
                    print(f"[{args.label}] WARNING: round {r} session {s} failed: {e!r}", flush=True)
                    return
                if finish not in ("length", "stop"):
                    print(f"[{args.label}] WARNING: round {r} session {s} ended with finish_reason {finish!r}", flush=True)
                msgs.append({"role": "assistant", "content": reply})
                c = computed_tokens(usage, timings)
                p = (usage or {}).get("prompt_tokens", 0) if usage else (timings or {}).get("prompt_n", 0)
                with lock:
                    for tier, n in ((usage or {}).get("kvtier") or {}).get("cached_tokens_by_tier", {}).items():
                        stats["tiers"][tier] = stats["tiers"].get(tier, 0) + n
                    stats["computed"] += max(c, 0)
                    stats["prompt"] += p or 0
                    stats["output"] += (usage or {}).get("completion_tokens") or (timings or {}).get("predicted_n", 0)
                    stats["gaps"].extend(gaps)
                    ttfts.append(ttft)
                    if args.dump:
                        with open(args.dump, "a") as f:
                            f.write(json.dumps({"label": args.label, "round": r, "session": s, "prompt_tokens": p,
                                                "completion_tokens": (usage or {}).get("completion_tokens"),
                                                "finish_reason": finish, "reply": reply}) + "\n")
                    print(f"[{args.label}] round {r} session {s}: prompt {p} tokens, computed {c}, "
                          f"ttft {ttft:.2f} s, total {total:.2f} s", flush=True)

        n = max(1, args.concurrency)
        threads = [threading.Thread(target=worker, args=(list(range(i, len(sessions), n)),)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            print(f"[{args.label}] stopped: {len(failed)} request(s) failed in round {r}", flush=True)
            return 1
        computed, prompt_total = stats["computed"], stats["prompt"]
        wall = time.monotonic() - t_round
        t3_after = t3_read_counters(nodes)
        t3_bytes, t3_s = t3_after[0] - t3_before[0], t3_after[1] - t3_before[1]
        t3_mbps = t3_bytes / t3_s / 1e6 if t3_s > 0 else 0.0
        node = " on node B" if args.url2 and r >= args.switch_round else ""
        gaps = stats["gaps"] or [0.0]
        itl50, itl99 = statistics.median(gaps), percentile(gaps, 0.99)
        out_tps = stats["output"] / wall if wall > 0 else 0.0
        frac = " ".join(f"{t} {100.0 * n / max(prompt_total, 1):.1f}%" for t, n in sorted(stats["tiers"].items()))
        print(f"[{args.label}] round {r}{node}: TTFT p50 {statistics.median(ttfts):.2f} s, p99 {percentile(ttfts, 0.99):.2f} s, "
              f"max {max(ttfts):.2f} s; prompt tokens {prompt_total}, computed {computed} "
              f"({100.0 * computed / max(prompt_total, 1):.1f}%); wall {wall:.1f} s; cached by tier {stats['tiers']}"
              f" = {frac or 'none'} of prompt tokens; output {stats['output']} tokens = {out_tps:.1f} tok/s, "
              f"ITL p50 {1e3 * itl50:.1f} ms, p99 {1e3 * itl99:.1f} ms"
              + (f"; T3 read {t3_bytes / 1e6:.1f} MB in {t3_s:.2f} s of read calls = {t3_mbps:.0f} MB/s" if nodes else ""),
              flush=True)
        if args.summary:
            with open(args.summary, "a") as f:
                f.write(json.dumps({"label": args.label, "sessions": args.sessions, "round": r,
                                    "prompt": prompt_total, "computed": computed,
                                    "ttft_p50": statistics.median(ttfts), "ttft_p99": percentile(ttfts, 0.99),
                                    "wall": wall, "tiers": stats["tiers"], "t3_bytes": t3_bytes, "t3_read_s": t3_s,
                                    "t3_mbps": t3_mbps, "output_tokens": stats["output"],
                                    "output_tok_s": out_tps, "itl_p50": itl50, "itl_p99": itl99}) + "\n")
    print(f"[{args.label}] total wall time {time.monotonic() - t_start:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
