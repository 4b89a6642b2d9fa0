// Checks kvtier's /dashboard page without a browser (Chromium is ~290 MB
// installed, too heavy for CI): runs the page's own inline script in Node
// against a minimal DOM built from the page's cells, feeding it a /metrics
// text, and checks that
//  - every cell the script refills shows what the server rendered (the page's
//    numbers are /metrics' numbers, formatted the same way on both sides);
//    cells of process_* series are skipped (they move between the fetches);
//  - the page says it is live, and after a second refresh with more prompt
//    tokens the reuse chart has one line per tier plus the total.
// usage: node dashboard_check.cjs PAGE.html METRICS.txt   (exit 1 on a mismatch)
'use strict';
const fs = require('fs');
const vm = require('vm');

const html = fs.readFileSync(process.argv[2], 'utf8');
const metrics = fs.readFileSync(process.argv[3], 'utf8');
const unq = (s) => s.replace(/&quot;/g, '"').replace(/&amp;/g, '&');
const cells = [];
const re = /<td data-m="([^"]*)"(?: data-d="([^"]*)")? data-f="([^"]*)">([^<]*)<\/td>/g;
for (let m; (m = re.exec(html));) {
  const dataset = { m: unq(m[1]), f: m[3] };
  if (m[2]) dataset.d = unq(m[2]);
  cells.push({ dataset, server: unq(m[4]), textContent: unq(m[4]) });
}
const script = /<script>([\s\S]*?)<\/script>/.exec(html);
let failures = 0;
const fail = (msg) => { failures++; console.error('FAIL: ' + msg); };
if (cells.length < 30) fail(`only ${cells.length} cells`);
if (!script) fail('no inline script');

const elements = { live: { textContent: '' }, reuse: { innerHTML: '' } };
let text = metrics;
const sandbox = {
  document: { querySelectorAll: () => cells, getElementById: (id) => elements[id] },
  fetch: async (url) => {
    if (url !== '/metrics') throw new Error('unexpected fetch of ' + url);
    return { ok: true, status: 200, text: async () => text };
  },
  setInterval: () => 0,
  console,
};
vm.createContext(sandbox);
(async () => {
  vm.runInContext(script ? script[1] : '', sandbox);
  await new Promise((r) => setTimeout(r, 50));
  let compared = 0;
  for (const c of cells) {
    if (c.dataset.m.startsWith('process_')) continue;
    compared++;
    if (c.textContent !== c.server)
      fail(`${c.dataset.m}${c.dataset.d ? ' / ' + c.dataset.d : ''}: page ${c.server}, script ${c.textContent}`);
  }
  if (compared < 25) fail(`only ${compared} cells compared`);
  if (!/^live/.test(elements.live.textContent)) fail(`status: ${elements.live.textContent}`);
  // a second refresh with 100 more prompt tokens, 40 of them from T1: the chart draws
  text = metrics
    .replace(/^kvtier_prompt_tokens_total (\S+)$/m, (_, v) => `kvtier_prompt_tokens_total ${+v + 100}`)
    .replace(/^kvtier_cached_tokens_total\{tier="T1"\} (\S+)$/m, (_, v) => `kvtier_cached_tokens_total{tier="T1"} ${+v + 40}`);
  await sandbox.tick();
  const lines = (elements.reuse.innerHTML.match(/<polyline/g) || []).length;
  if (lines !== 5) fail(`reuse chart has ${lines} lines, want 5`);
  const t1 = /stroke="#5aae61" points="([^"]*)"/.exec(elements.reuse.innerHTML); // 40% of a 120-px chart: y 72
  if (!t1 || t1[1] !== '0.0,72.0') fail('T1 line is not at 40%: ' + elements.reuse.innerHTML);
  console.log(`dashboard_check: ${cells.length} cells, ${compared} compared, ${failures} failed`);
  process.exit(failures ? 1 : 0);
})();
