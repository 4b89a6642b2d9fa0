#!/usr/bin/env python3
"""Compares `kvtier eval` with llama.cpp reference lines (the format of
../shared/reference/*.jsonl); used by test_eval.sh and test_eval_ref.sh.

usage: eval_compare.py BIN MODEL REF.jsonl TOL [--greedy-exact] [--min-top1 F]

For every reference prompt, eval tokenizes the text itself, so the token ids
must equal llama.cpp's exactly (BOS included or not by the model's rule). At
every prompt position the top-5 logits must be within TOL rank by rank and for
each token in both lists, and the id at a rank must match wherever the
reference's gaps to the candidates above and below exceed 2*TOL (the only
places where logits each within TOL cannot swap). --min-top1 also requires
that fraction of positions to agree on the top-1 id. The greedy continuation
must match token for token with --greedy-exact, else it is reported. Before
anything, the comparison is run on doctored references, which it must reject.
Exit status 0 when everything matches.

usage: eval_compare.py BIN --jobs FILE

Compares many models in this one process (a Python start is slow on some
machines, and test_eval_ref.sh compares thirty): FILE ("-" for stdin) has one
tab-separated line per model, "MODEL REF.jsonl TOL MIN_TOP1 GREEDY ORDER"
(GREEDY 1 for --greedy-exact; ORDER the KVT_Q8_ORDER to run eval with), read as
they come, so a writer can still be making the next model. Each MODEL is removed once
compared. Exit status 0 when every model matches and at least one was read."""
import json
import os
import subprocess
import sys


def compare_top5(got, ref, tol):
    """Returns the first problem found, or None. got/ref: per position, five
    [id, logit] pairs, highest first."""
    if len(got) != len(ref):
        return f"{len(got)} positions, reference has {len(ref)}"
    for p, (g, r) in enumerate(zip(got, ref)):
        if len(g) != len(r):
            return f"pos {p}: {len(g)} candidates, reference has {len(r)}"
        # the k-th largest logits: if every token is within tol, so is each rank
        for k, ((gi, gl), (ri, rl)) in enumerate(zip(g, r)):
            if abs(gl - rl) > tol:
                return f"pos {p} rank {k}: logit {gl} vs {rl} (id {gi} vs {ri}), |d| > {tol}"
        gmap = dict((i, l) for i, l in g)
        for ri, rl in r:
            if ri in gmap and abs(gmap[ri] - rl) > tol:
                return f"pos {p}: token {ri} logit {gmap[ri]} vs {rl}, |d| > {tol}"
        # the candidate below rank 4 is not in the file, so rank 4 is never fixed
        for k in range(len(r) - 1):
            above = r[k - 1][1] - r[k][1] if k > 0 else float("inf")
            below = r[k][1] - r[k + 1][1]
            if above > 2 * tol and below > 2 * tol and g[k][0] != r[k][0]:
                return (f"pos {p} rank {k}: id {g[k][0]} vs {r[k][0]} where the gaps "
                        f"({above:.3g}, {below:.3g}) exceed 2*tol")
    return None


def self_test():
    """The comparison must reject a doctored reference; otherwise it proves nothing."""
    r = [[[7, 3.0], [5, 2.0], [9, 1.0], [2, 0.5], [4, 0.1]]]
    tol = 1e-3
    assert compare_top5(r, r, tol) is None
    swapped = [[[5, 3.0], [7, 2.0], [9, 1.0], [2, 0.5], [4, 0.1]]]
    assert compare_top5(swapped, r, tol), "a swapped top-2 with a clear gap must fail"
    shifted = [[[7, 3.0 + 3 * tol], [5, 2.0], [9, 1.0], [2, 0.5], [4, 0.1]]]
    assert compare_top5(shifted, r, tol), "a logit off by 3*tol must fail"
    tie = [[[7, 3.0], [5, 2.0], [9, 2.0 - tol], [2, 0.5], [4, 0.1]]]
    tie_swapped = [[[7, 3.0], [9, 2.0 - tol], [5, 2.0], [2, 0.5], [4, 0.1]]]
    assert compare_top5(tie_swapped, tie, tol) is None, "a near-tie may swap"
    assert compare_top5(r * 2, r, tol), "a different number of positions must fail"


def compare_model(binary, model, ref_path, tol, greedy_exact, min_top1, env=None):
    """Compares `kvtier eval` of model with every line of ref_path; the number of prompts that failed."""
    bad = 0
    name = model.rsplit("/", 1)[-1]
    for line in open(ref_path):
        ref = json.loads(line)
        out = subprocess.run([binary, "eval", "-m", model, "-t", "2", "-n", str(len(ref["greedy"])), ref["prompt"]],
                             capture_output=True, text=True, env=env)
        what = f"{name} '{ref['prompt'][:30]}'"
        if out.returncode != 0:
            print(f"FAIL: {what}: eval exited {out.returncode}: {out.stderr.strip()[:200]}")
            bad += 1
            continue
        got = json.loads(out.stdout)
        problems = []
        if got["prompt_tokens"] != ref["prompt_tokens"]:
            problems.append(f"prompt tokens {got['prompt_tokens'][:8]}... vs {ref['prompt_tokens'][:8]}...")
        elif (p := compare_top5(got["prompt_logits_top5"], ref["prompt_logits_top5"], tol)):
            problems.append(p)
        pairs = list(zip(got["prompt_logits_top5"], ref["prompt_logits_top5"]))
        top1 = sum(g[0][0] == r[0][0] for g, r in pairs) / max(len(pairs), 1)
        if min_top1 is not None and top1 < min_top1:
            problems.append(f"top-1 agreement {top1:.1%} < {min_top1:.0%}")
        same = 0
        while same < min(len(got["greedy"]), len(ref["greedy"])) and got["greedy"][same] == ref["greedy"][same]:
            same += 1
        if greedy_exact and got["greedy"] != ref["greedy"]:
            problems.append(f"greedy differs after {same} tokens")
        dev = max((abs(gl - rl) for g, r in pairs for (_, gl), (_, rl) in zip(g, r)), default=0.0)
        if problems:
            print(f"FAIL: {what}: {'; '.join(problems)}", flush=True)
            bad += 1
        else:
            print(f"ok: {what}: {len(ref['prompt_tokens'])} tokens, max |d top-5 logit| {dev:.2e} (tol {tol:g}), "
                  f"top-1 agreement {top1:.1%}, greedy {same}/{len(ref['greedy'])} equal", flush=True)
    return bad


def run_jobs(binary, path):
    """The --jobs mode: one compare_model per line of path; 0 when all matched and there was one at least."""
    bad = n = 0
    with (sys.stdin if path == "-" else open(path)) as jobs:
        for line in jobs:
            if not line.strip():
                continue
            model, ref_path, tol, min_top1, greedy, order = line.rstrip("\n").split("\t")
            env = dict(os.environ, KVT_Q8_ORDER=order)
            bad += compare_model(binary, model, ref_path, float(tol), greedy == "1", float(min_top1), env)
            os.remove(model)
            n += 1
    if n == 0:
        print("FAIL: no model to compare was given")
    return 1 if bad or n == 0 else 0


def main(argv):
    self_test()
    if "--jobs" in argv:
        return run_jobs(argv[1], argv[argv.index("--jobs") + 1])
    args = [a for a in argv[1:] if not a.startswith("--")]
    greedy_exact = "--greedy-exact" in argv
    min_top1 = float(argv[argv.index("--min-top1") + 1]) if "--min-top1" in argv else None
    if min_top1 is not None:
        args.remove(argv[argv.index("--min-top1") + 1])
    binary, model, ref_path, tol = args[0], args[1], args[2], float(args[3])
    return 1 if compare_model(binary, model, ref_path, tol, greedy_exact, min_top1) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
