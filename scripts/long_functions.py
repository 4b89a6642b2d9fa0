#!/usr/bin/env python3
"""Lists the C functions in src/ longer than a limit (default 80 lines, from
the line that opens the definition to its closing brace).

A function that is long for a reason says so in the comment just above it,
with "Long:" and the reason (a table, a switch over opcodes); those are
listed apart and do not count as findings.

usage: scripts/long_functions.py [--limit N] [--all] [DIR...]
Exits 1 when an unexplained long function is found, else 0."""
import argparse
import os
import re
import sys

# a definition opens at column 0 with a return type and a name, and its
# parameter list ends on the same or a later line with ") {"
DEF = re.compile(r'^(?!static_assert)[A-Za-z_][A-Za-z0-9_ \*]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\(')
REASON_LINES = 8  # how far above the definition the "Long:" comment may start


def functions(path):
    lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    i = 0
    while i < len(lines):
        m = DEF.match(lines[i])
        if not m or lines[i].rstrip().endswith(';') or lines[i].startswith(('typedef', 'struct', 'enum', 'union')):
            i += 1
            continue
        # find the line that ends the signature: "{" at its end, or ";" (a declaration)
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith('{') and not lines[j].rstrip().endswith(';'):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(';') or '=' in lines[i].split('(')[0]:
            i += 1
            continue
        k = j + 1
        while k < len(lines) and lines[k] != '}':
            k += 1
        above = '\n'.join(lines[max(0, i - REASON_LINES):i])
        yield m.group(1), i + 1, k - i + 1, 'Long:' in above
        i = k + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--limit', type=int, default=80, help='longest function allowed without a reason (lines)')
    ap.add_argument('--all', action='store_true', help='also list the long functions that give a reason')
    ap.add_argument('dirs', nargs='*', default=['src'], help='folders to scan (default: src)')
    a = ap.parse_args()
    found = 0
    for d in a.dirs:
        for root, _, files in sorted(os.walk(d)):
            for f in sorted(files):
                if not f.endswith('.c'):
                    continue
                p = os.path.join(root, f)
                for name, line, n, reason in functions(p):
                    if n <= a.limit:
                        continue
                    if reason and not a.all:
                        continue
                    print(f'{n:5d}  {p}:{line}  {name}' + ('  (reason given)' if reason else ''))
                    found += not reason
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
