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

--api responses runs the same agent over the Responses API instead: each step
sends only its new items (the tool results, as function_call_output) and names
the previous response with previous_response_id, so the server keeps the
history; --api both runs the chat agent, then the responses one, on fresh
sessions (other ticket numbers, so neither finds the other's prompts). Both
print the request bytes each step sent. Numbers only; never pass/fail.

usage: tools_bench.py --url http://127.0.0.1:PORT [--sessions 6] [--steps 6] [--api chat|responses|both]
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


def post(url, body, route="/v1/chat/completions"):
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + route, data=data, headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    out["_wall_ms"] = (time.time() - t0) * 1e3
    out["_sent"] = len(data)
    return out


def first_user(s, base):
    return (f"Ticket {base + s}: customer {s} reports replication lag alerts every night since the upgrade. "
            f"What should they do?")


def chat_step(args, st, s, step, final):
    """One chat step of session s: the whole conversation re-sent. Returns (response, usage, kvtier, cold body)."""
    body = {"messages": st["messages"], "tools": TOOLS, "max_tokens": 16 if final else args.max_tokens,
            "seed": 1000 * s + step, "tool_choice": "auto" if final else "required"}
    r = post(args.url, body)
    msg = r["choices"][0]["message"]
    st["messages"].append({"role": "assistant", "content": msg.get("content"),
                           **({"tool_calls": msg["tool_calls"]} if msg.get("tool_calls") else {})})
    for call in msg.get("tool_calls") or []:
        st["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": RESULT})
    u = r["usage"]
    return r, u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"], body


RTOOLS = [dict(t["function"], type="function") for t in TOOLS]


def responses_step(args, st, s, step, final):
    """One Responses step of session s: only the new items, after previous_response_id."""
    body = {"instructions": SYSTEM, "input": st["input"], "tools": RTOOLS, "seed": 1000 * s + step,
            "max_output_tokens": 16 if final else args.max_tokens, "tool_choice": "auto" if final else "required"}
    if st.get("prev"):
        body["previous_response_id"] = st["prev"]
    r = post(args.url, body, "/v1/responses")
    st["prev"] = r["id"]
    st["input"] = [{"type": "function_call_output", "call_id": it["call_id"], "output": RESULT}
                   for it in r["output"] if it.get("type") == "function_call"]
    u = r["usage"]
    return r, u["input_tokens"], u["output_tokens"], u["input_tokens_details"]["cached_tokens"], None


def agent(args, api, base):
    if api == "chat":
        sessions = [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first_user(s, base)}]}
                    for s in range(args.sessions)]
        step_fn = chat_step
    else:
        sessions = [{"input": [{"role": "user", "content": first_user(s, base)}]} for s in range(args.sessions)]
        step_fn = responses_step
    last_total = [0] * args.sessions
    rows = []
    print(f"== {api}: {args.sessions} sessions x {args.steps} steps")
    print(f"{'step':>4} {'prompt':>7} {'new':>5} {'computed':>8} {'cached%':>7} {'ttft_ms':>8} {'cold_ms':>8} "
          f"{'sent_B':>7}")
    for step in range(args.steps):
        agg = {"prompt": 0, "new": 0, "computed": 0, "cached": 0, "ttft": 0.0, "cold": 0.0, "sent": 0}
        for s in range(args.sessions):
            r, prompt, completion, cached, cold_body = step_fn(args, sessions[s], s, step, step == args.steps - 1)
            k = r["kvtier"]
            new = prompt - last_total[s]
            last_total[s] = prompt + completion
            cold = 0.0
            if cold_body is not None:  # the same prompt with a fresh cache_salt: nothing to reuse
                cold = post(args.url, dict(cold_body, cache_salt=f"cold-{base}-{step}-{s}", max_tokens=1))
                cold = cold["kvtier"]["ttft_ms"]
            for key, v in (("prompt", prompt), ("new", new), ("computed", k["computed_tokens"]), ("cached", cached),
                           ("ttft", k["ttft_ms"]), ("cold", cold), ("sent", r["_sent"])):
                agg[key] += v
        n = args.sessions
        rows.append(agg)
        print(f"{step + 1:>4} {agg['prompt'] / n:>7.0f} {agg['new'] / n:>5.0f} {agg['computed'] / n:>8.0f} "
              f"{100 * agg['cached'] / max(agg['prompt'], 1):>6.1f}% {agg['ttft'] / n:>8.1f} "
              f"{agg['cold'] / n if cold_body is not None else float('nan'):>8.1f} {agg['sent'] / n:>7.0f}")
    later = rows[1:] or rows
    comp = sum(r["computed"] for r in later)
    new = sum(r["new"] for r in later)
    ttft = sum(r["ttft"] for r in later) / len(later) / args.sessions
    cold = "" if api != "chat" else f" vs cold {sum(r['cold'] for r in later) / len(later) / args.sessions:.1f} ms"
    print(f"{api} steps 2..{args.steps}: computed {comp} tokens for {new} new ({comp / max(new, 1):.2f}x); "
          f"cached {100 * sum(r['cached'] for r in later) / max(sum(r['prompt'] for r in later), 1):.1f}% of the prompt; "
          f"TTFT {ttft:.1f} ms{cold}; sent {sum(r['sent'] for r in later) / len(later) / args.sessions:.0f} "
          f"bytes per request")


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
    ap.add_argument("--api", choices=("chat", "responses", "both"), default="chat")
    args = ap.parse_args()
    if args.api in ("chat", "both"):
        agent(args, "chat", 1000)
    if args.api in ("responses", "both"):
        agent(args, "responses", 2000)
    if args.reps > 0:
        constrained_cost(args)


if __name__ == "__main__":
    main()
