#!/usr/bin/env bash
# The documentation's links, checked on every run so a moved or renamed page or heading cannot
# leave a dead link behind: every relative Markdown link and #anchor in README.md,
# CONTRIBUTING.md, RELIABILITY.md, bench/RESULTS.md and docs/*.md must name a file of the
# repository (never a path outside it, which a plain clone lacks) and, for a Markdown target, a
# heading it has (GitHub's anchors). The README, the front door, stays at most 300 lines.
set -u
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
command -v python3 >/dev/null || { echo "SKIP: needs python3 (scripts/setup.sh installs it)"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

# checker FILE...: prints one line per dead link and exits 1 if there is any
cat >"$TMP/links.py" <<'EOF'
import os, re, sys

root = os.path.realpath(sys.argv[1])
FENCE = re.compile(r'^\s*(```|~~~)')
LINK = re.compile(r'(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
IMAGE = re.compile(r'!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
REFDEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$')
HEADING = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$')

def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks, inline code removed."""
    fenced = False
    for n, line in enumerate(open(path, encoding='utf-8'), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line.rstrip('\n')

def slug(text):
    """GitHub's anchor for a heading: its text without markup, lower-cased, punctuation but
    '-' and '_' dropped, spaces as '-'."""
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # links and images: their text
    text = re.sub(r'<[^>]+>', '', text)                     # inline HTML
    text = text.replace('`', '').replace('*', '')
    text = text.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')

anchors_of = {}
def anchors(path):
    if path not in anchors_of:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else '%s-%d' % (s, k))
        for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', open(path, encoding='utf-8').read()):
            found.add(m.group(1))
        anchors_of[path] = found
    return anchors_of[path]

bad = 0
def dead(path, n, target, why):
    global bad
    bad += 1
    print('%s:%d: %s: %s' % (os.path.relpath(path, root), n, target, why))

for path in sys.argv[2:]:
    path = os.path.realpath(path)
    for n, line in prose_lines(path):
        code_free = re.sub(r'``.*?``|`[^`]*`', '', line)
        targets = [m.group(1) for m in LINK.finditer(code_free)] + [m.group(1) for m in IMAGE.finditer(code_free)]
        m = REFDEF.match(code_free)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', t):  # http:, https:, mailto: ...
                continue
            file_part, _, anchor = t.partition('#')
            target = path if not file_part else os.path.realpath(os.path.join(os.path.dirname(path), file_part))
            if target != root and not target.startswith(root + os.sep):
                dead(path, n, t, 'outside the repository (a clone does not have it)')
                continue
            if not os.path.exists(target):
                dead(path, n, t, 'no such file')
                continue
            if anchor and target.endswith('.md') and anchor not in anchors(target):
                dead(path, n, t, 'no heading with this anchor in %s' % os.path.relpath(target, root))
sys.exit(1 if bad else 0)
EOF

docs=("$SRC/README.md" "$SRC/CONTRIBUTING.md" "$SRC/RELIABILITY.md" "$SRC/bench/RESULTS.md")
for f in "${docs[@]}"; do check "$f exists" test -f "$f"; done
for f in "$SRC"/docs/*.md; do docs+=("$f"); done
check "docs/ has pages" gt "${#docs[@]}" 4

python3 "$TMP/links.py" "$SRC" "${docs[@]}" >"$TMP/links.out" 2>&1
check "every relative link and anchor resolves" is "$?" 0
cat "$TMP/links.out" >&2 # the dead links, one a line

lines=$(wc -l <"$SRC/README.md")
check "README.md is at most 300 lines (it has $lines)" lt "$lines" 301

# the checker itself can fail: a page with a dead file, a dead anchor and a path outside
# the repository must give three findings, and a good page none
mkdir -p "$TMP/repo/docs"
cat >"$TMP/repo/docs/good.md" <<'EOF'
# A page

## Several choices: n > 1

See [the other](bad.md#real-heading), [this one](#several-choices-n--1) and [ours](#a-page).

```sh
# not a heading, and [not a link](nowhere.md)
```
EOF
cat >"$TMP/repo/docs/bad.md" <<'EOF'
# Real heading

[gone](missing.md), [no anchor](good.md#no-such-heading), [outside](../../shared/DESIGN.md),
`[in code](nowhere.md)` and [fine](good.md#several-choices-n--1).
EOF
python3 "$TMP/links.py" "$TMP/repo" "$TMP/repo/docs/good.md" >"$TMP/good.out" 2>&1
check "the checker passes a good page" is "$?" 0
cat "$TMP/good.out" >&2
python3 "$TMP/links.py" "$TMP/repo" "$TMP/repo/docs/bad.md" >"$TMP/bad.out" 2>&1
check "the checker fails a page with dead links" is "$?" 1
check "the checker finds each of the three dead links" is "$(wc -l <"$TMP/bad.out")" 3

kvt_test_done test_doc_links
