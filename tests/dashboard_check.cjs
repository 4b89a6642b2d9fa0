// Checks kvtier's /dashboard page without a browser (Chromium is ~290 MB
// installed, too heavy for CI): runs the page's own inline script in Node
// against a minimal DOM built from the page's cells, feeding it a /metrics
// text, and checks that
//  - every cell the script refills shows what the server rendered (the page's
//    numbers are /metrics' numbers, formatted the same way on both sides);
//    cells of process_* series are skipped (they move between the fetches);
//  - the page says it is live, and after a second refresh with more prompt
//    tokens the reuse chart has one line per tier plus the total;
//  - with REQUESTS.json (GET /dashboard/requests, taken with the page): the
//    "last requests" rows the script renders from it are the server's, byte
//    for byte; while every generation is in the table, its columns add up to
//    /metrics' token counters; and each ID=RESPONSE.json given (a response
//    whose X-Request-Id was ID) has its row, with the response's prompt,
//    cached-by-tier, computed and generated tokens, TTFT and reuse stop.
// usage: node dashboard_check.cjs PAGE.html METRICS.txt [REQUESTS.json [ID=RESPONSE.json ...]]
// (exit 1 on a mismatch)
'use strict';
const fs = require('fs');
const vm = require('vm');

const html = fs.readFileSync(process.argv[2], 'utf8');
const metrics = fs.readFileSync(process.argv[3], 'utf8');
const requests = process.argv[4] ? fs.readFileSync(process.argv[4], 'utf8') : '{"requests":[]}';
const responses = process.argv.slice(5).map((a) => {
  const i = a.indexOf('=');
  return { id: a.slice(0, i), r: JSON.parse(fs.readFileSync(a.slice(i + 1), 'utf8')) };
});
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

const elements = { live: { textContent: '' }, reuse: { innerHTML: '' }, 'recent-rows': { innerHTML: '' } };
let text = metrics;
const sandbox = {
  document: { querySelectorAll: () => cells, getElementById: (id) => elements[id] },
  fetch: async (url) => {
    if (url === '/dashboard/requests') return { ok: true, status: 200, json: async () => JSON.parse(requests) };
    if (url !== '/metrics') throw new Error('unexpected fetch of ' + url);
    return { ok: true, status: 200, text: async () => text };
  },
  setInterval: () => 0,
  console,
};
vm.createContext(sandbox);
// The "last requests" table: the server's rows, the script's rows, /metrics and the responses agree.
function checkRecent() {
  const body = /<tbody id="recent-rows">([\s\S]*?)<\/tbody>/.exec(html);
  if (!body) return fail('no "last requests" table');
  const q = JSON.parse(requests).requests;
  if (body[1] !== elements['recent-rows'].innerHTML)
    fail(`last requests: page\n${body[1]}\nscript\n${elements['recent-rows'].innerHTML}`);
  const rows = new Map();
  for (const m of body[1].matchAll(/<tr data-id="([^"]*)">(.*?)<\/tr>/g))
    rows.set(m[1], [...m[2].matchAll(/<td>(.*?)<\/td>/g)].map((c) => unq(c[1])));
  const val = (series) => {
    const m = new RegExp('^' + series.replace(/[{}"]/g, '\\$&') + ' (\\S+)$', 'm').exec(metrics);
    return m ? +m[1] : NaN;
  };
  // columns: 0 ended, 1 id, 2 endpoint, 3 status, 4 tenant, 5 prompt, 6-9 T0-T3, 10 computed, 11 generated,
  // 12 TTFT, 13 total, 14 reuse stopped
  const gens = val('kvtier_generations_total');
  if (q.length === gens && q.length < 20) {
    const sum = (k) => [...rows.values()].reduce((a, r) => a + +r[k], 0);
    const want = [[5, 'kvtier_prompt_tokens_total'], [10, 'kvtier_computed_tokens_total'],
      [11, 'kvtier_generated_tokens_total'],
      ...['T0', 'T1', 'T2', 'T3'].map((t, i) => [6 + i, `kvtier_cached_tokens_total{tier="${t}"}`])];
    for (const [k, series] of want) if (sum(k) !== val(series)) fail(`column ${k}: ${sum(k)}, ${series} ${val(series)}`);
  } else {
    fail(`${q.length} rows for ${gens} generations: the check needs every generation in the table`);
  }
  for (const { id, r } of responses) {
    const row = rows.get(id);
    if (!row) { fail(`no row for ${id}`); continue; }
    const k = r.kvtier, t = k.cached_tokens_by_tier, s = k.reuse_stop;
    const want = [r.usage.prompt_tokens, t.T0, t.T1, t.T2, t.T3, k.computed_tokens, r.usage.completion_tokens]
      .map(String).concat([k.ttft_ms.toFixed(1) + ' ms', '', s ? `${s.reason}@${s.block}/${s.token_offset}` : '-']);
    want.forEach((w, i) => { if (i !== 8 && row[5 + i] !== w) fail(`${id} column ${5 + i}: page ${row[5 + i]}, response ${w}`); });
    if (row[3] !== '200') fail(`${id}: status ${row[3]}`);
  }
  return rows.size;
}

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
  checkRecent();
  // a second refresh with 100 more prompt tokens, 40 of them from T1: the chart draws
  text = metrics
    .replace(/^kvtier_prompt_tokens_total (\S+)$/m, (_, v) => `kvtier_prompt_tokens_total ${+v + 100}`)
    .replace(/^kvtier_cached_tokens_total\{tier="T1"\} (\S+)$/m, (_, v) => `kvtier_cached_tokens_total{tier="T1"} ${+v + 40}`);
  await sandbox.tick();
  const lines = (elements.reuse.innerHTML.match(/<polyline/g) || []).length;
  if (lines !== 5) fail(`reuse chart has ${lines} lines, want 5`);
  const t1 = /stroke="#5aae61" points="([^"]*)"/.exec(elements.reuse.innerHTML); // 40% of a 120-px chart: y 72
  if (!t1 || t1[1] !== '0.0,72.0') fail('T1 line is not at 40%: ' + elements.reuse.innerHTML);
  console.log(`dashboard_check: ${cells.length} cells, ${compared} compared, ` +
    `${JSON.parse(requests).requests.length} requests, ${responses.length} matched to responses, ${failures} failed`);
  process.exit(failures ? 1 : 0);
})();
