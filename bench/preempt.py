#!/usr/bin/env python3
"""Replies under KV memory pressure: N concurrent clients against `kvtier serve`
with a T0 pool (--kv-active) too small for the replies at once, so replies
pause (are preempted) and resume from their cached blocks, against the same
server with a pool that holds them all. Alternated pairs (tight, ample, ...);
prints per run the HTTP codes, pauses, tokens put back, wall seconds and
output tok/s, whether every reply equals the same request run alone, and the
medians. Loopback only; prints numbers, never pass/fail.

usage: bench/preempt.py --bin build/kvtier --model M.gguf [--clients 8]
       [--parallel 4] [--tokens 150] [--tight 200K] [--ample 4M] [--pairs 3] [--fit-parallel 2]
"""
import argparse, json, os, random, statistics, subprocess, sys, threading, time, urllib.error, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument('--bin', default='build/kvtier')
ap.add_argument('--model', required=True)
ap.add_argument('--clients', type=int, default=8)
ap.add_argument('--parallel', type=int, default=4)
ap.add_argument('--tokens', type=int, default=150)
ap.add_argument('--tight', default='200K')
ap.add_argument('--ample', default='4M')
ap.add_argument('--ram', default='16M')
ap.add_argument('--pairs', type=int, default=3)
ap.add_argument('--threads', default='2')
ap.add_argument('--fit-parallel', type=int, default=0,
                help='also run the ample pool with this many slots: what a server sized to the tight pool does')
a = ap.parse_args()

WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau'.split()
PROMPTS = [' '.join(random.Random(i).choice(WORDS) for _ in range(40)) for i in range(a.clients)]


def body(i):
    return {'prompt': PROMPTS[i], 'max_tokens': a.tokens, 'temperature': 0, 'ignore_eos': True, 'logprobs': 1}


def start(kv, parallel=None):
    log = open('/tmp/kvtier-preempt-bench.log', 'w')
    p = subprocess.Popen([a.bin, 'serve', '-m', a.model, '--host', '127.0.0.1', '--port', '0', '-t', a.threads,
                          '--parallel', str(parallel or a.parallel), '--kv-active', kv, '--kv-ram', a.ram],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):
        with open('/tmp/kvtier-preempt-bench.log') as f:
            for line in f:
                if 'listening on http://' in line:
                    return p, line.split('listening on ')[1].split()[0]
        if p.poll() is not None:
            sys.exit('the server did not start: see /tmp/kvtier-preempt-bench.log')
        time.sleep(0.1)
    sys.exit('the server did not start in 120 s')


def post(url, b):
    req = urllib.request.Request(url + '/v1/completions', json.dumps(b).encode(), {'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None


def run(kv, solo, parallel=None):
    p, url = start(kv, parallel)
    res = [None] * a.clients
    t0 = time.time()
    th = [threading.Thread(target=lambda i=i: res.__setitem__(i, post(url, body(i)))) for i in range(a.clients)]
    [t.start() for t in th]
    [t.join() for t in th]
    wall = time.time() - t0
    ok = [r for r in res if r[0] == 200]
    out_tokens = sum(r[1]['usage']['completion_tokens'] for r in ok)
    paused = sum(1 for r in ok if r[1].get('kvtier', {}).get('preempted'))
    put_back = sum(r[1]['kvtier']['preempted']['restored_tokens'] for r in ok if r[1].get('kvtier', {}).get('preempted'))
    recomputed = sum(r[1]['kvtier']['preempted']['recomputed_tokens'] for r in ok if r[1].get('kvtier', {}).get('preempted'))
    same = None
    if solo is not None:
        same = sum(1 for i, r in enumerate(res) if r[0] == 200 and solo[i] is not None and
                   r[1]['choices'][0]['text'] == solo[i]['choices'][0]['text'] and
                   r[1]['choices'][0]['logprobs'] == solo[i]['choices'][0]['logprobs'])
    p.terminate()
    p.wait()
    codes = {}
    for r in res:
        codes[r[0]] = codes.get(r[0], 0) + 1
    print(f'  --parallel {parallel or a.parallel} --kv-active {kv:>6}: codes {codes}, paused {paused}, restored {put_back} recomputed {recomputed}, '
          f'{wall:.2f} s, {out_tokens / wall:.1f} out tok/s' + ('' if same is None else f', {same}/{len(ok)} equal alone'),
          flush=True)
    return wall, out_tokens / wall


# the replies each request gets alone (a server of its own, one client at a time)
p, url = start(a.ample)
solo = [post(url, body(i))[1] for i in range(a.clients)]
p.terminate()
p.wait()
print(f'# {a.clients} clients, --parallel {a.parallel}, {a.tokens} tokens each, load {os.getloadavg()[0]:.1f}')
tight, ample, fit = [], [], []
for _ in range(a.pairs):
    tight.append(run(a.tight, solo))
    ample.append(run(a.ample, None))
    if a.fit_parallel:
        fit.append(run(a.ample, None, a.fit_parallel))
mt, ma = statistics.median(w for w, _ in tight), statistics.median(w for w, _ in ample)
ratios = [t[0] / m[0] for t, m in zip(tight, ample)]
print(f'median wall: tight {mt:.2f} s, ample {ma:.2f} s; median pair ratio tight/ample {statistics.median(ratios):.2f} '
      f'(load {os.getloadavg()[0]:.1f})')
if fit:
    print(f'median wall with --parallel {a.fit_parallel} and the ample pool: {statistics.median(w for w, _ in fit):.2f} s; '
          f'median ratio tight/that {statistics.median(t[0] / f[0] for t, f in zip(tight, fit)):.2f}')
