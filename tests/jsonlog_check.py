#!/usr/bin/env python3
"""Checks kvtier's JSON log lines (serve --log-format json): every line of every
file given is a JSON object that starts with ts (ISO-8601 UTC, ms), level and
msg, and carries its values as typed keys rather than only in the message:

- every number the message shows is a JSON number among the line's keys
  (within the rounding the message writes it with), so a log pipeline never
  parses prose for a figure;
- no key holds a number as a string, and no message embeds key=value pairs;
- a line that names a request id (req-..., or one of --ids) has it as
  request_id.

usage: jsonlog_check.py [--ids ID,ID] [--min N] FILE...
Prints one line per problem; exits 1 if there is any (or fewer than --min lines).
"""
import json
import re
import sys

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
KEY = re.compile(r"[a-z0-9_]+")
NUMBER = re.compile(r"(?<![\w.\-])-?\d+(?:\.\d+)?(?![\w.]*\w)")
# keys whose values are text even when all digits: hashes, hex ids, a client's request id
TEXT_KEY = re.compile(r"(_hex|_id|^tenant)$")
KV_PAIR = re.compile(r"\b[a-z_]+=\S")
# figures a message derives from its keys rather than carries: sessions of the context in the capacity line
DERIVED = re.compile(r"\d+\.\d sessions of")


def covered(text, nums):
    """Whether the number written as text is one of nums, as the message rounds it."""
    x = float(text)
    dec = len(text.split(".")[1]) if "." in text else 0
    tol = 0.5 * 10 ** -dec + 1e-9 * abs(x)
    return any(abs(v - x) <= tol for v in nums)


def check_line(d, ids):
    problems = []
    if not isinstance(d, dict) or list(d)[:3] != ["ts", "level", "msg"]:
        return ["does not start with ts, level, msg"]
    if not TS.fullmatch(str(d["ts"])):
        problems.append("bad ts %r" % d["ts"])
    if d["level"] not in ("error", "warn", "info", "debug"):
        problems.append("bad level %r" % d["level"])
    msg = d["msg"]
    if not isinstance(msg, str):
        return problems + ["msg is not a string"]
    fields = {k: v for k, v in d.items() if k not in ("ts", "level", "msg")}
    for k, v in fields.items():
        if not KEY.fullmatch(k):
            problems.append("key %r is not [a-z0-9_]" % k)
        if isinstance(v, str) and re.fullmatch(r"-?\d+(\.\d+)?", v) and not TEXT_KEY.search(k):
            problems.append("key %s holds the number %r as a string" % (k, v))
    if msg == "access":
        return problems
    if KV_PAIR.search(msg):
        problems.append("key=value in the message")
    nums = [float(v) for v in fields.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    text = DERIVED.sub(" ", msg)
    for s in sorted((v for v in fields.values() if isinstance(v, str) and v), key=len, reverse=True):
        text = text.replace(s, " ")
    for m in NUMBER.finditer(text):
        if not covered(m.group(0), nums):
            problems.append("the message's %s is no number key" % m.group(0))
    for rid in set(re.findall(r"\breq-[0-9a-f]+-[0-9a-f]+\b", msg)) | {i for i in ids if i and i in msg}:
        if fields.get("request_id") != rid:
            problems.append("names request %s without request_id" % rid)
    return problems


def main(argv):
    ids, least, files = [], 1, []
    it = iter(argv)
    for a in it:
        if a == "--ids":
            ids = next(it).split(",")
        elif a == "--min":
            least = int(next(it))
        else:
            files.append(a)
    bad = n = 0
    for path in files:
        for i, line in enumerate(open(path, encoding="utf-8"), 1):
            n += 1
            try:
                d = json.loads(line)
            except ValueError as e:
                print("%s:%d: not JSON (%s): %s" % (path, i, e, line.rstrip()[:200]))
                bad += 1
                continue
            for p in check_line(d, ids):
                print("%s:%d: %s: %s" % (path, i, p, line.rstrip()[:300]))
                bad += 1
    if n < least:
        print("only %d lines, want >= %d" % (n, least))
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
