#!/usr/bin/env python3
"""RAG workload for bench/rag.sh (docs/rag.md).

corpus: writes N_BLOCKS documents of about WORDS words, each one chunk: filler
words common to all, plus its own keyword (kw<b>, several times, a count that
varies per block) and a marker word (mk<b>, once). Topic t is blocks 2t, 2t+1,
2t+2 (mod N_BLOCKS): neighbouring topics share a block, so retrieved sets overlap.

questions: three per topic, each naming the topic's three keywords and the
marker of one of its blocks, so the three retrieve the same three chunks with
a different chunk ranked first; shuffled with a fixed seed (topics interleave).

run: sends the questions one at a time to /v1/rag/chat/completions with a
kvtier.rag order, and prints one JSON line: prompt tokens, computed tokens,
cached fraction, TTFT p50/p95 (the server's kvtier.ttft_ms), plan_ms, wall time.

llama: the same questions to llama.cpp's llama-server (/completion), each as
the token ids of the naive (score order) prompt kvtier builds for it
(`kvtier rag query --prompt`: same chat template, same padded chunks), so both
servers see the same tokens; greedy, the same max tokens. Prints the same JSON
line: computed tokens are llama-server's timings.prompt_n (what its slot did
not reuse), TTFT its timings.prompt_ms (prompt processing up to the first
sampled token, as kvtier's ttft_ms is), plus the client-side streamed TTFT.
cache_prompt is left at llama-server's default (on) unless --no-cache-prompt.
No pass/fail; numbers only."""
import argparse
import json
import os
import random
import statistics
import subprocess
import time
import urllib.request

FILLER = ("the a system cache block token memory layer store order ship river stone light field paper engine "
          "signal market garden winter harbor valley record method number pattern reason answer window "
          "station letter minute report design budget").split()


def corpus(args):
    os.makedirs(args.docs, exist_ok=True)
    for b in range(args.blocks):
        rnd = random.Random(b)
        words = [rnd.choice(FILLER) for _ in range(args.words)]
        reps = 3 + (b * 7) % 5  # how strongly the block is about its keyword
        for i in range(reps):
            words[rnd.randrange(len(words))] = f"kw{b}"
        words[rnd.randrange(len(words))] = f"mk{b}"
        with open(os.path.join(args.docs, f"block{b:03d}.txt"), "w") as f:
            f.write(" ".join(words) + ".\n")


def questions(args):
    out = []
    for t in range(args.topics):
        blocks = [(2 * t + i) % args.blocks for i in range(3)]
        for j in range(3):
            kws = " ".join(f"kw{b}" for b in blocks)
            out.append(f"Topic {t} question {j}: what do {kws} say about mk{blocks[j]}?")
    random.Random(42).shuffle(out)
    return out


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def run(args):
    qs = questions(args)
    prompt = computed = cached = 0
    ttft, plan, cached_chunks, chunks = [], [], 0, 0
    t0 = time.time()
    for i, q in enumerate(qs):
        body = {"messages": [{"role": "system", "content": args.system}, {"role": "user", "content": q}],
                "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                "kvtier": {"rag": {"k": 3, "order": args.order}}}
        if args.cold:
            body["cache_salt"] = f"cold-{i}"  # a namespace of its own: nothing to reuse
        r = post(args.url + "/v1/rag/chat/completions", body)
        kv, u = r["kvtier"], r["usage"]
        prompt += u["prompt_tokens"]
        computed += kv["computed_tokens"]
        cached += kv["cached_tokens"]
        ttft.append(kv["ttft_ms"])
        plan.append(kv["rag"]["plan_ms"] + kv["rag"]["retrieve_ms"])
        chunks += len(kv["rag"]["chunks"])
        cached_chunks += kv["rag"]["cached_chunks"]
    wall = time.time() - t0
    print(json.dumps({"label": args.label, "questions": len(qs), "prompt_tokens": prompt, "computed_tokens": computed,
                      "cached_fraction": round(cached / prompt, 4), "chunks": chunks, "cached_chunks": cached_chunks,
                      "ttft_p50_ms": round(statistics.median(ttft), 1), "ttft_p95_ms": round(pct(ttft, 95), 1),
                      "plan_ms_mean": round(statistics.mean(plan), 4), "plan_ms_max": round(max(plan), 4),
                      "wall_s": round(wall, 1)}))


def naive_prompts(args, qs):
    """The token ids of kvtier's naive (score order) prompt for each question."""
    out = []
    for q in qs:
        r = subprocess.run([args.kvtier, "rag", "query", args.index, q, "-k", "3", "--json", "--prompt", "-m", args.model,
                            "--system", args.system, "--order", "score"], check=True, capture_output=True, text=True)
        out.append(json.loads(r.stdout)["prompt_tokens"])
    return out


def llama(args):
    qs = questions(args)
    prompts = naive_prompts(args, qs)
    prompt = computed = 0
    ttft, ttft_client = [], []
    t0 = time.time()
    for ids in prompts:
        body = {"prompt": ids, "n_predict": args.max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
        if args.no_cache_prompt:
            body["cache_prompt"] = False
        req = urllib.request.Request(args.url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t_send, t_first, last = time.time(), None, None
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                ev = json.loads(line[6:])
                if t_first is None and ev.get("content"):
                    t_first = time.time()
                if "timings" in ev:
                    last = ev
        tm = last["timings"]
        if last.get("tokens_evaluated", len(ids)) != len(ids):
            raise SystemExit(f'llama-server evaluated {last["tokens_evaluated"]} prompt tokens, sent {len(ids)}')
        prompt += len(ids)
        computed += tm["prompt_n"]
        ttft.append(tm["prompt_ms"])
        ttft_client.append(((t_first or time.time()) - t_send) * 1e3)
    wall = time.time() - t0
    print(json.dumps({"label": args.label, "questions": len(qs), "prompt_tokens": prompt, "computed_tokens": computed,
                      "cached_fraction": round(1 - computed / prompt, 4), "chunks": 3 * len(qs), "cached_chunks": None,
                      "ttft_p50_ms": round(statistics.median(ttft), 1), "ttft_p95_ms": round(pct(ttft, 95), 1),
                      "ttft_client_p50_ms": round(statistics.median(ttft_client), 1),
                      "ttft_client_p95_ms": round(pct(ttft_client, 95), 1),
                      "plan_ms_mean": None, "plan_ms_max": None, "wall_s": round(wall, 1)}))


def log(args):
    """A question log for `kvtier rag prewarm --questions`: one question per topic, worded
    unlike the measured ones (yesterday's traffic on the same topics)."""
    with open(args.out, "w") as f:
        for t in range(args.topics):
            kws = " ".join(f"kw{(2 * t + i) % args.blocks}" for i in range(3))
            f.write(f"Earlier, on topic {t}: how do {kws} relate?\n")


def bound(args):
    """Chunks the first question of each topic must compute with exact prefix reuse, by
    topic order of arrival: the planner's rule (follow a cached path, else canonical)
    against the best any order could do knowing the future (each topic can lend its
    first chunk to one later neighbour). A chunk-level model of the workload above."""
    first = []
    for q in questions(args):
        t = int(q.split()[1])
        if t not in first:
            first.append(t)
    T = args.topics

    def chunks(t):
        return [(2 * t + i) % args.blocks for i in range(3)]

    def planner():
        head, computed = {}, 0  # topic -> its first chunk
        for t in first:
            lent = [c for c in chunks(t) if any(head.get(u) == c for u in ((t - 1) % T, (t + 1) % T))]
            head[t] = min(lent) if lent else min(chunks(t), key=lambda c: f"block{c:03d}")
            computed += 3 - bool(lent)
        return computed

    head = {}

    def best(i=0):  # a topic that lends nothing puts a shared chunk first (its middle one helps no one)
        if i == len(first):
            return 0
        t, cost = first[i], []
        lent = [c for c in chunks(t) if any(head.get(u) == c for u in ((t - 1) % T, (t + 1) % T))]
        for c in lent or chunks(t)[::2]:
            head[t] = c
            cost.append(3 - bool(lent) + best(i + 1))
        del head[t]
        return min(cost)

    n = 3 * len(first)
    print(json.dumps({"label": "bound", "chunk_uses": 9 * len(first), "planner_computed_chunks": planner(),
                      "best_order_computed_chunks": best() if T <= 22 else None,
                      "prewarm_computed_chunks": n - len(first), "pairs_computed_chunks": len(first)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["corpus", "run", "llama", "log", "bound"])
    ap.add_argument("--out", help="log: the file to write")
    ap.add_argument("--docs", default="bench/out/rag/docs")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--words", type=int, default=240)
    ap.add_argument("--url")
    ap.add_argument("--order", default="cached")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--label", default="run")
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--system", default="You answer questions about the documents below. Quote the document id.")
    ap.add_argument("--kvtier", default="./build/kvtier", help="llama: the kvtier binary that builds the prompts")
    ap.add_argument("--index", help="llama: the RAG index")
    ap.add_argument("--model", help="llama: the model (its tokenizer and chat template)")
    ap.add_argument("--no-cache-prompt", action="store_true", help="llama: send cache_prompt: false")
    args = ap.parse_args()
    {"corpus": corpus, "run": run, "llama": llama, "log": log, "bound": bound}[args.what](args)


if __name__ == "__main__":
    main()
