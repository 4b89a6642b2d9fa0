#!/usr/bin/env python3
"""Soak of the expansion workload: agent sessions against a server with a tight KV memory
(server A: small --kv-active, small --kv-ram, a --kv-disk directory; restarted with SIGTERM
once and killed with SIGKILL once mid-soak) and the same requests against a server whose T0
holds everything (server B, never restarted). Each request goes to both; every reply on A must
equal B's (text, tool calls, logprobs, finish_reason, prompt tokens).

Sessions: a system prompt, tools, a document, then per round a tool result; the assistant's
replies (and tool calls, answered by role "tool" messages) are spliced back. Passes repeat with
other sizes until --duration-s: 12-24 sessions x 4-6 rounds, 4-16 client threads, greedy and
seeded sampling, some streamed, some with tool_choice "required".

Prints per pass and at the end: requests, mismatches, HTTP codes, prompt tokens computed on A
and B from round 1 on, cached tokens by tier, pauses (kvtier_preemptions_total), restarts, T0
pages leaked when idle; then runs `kvtier cache verify` on A's directory and lists log lines
at warn/error. Exit status 1 when any check failed. Loopback only; standard library only.

usage: bench/soak_expansion.py --bin build/kvtier --model M.gguf --dir SCRATCH [--duration-s 2400]
       [--scale F]   (smaller prompts and passes, for a slow device: --scale 0.25 on lavapipe)
"""
import argparse, http.client, json, os, random, re, signal, subprocess, sys, threading, time

ap = argparse.ArgumentParser()
ap.add_argument('--bin', default='build/kvtier')
ap.add_argument('--model', required=True)
ap.add_argument('--dir', required=True, help='scratch folder: logs, the T2 directory, the results')
ap.add_argument('--duration-s', type=float, default=2400)
ap.add_argument('--threads', default='1')
ap.add_argument('--a-args', default='--parallel 6 --kv-active 12M --kv-ram 8M --kv-disk-size 1G --ctx 4096')
ap.add_argument('--b-args', default='--parallel 4 --kv-active 1G --ctx 4096')
ap.add_argument('--seed', type=int, default=7)
ap.add_argument('--scale', type=float, default=1.0,
                help='multiplies the words of every message and the sessions per pass (at least 2), for slow '
                     'devices such as lavapipe; 1 = the full workload')
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
T2 = os.path.join(a.dir, 't2')
WORDS = ('the cache keeps attention state for tokens it has seen so later requests reuse it while tiers hold '
         'blocks of keys and values from fast to slow agents call tools read documents write answers').split()
TOOLS = [{'type': 'function', 'function': {'name': 'search', 'description': 'search the notes',
                                           'parameters': {'type': 'object', 'properties': {'q': {'type': 'string'}},
                                                          'required': ['q']}}},
         {'type': 'function', 'function': {'name': 'open', 'description': 'open a file by line',
                                           'parameters': {'type': 'object',
                                                          'properties': {'path': {'type': 'string'},
                                                                         'line': {'type': 'integer'}},
                                                          'required': ['path']}}}]
# the name the servers give the model: the file's name without .gguf, as /v1/models lists it
MODEL_ID = re.sub(r'\.gguf$', '', os.path.basename(a.model))
lock = threading.Lock()
log_lock = threading.Lock()
tally = {'requests': 0, 'mismatch': 0, 'codes_a': {}, 'codes_b': {}, 'retries_a': 0, 'failed': 0,
         'computed_a': 0, 'computed_b': 0, 'prompt': 0, 'tiers_a': {}, 'tiers_b': {}, 'leak_checks': 0,
         'leaks': 0, 'restarts': [], 'preempt': 0, 'streams': 0, 'sampled': 0, 'tool_calls': 0, 'reply_map_lost': 0, 'unpinned': 0, 'both_refused': 0}
errors = []


def note(msg):
    with log_lock:
        print(time.strftime('%H:%M:%S'), msg, flush=True)


class Server:
    def __init__(self, name, args):
        self.name, self.args, self.proc, self.url, self.up = name, args, None, None, threading.Event()
        self.gen = 0

    def start(self):
        self.gen += 1
        logf = os.path.join(a.dir, f'{self.name}.{self.gen}.log')
        self.log = logf
        cmd = [a.bin, 'serve', '-m', a.model, '--host', '127.0.0.1', '--port', '0', '-t', a.threads] + self.args
        self.proc = subprocess.Popen(cmd, stdout=open(logf, 'w'), stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            with open(logf) as f:
                m = re.search(r'listening on http://([0-9.]+):(\d+)', f.read())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                self.up.set()
                return
            if self.proc.poll() is not None:
                sys.exit(f'{self.name} did not start: see {logf}')
            time.sleep(0.05)
        sys.exit(f'{self.name} did not start in 120 s')

    def stop(self, sig):
        self.up.clear()
        self.proc.send_signal(sig)
        return self.proc.wait()


def request(srv, method, path, body=None, timeout=900):
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=timeout)
    conn.request(method, path, json.dumps(body) if body is not None else None, {'Content-Type': 'application/json'})
    resp = conn.getresponse()
    return resp, conn


def prompt_ids(srv, body):
    """The prompt ids srv renders for body now (earlier replies spliced from its reply map), or None."""
    try:
        resp, conn = request(srv, 'POST', '/apply-template', body)
        ids = json.loads(resp.read()).get('tokens') if resp.status == 200 else None
        conn.close()
        return ids
    except (OSError, ValueError):
        return None


def chat(srv, body):
    """(status, result): result = {content, tool_calls, logprobs, finish, usage, kvtier} or the error text."""
    resp, conn = request(srv, 'POST', '/v1/chat/completions', body)
    try:
        if resp.status != 200:
            return resp.status, resp.read()[:400].decode(errors='replace')
        if not body.get('stream'):
            o = json.loads(resp.read())
            ch = o['choices'][0]
            return 200, {'content': ch['message'].get('content'), 'tool_calls': ch['message'].get('tool_calls'),
                         'logprobs': (ch.get('logprobs') or {}).get('content'), 'finish': ch['finish_reason'],
                         'usage': o['usage'], 'kvtier': o.get('kvtier')}
        content, lps, calls, finish, usage, kv, done = [], [], {}, None, None, None, False
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b'data:'):
                continue
            data = line[5:].strip()
            if data == b'[DONE]':
                done = True
                continue
            o = json.loads(data)
            if o.get('error'):
                # a reply that fails after its 200 went out ends with an error event (then [DONE])
                return 'stream error', json.dumps(o['error'])[:400]
            for ch in o.get('choices', []):
                d = ch.get('delta', {})
                if d.get('content'):
                    content.append(d['content'])
                for tc in d.get('tool_calls') or []:
                    c = calls.setdefault(tc['index'], {'id': None, 'name': '', 'arguments': ''})
                    c['id'] = tc.get('id') or c['id']
                    fn = tc.get('function') or {}
                    c['name'] += fn.get('name') or ''
                    c['arguments'] += fn.get('arguments') or ''
                lps.extend((ch.get('logprobs') or {}).get('content') or [])
                finish = ch.get('finish_reason') or finish
            usage = o.get('usage') or usage
            kv = o.get('kvtier') or kv
        if not done:
            raise ConnectionError('stream ended without [DONE]')
        tcs = [{'id': c['id'], 'type': 'function', 'function': {'name': c['name'], 'arguments': c['arguments']}}
               for _, c in sorted(calls.items())] or None
        return 200, {'content': ''.join(content), 'tool_calls': tcs, 'logprobs': lps, 'finish': finish,
                     'usage': usage, 'kvtier': kv}
    finally:
        conn.close()


def chat_retry(srv, body, label):
    """A's requests are retried while A is down or answers a 503 (a drain, a restart); B's never are."""
    for attempt in range(600):
        if not srv.up.wait(180):
            return 0, f'{srv.name} not up for 180 s'
        try:
            code, res = chat(srv, body)
        except (ConnectionError, OSError, http.client.HTTPException, json.JSONDecodeError) as e:
            code, res = -1, repr(e)
        with lock:
            d = tally['codes_a' if srv.name == 'A' else 'codes_b']
            d[code] = d.get(code, 0) + 1
        if code == 200 or srv.name == 'B' or code not in (-1, 503):
            return code, res
        with lock:
            tally['retries_a'] += 1
        if code == 503 and srv.up.is_set() and 'draining' not in str(res) and 'stopping' not in str(res):
            note(f'{label}: A answered 503 while up: {res}')
        time.sleep(0.2)
    return code, res


def strip_ids(calls):
    return [{'name': c['function']['name'], 'arguments': c['function']['arguments']} for c in calls or []]


def words(rng, n):
    return ' '.join(rng.choice(WORDS) for _ in range(max(1, round(n * a.scale))))


def run_session(A, B, pas, s, cfg, rng):
    sid = f'p{pas}-s{s}'
    msgs = [{'role': 'system', 'content': 'You are an agent that uses tools. ' + words(rng, cfg['system_words'])},
            {'role': 'user', 'content': f'Document {sid}: ' + words(rng, cfg['doc_words']) + '\nTask: go.'}]
    sampled, stream = rng.random() < 0.4, rng.random() < 0.35
    a_gen = A.gen  # which run of A the session started on
    for r in range(cfg['rounds']):
        if r > 0:
            msgs.append({'role': 'user', 'content': f'Round {r}: ' + words(rng, rng.randint(10, 40))})
        required = rng.random() < 0.3
        body = {'model': MODEL_ID, 'messages': msgs, 'max_tokens': 48 if required else rng.randint(8, 32),
                'logprobs': True, 'top_logprobs': 2, 'tools': TOOLS,
                'tool_choice': 'required' if required else 'auto',
                'kvtier': {'session_id': sid, 'keep_warm_s': rng.choice([1, 5, 20])}}
        if sampled:
            body.update(temperature=0.9, top_p=0.95, seed=1000 * pas + 10 * s + r)
        else:
            body['temperature'] = 0
        if stream:
            body.update(stream=True, stream_options={'include_usage': True})
        label = f'{sid} round {r}'
        pre = {'A': prompt_ids(A, body), 'B': prompt_ids(B, body)}  # before either runs it
        out = {}
        tb = threading.Thread(target=lambda: out.__setitem__('B', chat_retry(B, body, label)))
        tb.start()
        out['A'] = chat_retry(A, body, label)
        tb.join()
        (ca, ra), (cb, rb) = out['A'], out['B']
        with lock:
            tally['requests'] += 1
            tally['streams'] += bool(stream)
            tally['sampled'] += bool(sampled)
        if ca == cb == 400 and ra == rb:
            # the context grew past --ctx: both refuse it alike, naming the limit (the session ends here)
            with lock:
                tally['both_refused'] += 1
            break
        if ca != 200 or cb != 200:
            with lock:
                tally['failed'] += 1
                errors.append(f'{label}: A {ca} {str(ra)[:200]} / B {cb} {str(rb)[:200]}')
            note(f'FAIL {label}: A {ca} {str(ra)[:200]} / B {cb} {str(rb)[:200]}')
            break
        diff = [k for k in ('content', 'finish', 'logprobs') if ra[k] != rb[k]]
        if strip_ids(ra['tool_calls']) != strip_ids(rb['tool_calls']):
            diff.append('tool_calls')
        if ra['usage']['prompt_tokens'] != rb['usage']['prompt_tokens']:
            diff.append('prompt_tokens')
        rer = lambda res: ((res.get('kvtier') or {}).get('rerendered_turn') or {}).get('reason')
        if (rer(ra) == 'unknown_reply' and rer(rb) != 'unknown_reply') or ('prompt_tokens' in diff and A.gen != a_gen):
            # A restarted during this session and lost its reply map (its journal in the T2 directory was
            # missing, damaged or not written): it renders the earlier replies from their text
            # (rerendered_turn names only the first such turn), so this session's prompts on A and B
            # differ from here on.
            with lock:
                tally['reply_map_lost'] += 1
            note(f'{label}: A lost its reply map in a restart ({diff or "same reply"}); session ends here')
            break
        cached = lambda res: (res['usage'].get('prompt_tokens_details') or {}).get('cached_tokens') or 0
        with lock:
            if r > 0:
                tally['computed_a'] += ra['usage']['prompt_tokens'] - cached(ra)
                tally['computed_b'] += rb['usage']['prompt_tokens'] - cached(rb)
                tally['prompt'] += ra['usage']['prompt_tokens']
            for key, res in (('tiers_a', ra), ('tiers_b', rb)):
                for t, n in ((res.get('kvtier') or {}).get('cached_tokens_by_tier') or {}).items():
                    tally[key][t] = tally[key].get(t, 0) + n
            if diff:
                tally['mismatch'] += 1
                errors.append(f'{label}: differs in {diff}')
        if diff:
            # the prompt ids each server renders for this body now (earlier replies spliced from its reply
            # map): where they differ, the two servers did not compute the same prompt
            ta, tb = prompt_ids(A, body), prompt_ids(B, body)
            same = lambda x, y: 'equal' if x is not None and x == y else 'differ'
            note(f'MISMATCH {label} ({"stream" if stream else "plain"}, {"sampled" if sampled else "greedy"}): {diff}; '
                 f'prompt ids before the request {same(pre["A"], pre["B"])}, after {same(ta, tb)}')
            with open(os.path.join(a.dir, 'mismatch.jsonl'), 'a') as f:
                f.write(json.dumps({'label': label, 'diff': diff, 'body': body, 'A': ra, 'B': rb, 'ids_a': ta,
                                    'ids_b': tb, 'pre_ids_a': pre['A'], 'pre_ids_b': pre['B']}) + '\n')
        if ra['tool_calls']:
            with lock:
                tally['tool_calls'] += 1
            msgs.append({'role': 'assistant', 'content': ra['content'] or None, 'tool_calls': ra['tool_calls']})
            for c in ra['tool_calls']:
                msgs.append({'role': 'tool', 'tool_call_id': c['id'], 'content': 'result: ' + words(rng, 20)})
        else:
            msgs.append({'role': 'assistant', 'content': ra['content']})
    end_session(A, sid)
    end_session(B, sid)


def end_session(srv, sid):
    """Releases the session's warm pin, as an agent that is done would (404 once it expired or was given up)."""
    if not srv.up.wait(180):
        return
    try:
        resp, conn = request(srv, 'POST', '/v1/cache/unpin', {'session_id': sid}, timeout=60)
        resp.read()
        conn.close()
        if resp.status == 200:
            with lock:
                tally['unpinned'] += 1
    except OSError:
        pass


def stats(srv):
    resp, conn = request(srv, 'GET', '/v1/cache/stats', timeout=60)
    o = json.loads(resp.read())
    conn.close()
    return o


def preemptions(srv):
    resp, conn = request(srv, 'GET', '/metrics', timeout=60)
    text = resp.read().decode()
    conn.close()
    m = re.search(r'^kvtier_preemptions_total (\d+)', text, re.M)
    return int(m.group(1)) if m else 0


def check_idle(srv):
    """Once no session is warm, every T0 page is free or idle (none leaked)."""
    deadline = time.time() + 90
    while time.time() < deadline:
        o = stats(srv)
        if o['warm_sessions'] == 0 and not o['pins']:
            break
        time.sleep(0.5)
    t0 = o['T0']
    ok = t0['pages_free'] + t0['pages_idle'] == t0['pages_total']
    with lock:
        tally['leak_checks'] += 1
        if not ok:
            tally['leaks'] += 1
            errors.append(f'{srv.name} leaked T0 pages when idle: {t0}, warm {o["warm_sessions"]}')
    note(f'{srv.name} idle: T0 {t0}, T1 blocks {o["T1"]["blocks"]}, T2 records {o["T2"].get("records")}, '
         f'discarded {o["discarded_blocks"]}, shortfalls {o["shortfalls"]}, dropped {o["T2"].get("writes_dropped")}'
         + ('' if ok else '  LEAK'))


def chaos(A, t_start):
    """SIGTERM A at 35% of the soak and start it again; SIGKILL it at 65% and start it again."""
    for frac, sig in ((0.35, signal.SIGTERM), (0.65, signal.SIGKILL)):
        while time.time() < t_start + frac * a.duration_s:
            time.sleep(1)
        try:
            p = preemptions(A)
        except OSError:
            p = 0
        with lock:
            tally['preempt'] += p
        rc = A.stop(sig)
        note(f'A stopped with {signal.Signals(sig).name}: exit status {rc}, {p} preemptions counted')
        A.start()
        with lock:
            tally['restarts'].append((signal.Signals(sig).name, rc))
        note(f'A started again on {T2}')


def main():
    A = Server('A', a.a_args.split() + ['--kv-disk', T2])
    B = Server('B', a.b_args.split())
    A.start()
    B.start()
    t_start = time.time()
    threading.Thread(target=chaos, args=(A, t_start), daemon=True).start()
    rng = random.Random(a.seed)
    pas = 0
    while time.time() < t_start + a.duration_s:
        cfg = {'sessions': max(2, round(rng.randint(12, 24) * a.scale)), 'rounds': rng.randint(4, 6), 'clients': rng.choice([4, 8, 12, 16]),
               'system_words': rng.randint(60, 120), 'doc_words': rng.randint(80, 200)}
        note(f'pass {pas}: {cfg}')
        before = tally['requests']
        ids = list(range(cfg['sessions']))
        rngs = [random.Random(a.seed * 1000003 + pas * 1009 + s) for s in ids]
        th = [threading.Thread(target=lambda c=c: [run_session(A, B, pas, s, cfg, rngs[s])
                                                   for s in ids[c::cfg['clients']]])
              for c in range(cfg['clients'])]
        [t.start() for t in th]
        [t.join() for t in th]
        note(f'pass {pas} done: {tally["requests"] - before} requests; totals {summary()}')
        if A.up.is_set():
            check_idle(A)
        check_idle(B)
        pas += 1
    A.up.wait(180)
    with lock:
        tally['preempt'] += preemptions(A)
    rc = A.stop(signal.SIGTERM)
    B.stop(signal.SIGTERM)
    note(f'A stopped (exit {rc}); B stopped')
    v = subprocess.run([a.bin, 'cache', 'verify', '--kv-disk', T2], capture_output=True, text=True)
    note(f'cache verify exit {v.returncode}: {(v.stdout + v.stderr).strip()[-600:]}')
    if v.returncode != 0:
        errors.append('cache verify failed')
    bad = []
    for f in sorted(os.listdir(a.dir)):
        if f.endswith('.log'):
            for line in open(os.path.join(a.dir, f), errors='replace'):
                if re.search(r'kvtier: (warn|error)', line):
                    bad.append(f'{f}: {line.strip()}')
    note(f'{len(bad)} warn/error log lines' + ''.join('\n  ' + b for b in bad[:40]))
    note(f'final: {summary()}')
    for e in errors[:40]:
        note('ERROR ' + e)
    return 1 if errors else 0


def summary():
    with lock:
        t = dict(tally)
    ratio = t['computed_a'] / max(t['computed_b'], 1)
    return (f"requests {t['requests']} (streams {t['streams']}, sampled {t['sampled']}, with tool calls "
            f"{t['tool_calls']}), sessions cut by a lost reply map {t['reply_map_lost']}, unpinned {t['unpinned']}, mismatches {t['mismatch']}, failed {t['failed']}, refused alike by both (past --ctx) {t['both_refused']}, codes A {t['codes_a']} B "
            f"{t['codes_b']}, A retries {t['retries_a']}; rounds 1+: prompt {t['prompt']}, computed A "
            f"{t['computed_a']} B {t['computed_b']} = {ratio:.3f}x; cached by tier A {t['tiers_a']} B "
            f"{t['tiers_b']}; preemptions {t['preempt']} (before restarts/end); restarts {t['restarts']}; "
            f"leak checks {t['leak_checks']}, leaks {t['leaks']}")


if __name__ == '__main__':
    sys.exit(main())
