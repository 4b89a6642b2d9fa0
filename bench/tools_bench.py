#!/usr/bin/env python3
"""An agent benchmark with tools, shaped like a LangChain tool-calling agent:
S sessions x K steps. Every step sends the whole conversation with the same
tool definitions; steps 1..K-1 force a tool call (tool_choice "required": the
constrained decoder writes a valid call even on a random-weight model), the
client "runs" the tool and appends the result; the last step answers freely.
Sessions run round-robin, so each step finds the others' work in between.

Per step it prints: prompt tokens, tokens new since the previous step (the
tool result and turn markup), tokens computed (prefilled), the cached
fraction, TTFT, and the TTFT of the same prompt cold (a fresh cache_salt).
Then the cost of constrained decoding per generated token against free text.
Numbers only; never pass/fail.

usage: tools_bench.py --url http://127.0.0.1:PORT [--sessions 6] [--steps 6]
"""
import argparse
import statistics
import json
import time
import urllib.request

TOOLS = [
    {"type": "function", "function": {
        "name": "search_docs", "description": "Full-text search over the product documentation.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "maxLength": 48}, "limit": {"type": "integer", "minimum": 0}},
            "required": ["query", "limit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_ticket", "description": "Fetch a support ticket by id, with its history.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0}},
                       "required": ["id"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "update_ticket", "description": "Set the status of a ticket and add a note to it.",
        "parameters": {"type": "object", "properties": {
            "id": {"type": "integer", "minimum": 0}, "status": {"enum": ["open", "pending", "closed"]},
            "note": {"type": "string", "maxLength": 64}},
            "required": ["id", "status", "note"], "additionalProperties": False}}},
]
SYSTEM = ("You are a support agent for a storage product. Use the tools to look up documentation and tickets, "
          "then update the ticket and answer the customer in two sentences. Be precise and cite the docs. ") * 4
RESULT = ("Result: the replication lag alert fires when a replica is more than 30 seconds behind; the usual causes "
          "are a saturated disk on the replica, a long-running transaction, or network loss between zones. ")


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    out["_wall_ms"] = (time.time() - t0) * 1e3
    return out


def agent(args):
    sessions = [[{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": f"Ticket {1000 + s}: customer {s} reports replication lag alerts "
                                             f"every night since the upgrade. What should they do?"}]
                for s in range(args.sessions)]
    last_total = [0] * args.sessions
    rows = []
    print(f"{'step':>4} {'prompt':>7} {'new':>5} {'computed':>8} {'cached%':>7} {'ttft_ms':>8} {'cold_ms':>8}")
    for step in range(args.steps):
        agg = {"prompt": 0, "new": 0, "computed": 0, "cached": 0, "ttft": 0.0, "cold": 0.0}
        for s in range(args.sessions):
            final = step == args.steps - 1
            body = {"messages": sessions[s], "tools": TOOLS, "max_tokens": args.max_tokens, "seed": 1000 * s + step,
                    "tool_choice": "auto" if final else "required"}
            if final:
                body["max_tokens"] = 16
            r = post(args.url, body)
            u, k = r["usage"], r["kvtier"]
            msg = r["choices"][0]["message"]
            new = u["prompt_tokens"] - last_total[s]
            last_total[s] = u["prompt_tokens"] + u["completion_tokens"]
            cold = post(args.url, dict(body, cache_salt=f"cold-{step}-{s}", max_tokens=1))["kvtier"]["ttft_ms"]
            for key, v in (("prompt", u["prompt_tokens"]), ("new", new), ("computed", k["computed_tokens"]),
                           ("cached", u["prompt_tokens_details"]["cached_tokens"]), ("ttft", k["ttft_ms"]),
                           ("cold", cold)):
                agg[key] += v
            sessions[s].append({"role": "assistant", "content": msg.get("content"),
                                **({"tool_calls": msg["tool_calls"]} if msg.get("tool_calls") else {})})
            for call in msg.get("tool_calls") or []:
                sessions[s].append({"role": "tool", "tool_call_id": call["id"], "content": RESULT})
        n = args.sessions
        rows.append(agg)
        print(f"{step + 1:>4} {agg['prompt'] / n:>7.0f} {agg['new'] / n:>5.0f} {agg['computed'] / n:>8.0f} "
              f"{100 * agg['cached'] / max(agg['prompt'], 1):>6.1f}% {agg['ttft'] / n:>8.1f} {agg['cold'] / n:>8.1f}")
    later = rows[1:] or rows
    comp = sum(r["computed"] for r in later)
    new = sum(r["new"] for r in later)
    print(f"steps 2..{args.steps}: computed {comp} tokens for {new} new ({comp / max(new, 1):.2f}x); "
          f"cached {100 * sum(r['cached'] for r in later) / max(sum(r['prompt'] for r in later), 1):.1f}% of the prompt; "
          f"TTFT {sum(r['ttft'] for r in later) / len(later) / args.sessions:.1f} ms vs cold "
          f"{sum(r['cold'] for r in later) / len(later) / args.sessions:.1f} ms")


def per_token_ms(url, extra, seed):
    """Decode time per generated token after the first (wall time less TTFT) of one request."""
    body = {"messages": [{"role": "user", "content": "Write a long description of a storage cluster."}],
            "max_tokens": 96, "seed": seed, "ignore_eos": True, **extra}
    r = post(url, body)
    n = r["usage"]["completion_tokens"]
    return (r["_wall_ms"] - r["kvtier"]["ttft_ms"]) / (n - 1) if n > 1 else None


def constrained_cost(args):
    """The three modes interleaved request by request (so a load swing on a shared machine hits all of
    them alike), then the median of each mode's per-token times."""
    schema = {"type": "object", "properties": {"summary": {"type": "string", "minLength": 200}},
              "required": ["summary"], "additionalProperties": False}
    modes = {"free": {}, "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}},
             "json_object": {"response_format": {"type": "json_object"}}}
    times = {m: [] for m in modes}
    for i in range(args.reps):
        for m, extra in modes.items():
            t = per_token_ms(args.url, extra, i)
            if t is not None:
                times[m].append(t)
    med = {m: statistics.median(v) if v else float("nan") for m, v in times.items()}
    print(f"decode per token (median of {args.reps} interleaved requests): free {med['free']:.2f} ms; "
          f"json_schema {med['json_schema']:.2f} ms (+{100 * (med['json_schema'] / med['free'] - 1):.1f}%); "
          f"json_object {med['json_object']:.2f} ms (+{100 * (med['json_object'] / med['free'] - 1):.1f}%)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    agent(args)
    constrained_cost(args)


if __name__ == "__main__":
    main()
