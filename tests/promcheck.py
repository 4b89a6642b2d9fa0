#!/usr/bin/env python3
"""Strict checker for the Prometheus text exposition format (0.0.4), for
kvtier's /metrics. promtool (Debian's `prometheus` package, ~19 MB download,
96 MB installed, with the Prometheus server and its web assets, started as a
service on install) is too heavy to install for one check, so this does what
`promtool check metrics` does for our output, and a little more:

 - every line is a comment (# HELP / # TYPE), or a sample `name{labels} value`;
 - names and label names are valid; label values escape only \\\\, \\" and \\n;
   values are floats (or +Inf, -Inf, NaN);
 - each family has one HELP and one TYPE, before its samples, and its samples
   are contiguous (no family appears twice); no duplicate series;
 - counters end in _total and are >= 0 (promtool's lint); gauges named *_info
   are 1; no camelCase; a name with a unit uses base units (seconds, bytes)
   and has it last, before only _total (kvtier_tier_used_bytes, not
   kvtier_tier_bytes_used; process_cpu_seconds_total);
 - histograms: _bucket series with le, strictly increasing bounds per label
   set, cumulative non-decreasing counts, a +Inf bucket equal to _count, and
   _sum; summaries: _sum and _count;
 - the text ends with a newline.
usage: promcheck.py FILE   (prints each problem; exit 1 if any, 0 if clean)"""
import math
import re
import sys

NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*$')
LABEL = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*$')
TYPES = {'counter', 'gauge', 'histogram', 'summary', 'untyped'}
BAD_UNITS = ('_milliseconds', '_microseconds', '_nanoseconds', '_minutes', '_hours', '_kilobytes', '_megabytes',
             '_gigabytes', '_kib', '_mib', '_gib', '_ms')
BASE_UNITS = ('_bytes', '_seconds')


def parse_value(s):
    if s in ('+Inf', 'Inf'):
        return math.inf
    if s == '-Inf':
        return -math.inf
    if s == 'NaN':
        return math.nan
    if not re.fullmatch(r'[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?', s):
        raise ValueError(s)
    return float(s)


def parse_labels(s, problems, where):
    """s is the text inside {...}; returns a list of (name, value)."""
    out, i = [], 0
    while i < len(s):
        m = re.match(r'([^=]*)="', s[i:])
        if not m:
            problems.append(f'{where}: malformed labels {{{s}}}')
            return out
        name = m.group(1)
        if not LABEL.match(name) or name.startswith('__'):
            problems.append(f'{where}: bad label name {name!r}')
        i += m.end()
        val = []
        while True:
            if i >= len(s):
                problems.append(f'{where}: unterminated label value')
                return out
            c = s[i]
            if c == '\\':
                if i + 1 >= len(s) or s[i + 1] not in '\\"n':
                    problems.append(f'{where}: bad escape in label {name}')
                val.append(s[i:i + 2])
                i += 2
                continue
            if c == '"':
                i += 1
                break
            if c == '\n':
                problems.append(f'{where}: raw newline in label {name}')
            val.append(c)
            i += 1
        out.append((name, ''.join(val)))
        if i < len(s):
            if s[i] != ',':
                problems.append(f'{where}: expected , after label {name}')
                return out
            i += 1
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        problems.append(f'{where}: repeated label name')
    return out


def family_of(name, types):
    for suffix in ('_bucket', '_sum', '_count'):
        base = name[:-len(suffix)] if name.endswith(suffix) else None
        if base and types.get(base) in ('histogram', 'summary'):
            return base
    return name


def check(text):
    problems = []
    if not text.endswith('\n'):
        problems.append('does not end with a newline')
    helps, types, seen_series = {}, {}, set()
    finished, current = set(), None
    samples = {}  # family -> list of (name, labels dict, value, line)
    for n, line in enumerate(text.split('\n')[:-1] if text.endswith('\n') else text.split('\n'), 1):
        where = f'line {n}'
        if not line:
            problems.append(f'{where}: empty line')
            continue
        if line.startswith('#'):
            m = re.match(r'# (HELP|TYPE) (\S+) ?(.*)$', line)
            if not m:
                continue  # a plain comment
            kind, name, rest = m.groups()
            if not NAME.match(name):
                problems.append(f'{where}: bad metric name {name!r}')
            if name in finished or (name in samples and current != name):
                problems.append(f'{where}: {kind} for {name} after its samples')
            table = helps if kind == 'HELP' else types
            if name in table:
                problems.append(f'{where}: second {kind} for {name}')
            if kind == 'TYPE' and rest not in TYPES:
                problems.append(f'{where}: unknown type {rest!r}')
            if kind == 'HELP' and not rest.strip():
                problems.append(f'{where}: empty HELP for {name}')
            table[name] = rest
            if current is not None and current != name:
                finished.add(current)
            current = name
            continue
        m = re.match(r'([^\s{]+)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$', line)
        if not m:
            problems.append(f'{where}: not a sample: {line!r}')
            continue
        name, _, lab, val, _ts = m.groups()
        if not NAME.match(name):
            problems.append(f'{where}: bad metric name {name!r}')
        labels = parse_labels(lab or '', problems, where)
        try:
            value = parse_value(val)
        except ValueError:
            problems.append(f'{where}: bad value {val!r}')
            continue
        fam = family_of(name, types)
        if fam not in types:
            problems.append(f'{where}: {name} has no TYPE')
        if fam not in helps:
            problems.append(f'{where}: {name} has no HELP')
        if fam in finished:
            problems.append(f'{where}: samples of {fam} are not contiguous')
        if current is not None and current != fam:
            finished.add(current)
        current = fam
        key = (name, tuple(sorted(labels)))
        if key in seen_series:
            problems.append(f'{where}: duplicate series {name}{{{lab}}}')
        seen_series.add(key)
        samples.setdefault(fam, []).append((name, dict(labels), value, where))
    for fam, t in types.items():
        if re.search(r'[a-z][A-Z]', fam):
            problems.append(f'{fam}: camelCase name')
        if any(fam.endswith(u) or (u + '_') in fam for u in BAD_UNITS):
            problems.append(f'{fam}: use base units (seconds, bytes)')
        stem = fam[:-len('_total')] if fam.endswith('_total') else fam
        if any(u + '_' in stem for u in BASE_UNITS):
            problems.append(f'{fam}: the unit goes last (only _total after it)')
        rows = samples.get(fam, [])
        if t == 'counter':
            if not fam.endswith('_total'):
                problems.append(f'{fam}: counter names should end in _total')
            for name, _, v, where in rows:
                if not v >= 0:
                    problems.append(f'{where}: counter {name} is {v}')
        elif fam.endswith('_total'):
            problems.append(f'{fam}: a {t} should not end in _total')
        if t == 'gauge' and fam.endswith('_info'):
            for name, _, v, where in rows:
                if v != 1:
                    problems.append(f'{where}: info metric {name} is {v}, not 1')
        if t == 'histogram':
            check_histogram(fam, rows, problems)
        if t == 'summary':
            names = {r[0] for r in rows}
            if rows and not {fam + '_sum', fam + '_count'} <= names:
                problems.append(f'{fam}: summary without _sum or _count')
    return problems


def check_histogram(fam, rows, problems):
    groups = {}
    for name, labels, v, where in rows:
        rest = tuple(sorted((k, x) for k, x in labels.items() if k != 'le'))
        g = groups.setdefault(rest, {'buckets': [], 'sum': None, 'count': None})
        if name == fam + '_bucket':
            if 'le' not in labels:
                problems.append(f'{where}: bucket without le')
                continue
            try:
                g['buckets'].append((parse_value(labels['le']), v, where))
            except ValueError:
                problems.append(f'{where}: bad le {labels["le"]!r}')
        elif name == fam + '_sum':
            g['sum'] = v
        elif name == fam + '_count':
            g['count'] = v
        else:
            problems.append(f'{where}: {name} in histogram {fam}')
    for rest, g in groups.items():
        tag = f'{fam}{dict(rest) if rest else ""}'
        b = g['buckets']
        if not b or b[-1][0] != math.inf:
            problems.append(f'{tag}: no +Inf bucket last')
        for (le0, c0, _), (le1, c1, where) in zip(b, b[1:]):
            if not le1 > le0:
                problems.append(f'{where}: bucket bounds not increasing ({le0} then {le1})')
            if c1 < c0:
                problems.append(f'{where}: buckets not cumulative ({c0} then {c1})')
        if g['count'] is None or g['sum'] is None:
            problems.append(f'{tag}: histogram without _sum or _count')
        elif b and b[-1][1] != g['count']:
            problems.append(f'{tag}: +Inf bucket {b[-1][1]} != _count {g["count"]}')


if __name__ == '__main__':
    with open(sys.argv[1], encoding='utf-8') as f:
        found = check(f.read())
    for p in found:
        print('promcheck:', p)
    sys.exit(1 if found else 0)
