// SPDX-License-Identifier: MIT
/* GET /dashboard (dashboard.h): the page, rendered from the /metrics text.
 * Every figure is a cell naming its series (data-m, and data-d for a divisor)
 * and its format (data-f); the server fills the cells once, and the inline
 * script, when it can read /metrics, refills them with the same rules. */
#include "dashboard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

static const char *const tiers[] = {"T0", "T1", "T2", "T3"};
static const char *const tier_what[] = {"active (engine pages)", "host RAM", "local disk", "shared remote"};

double kvt_dashboard_value(const char *text, const char *series, double def) {
    size_t n = strlen(series);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (*l == '#' || strncmp(l, series, n) || l[n] != ' ') continue;
        return strtod(l + n + 1, NULL);
    }
    return def;
}

/* The string value of label key in the first sample of name, into out (HTML-safe characters only). */
static void label_of(const char *text, const char *name, const char *key, char *out, size_t cap) {
    snprintf(out, cap, "?");
    char pat[128];
    snprintf(pat, sizeof pat, "\n%s{", name);
    const char *l = strstr(text, pat);
    if (!l) return;
    snprintf(pat, sizeof pat, "%s=\"", key);
    const char *v = strstr(l, pat), *eol = strchr(l + 1, '\n');
    if (!v || (eol && v > eol)) return;
    v += strlen(pat);
    size_t i = 0;
    for (; v[i] && v[i] != '"' && i + 1 < cap; i++) out[i] = strchr("<>&'\\", v[i]) ? '_' : v[i];
    out[i] = 0;
}

/* Formats v as fmt says, the same way the page's script does. */
static void format(char *out, size_t cap, double v, const char *fmt) {
    if (isnan(v)) {
        snprintf(out, cap, "-");
    } else if (!strcmp(fmt, "bytes")) {
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        int u = 0;
        while (fabs(v) >= 1024 && u < 4) v /= 1024, u++;
        snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    } else if (!strcmp(fmt, "pct")) {
        snprintf(out, cap, "%.1f%%", 100 * v);
    } else if (!strcmp(fmt, "s")) {
        snprintf(out, cap, "%.3f s", v);
    } else {
        snprintf(out, cap, "%.0f", v);
    }
}

/* One cell: series m (divided by series d when given), formatted as fmt. */
static void cell(FILE *f, const char *text, const char *m, const char *d, const char *fmt) {
    double v = kvt_dashboard_value(text, m, NAN);
    if (d) {
        double q = kvt_dashboard_value(text, d, NAN);
        v = q > 0 ? v / q : NAN;
    }
    char s[64];
    format(s, sizeof s, v, fmt);
    fputs("<td data-m=\"", f);
    for (const char *p = m; *p; p++) fputs(*p == '"' ? "&quot;" : (char[2]){*p, 0}, f);
    if (d) {
        fputs("\" data-d=\"", f);
        for (const char *p = d; *p; p++) fputs(*p == '"' ? "&quot;" : (char[2]){*p, 0}, f);
    }
    fprintf(f, "\" data-f=\"%s\">%s</td>", fmt, s);
}

/* A row of label + cells, each cell a (series, divisor, format) triple. */
static void row(FILE *f, const char *text, const char *label, int n, const char *const *cells) {
    fprintf(f, "<tr><th>%s</th>", label);
    for (int i = 0; i < n; i++) cell(f, text, cells[3 * i], cells[3 * i + 1], cells[3 * i + 2]);
    fputs("</tr>\n", f);
}

static const char page_head[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>kvtier dashboard</title>\n"
    "<style>\n"
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\n"
    "h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.2em 0 .3em}\n"
    "table{border-collapse:collapse;background:#fff}th,td{padding:.25em .8em;border:1px solid #ddd;text-align:right}\n"
    "th{text-align:left;font-weight:600;background:#f0f0f0}.note{color:#666;font-size:.9em}\n"
    "svg{background:#fff;border:1px solid #ddd}.grid{display:flex;flex-wrap:wrap;gap:2em}\n"
    "#recent th,#recent td{padding:.2em .5em;white-space:nowrap}#recent td:nth-child(-n+5),#recent td:last-child{text-align:left}\n"
    "</style></head><body>\n";

/* The refresh script: parses /metrics, refills every cell, plots reuse by tier over time. */
static const char page_script[] =
    "<script>\n"
    "'use strict';\n"
    "const hist=[];const TIERS=['T0','T1','T2','T3'];const COLORS=['#1b7837','#5aae61','#2166ac','#b2182b'];\n"
    "function parse(t){const m=new Map();for(const l of t.split('\\n')){if(!l||l[0]==='#')continue;"
    "const i=l.lastIndexOf(' ');m.set(l.slice(0,i),parseFloat(l.slice(i+1)));}return m;}\n"
    "function fmt(v,f){if(!isFinite(v))return '-';if(f==='bytes'){const u=['B','KiB','MiB','GiB','TiB'];let i=0;"
    "while(Math.abs(v)>=1024&&i<4){v/=1024;i++;}return i?v.toFixed(1)+' '+u[i]:v.toFixed(0)+' '+u[i];}"
    "if(f==='pct')return (100*v).toFixed(1)+'%';if(f==='s')return v.toFixed(3)+' s';return v.toFixed(0);}\n"
    "function fill(m){for(const c of document.querySelectorAll('[data-m]')){let v=m.has(c.dataset.m)?"
    "m.get(c.dataset.m):NaN;if(c.dataset.d){const q=m.get(c.dataset.d);v=q>0?v/q:NaN;}c.textContent=fmt(v,c.dataset.f);}}\n"
    "function plot(){const W=480,H=120,svg=document.getElementById('reuse');if(hist.length<2)return;"
    "let s='';const n=hist.length;for(let k=0;k<5;k++){const pts=[];for(let i=1;i<n;i++){const a=hist[i-1],b=hist[i];"
    "const dp=b.prompt-a.prompt;const v=dp>0?(k<4?(b.tier[k]-a.tier[k]):(b.hit-a.hit))/dp:0;"
    "pts.push(((i-1)/(n-2||1)*W).toFixed(1)+','+(H-Math.max(0,Math.min(1,v))*H).toFixed(1));}"
    "s+='<polyline fill=\"none\" stroke-width=\"'+(k<4?1.5:2.5)+'\" stroke=\"'+(k<4?COLORS[k]:'#000')+'\" points=\"'+pts.join(' ')+'\"/>';}"
    "svg.innerHTML=s;}\n"
    "function esc(s){return String(s).replace(/[&<>\"']/g,c=>'&#'+c.charCodeAt(0)+';');}\n"
    "function rows(q){let h='';for(const x of q){const t=x.cached_tokens_by_tier,s=x.reuse_stop;"
    "const c=[new Date(x.t_end*1000).toISOString().slice(11,19),x.request_id,x.endpoint,x.status,x.tenant,"
    "x.prompt_tokens,t.T0,t.T1,t.T2,t.T3,x.computed_tokens,x.generated_tokens,x.ttft_ms.toFixed(1)+' ms',"
    "x.total_ms.toFixed(1)+' ms',s?s.reason+'@'+s.block+'/'+s.token_offset:'-'];"
    "h+='<tr data-id=\"'+esc(x.request_id)+'\">'+c.map(v=>'<td>'+esc(v)+'</td>').join('')+'</tr>\\n';}"
    "document.getElementById('recent-rows').innerHTML=h;}\n"
    "async function tick(){try{const r=await fetch('/metrics',{cache:'no-store'});if(!r.ok)throw new Error(r.status);"
    "const m=parse(await r.text());fill(m);"
    "const q=await fetch('/dashboard/requests',{cache:'no-store'});if(q.ok)rows((await q.json()).requests);hist.push({prompt:m.get('kvtier_prompt_tokens_total')||0,"
    "hit:m.get('kvtier_cache_hit_tokens_total')||0,tier:TIERS.map(t=>m.get('kvtier_cached_tokens_total{tier=\"'+t+'\"}')||0)});"
    "if(hist.length>121)hist.shift();plot();document.getElementById('live').textContent='live, every 3 s';}"
    "catch(e){document.getElementById('live').textContent='a snapshot: this browser cannot read /metrics ('+e.message+')';}}\n"
    "tick();setInterval(tick,3000);\n"
    "</script>\n";

/* s with the characters HTML gives meaning to as numeric references, as the script's esc() writes them. */
static void put_esc(FILE *f, const char *s) {
    for (; *s; s++)
        if (strchr("&<>\"'", *s)) fprintf(f, "&#%d;", *s);
        else fputc(*s, f);
}

static void td(FILE *f, const char *s) {
    fputs("<td>", f);
    put_esc(f, s);
    fputs("</td>", f);
}

/* The last requests, newest first: one row each, cells as the script's rows() renders them. */
static void recent_table(FILE *f, const kvt_req_entry *e, int32_t n) {
    fputs("<h2>Last requests</h2><table id=\"recent\"><thead><tr><th>ended (UTC)</th><th>request id</th>"
          "<th>endpoint</th><th>status</th><th>tenant</th><th>prompt</th><th>cached T0</th><th>T1</th><th>T2</th>"
          "<th>T3</th><th>computed</th><th>generated</th><th>TTFT</th><th>total</th><th>reuse stopped</th></tr>"
          "</thead><tbody id=\"recent-rows\">",
          f);
    for (int32_t i = 0; i < n; i++) {
        const kvt_req_entry *x = &e[i];
        char when[16] = "?", stop[64];
        struct tm tm;
        time_t t = (time_t)x->t_end;
        if (gmtime_r(&t, &tm)) snprintf(when, sizeof when, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
        kvt_req_stop_text(x, stop, sizeof stop);
        fputs("<tr data-id=\"", f);
        put_esc(f, x->request_id);
        fputs("\">", f);
        char status[16], ttft[32], total[32];
        snprintf(status, sizeof status, "%d", x->status);
        snprintf(ttft, sizeof ttft, "%.1f ms", x->ttft_ms);
        snprintf(total, sizeof total, "%.1f ms", x->total_ms);
        const char *head[] = {when, x->request_id, x->endpoint, status, x->tenant};
        const int32_t counts[] = {x->prompt_tokens,  x->tier_tokens[0],  x->tier_tokens[1],  x->tier_tokens[2],
                                  x->tier_tokens[3], x->computed_tokens, x->generated_tokens};
        const char *tail[] = {ttft, total, stop};
        for (size_t k = 0; k < KVT_ARRAY_LEN(head); k++) td(f, head[k]);
        for (size_t k = 0; k < KVT_ARRAY_LEN(counts); k++) fprintf(f, "<td>%d</td>", counts[k]);
        for (size_t k = 0; k < KVT_ARRAY_LEN(tail); k++) td(f, tail[k]);
        fputs("</tr>\n", f);
    }
    fputs("</tbody></table><div class=\"note\">the last generations, newest first: prompt tokens restored from each "
          "tier, computed, generated, and where reuse stopped (reason@block/token, docs/api.md \"Why did this "
          "miss?\")</div>\n",
          f);
}

/* Long: the page's sections in the order they show, each a heading and a table of series. */
char *kvt_dashboard_html(const char *t, const kvt_req_entry *last, int32_t n_last) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) return kvt_xstrdup("");
    char version[64], commit[64], variant[32];
    label_of(t, "kvtier_build_info", "version", version, sizeof version);
    label_of(t, "kvtier_build_info", "commit", commit, sizeof commit);
    label_of(t, "kvtier_build_info", "ops_variant", variant, sizeof variant);
    fputs(page_head, f);
    fprintf(f,
            "<h1>kvtier</h1><div class=\"note\">version %s, commit %s, kernels %s &middot; <span id=\"live\">a "
            "snapshot</span></div>\n",
            version, commit, variant);

    fputs("<h2>Tiers</h2><table id=\"tiers\"><tr><th>tier</th><th>used</th><th>budget</th><th>full</th>"
          "<th>blocks</th><th>evicted</th><th>served tokens</th></tr>\n",
          f);
    for (int i = 0; i < 4; i++) {
        char used[64], budget[64], blocks[64], ev[64], cached[64], label[64];
        snprintf(used, sizeof used, "kvtier_tier_used_bytes{tier=\"%s\"}", tiers[i]);
        snprintf(budget, sizeof budget, "kvtier_tier_budget_bytes{tier=\"%s\"}", tiers[i]);
        snprintf(blocks, sizeof blocks, "kvtier_cache_blocks{tier=\"%s\"}", tiers[i]);
        snprintf(ev, sizeof ev, "kvtier_tier_evictions_total{tier=\"%s\"}", tiers[i]);
        snprintf(cached, sizeof cached, "kvtier_cached_tokens_total{tier=\"%s\"}", tiers[i]);
        snprintf(label, sizeof label, "%s %s", tiers[i], tier_what[i]);
        const char *const c[] = {used,   NULL, "bytes", budget, NULL, "bytes", used,   budget, "pct",
                                 blocks, NULL, "int",   ev,     NULL, "int",   cached, NULL,   "int"};
        row(f, t, label, 6, c);
    }
    fputs("</table>\n<div class=\"grid\"><div><h2>Reuse</h2><table id=\"reuse-table\">\n", f);
    static const char *const reuse[][4] = {
        {"hit rate (tokens restored / looked up)", "kvtier_cache_hit_ratio", NULL, "pct"},
        {"prompt tokens", "kvtier_prompt_tokens_total", NULL, "int"},
        {"restored from the cache", "kvtier_cache_hit_tokens_total", NULL, "int"},
        {"computed (prefilled)", "kvtier_computed_tokens_total", NULL, "int"},
        {"generated", "kvtier_generated_tokens_total", NULL, "int"},
        {"requests that reused every cached block", "kvtier_cache_full_reuse_total", NULL, "int"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(reuse); i++) row(f, t, reuse[i][0], 1, &reuse[i][1]);
    fputs("</table></div>\n<div><h2>Reuse by tier over time</h2><svg id=\"reuse\" width=\"480\" height=\"120\" "
          "viewBox=\"0 0 480 120\"></svg><div class=\"note\">share of new prompt tokens served per refresh: "
          "<span style=\"color:#1b7837\">T0</span> <span style=\"color:#5aae61\">T1</span> "
          "<span style=\"color:#2166ac\">T2</span> <span style=\"color:#b2182b\">T3</span>, all in black</div></div>"
          "</div>\n",
          f);

    fputs("<div class=\"grid\"><div><h2>Requests</h2><table id=\"requests\">\n", f);
    static const char *const reqs[][4] = {
        {"generations", "kvtier_generations_total", NULL, "int"},
        {"mean time to first token", "kvtier_time_to_first_token_seconds_sum",
         "kvtier_time_to_first_token_seconds_count", "s"},
        {"mean completion time", "kvtier_request_duration_seconds_sum{endpoint=\"completions\"}",
         "kvtier_request_duration_seconds_count{endpoint=\"completions\"}", "s"},
        {"mean chat completion time", "kvtier_request_duration_seconds_sum{endpoint=\"chat_completions\"}",
         "kvtier_request_duration_seconds_count{endpoint=\"chat_completions\"}", "s"},
        {"waiting for a slot", "kvtier_queue_depth", NULL, "int"},
        {"sequences running", "kvtier_sequences_active", NULL, "int"},
        {"sequences at most", "kvtier_sequences_max", NULL, "int"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(reqs); i++) row(f, t, reqs[i][0], 1, &reqs[i][1]);
    fputs("</table></div>\n<div><h2>Sessions and pins</h2><table id=\"sessions\">\n", f);
    static const char *const sess[][4] = {
        {"agent sessions warm", "kvtier_sessions_warm", NULL, "int"},
        {"T0 pages pinned", "kvtier_pinned_pages", NULL, "int"},
        {"sessions released (pressure)", "kvtier_sessions_released_total{why=\"pressure\"}", NULL, "int"},
        {"sessions released (expired)", "kvtier_sessions_released_total{why=\"expired\"}", NULL, "int"},
        {"blocks prefetched", "kvtier_prefetched_blocks_total", NULL, "int"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(sess); i++) row(f, t, sess[i][0], 1, &sess[i][1]);
    fputs("</table></div>\n<div><h2>Disk and remote I/O</h2><table id=\"io\">\n", f);
    static const char *const io[][4] = {
        {"disk read", "kvtier_disk_bytes_total{direction=\"read\"}", NULL, "bytes"},
        {"disk written", "kvtier_disk_bytes_total{direction=\"write\"}", NULL, "bytes"},
        {"disk writes dropped", "kvtier_disk_writes_dropped_total", NULL, "int"},
        {"remote read", "kvtier_remote_bytes_total{direction=\"read\"}", NULL, "bytes"},
        {"remote written", "kvtier_remote_bytes_total{direction=\"write\"}", NULL, "bytes"},
        {"remote errors", "kvtier_remote_errors_total", NULL, "int"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(io); i++) row(f, t, io[i][0], 1, &io[i][1]);
    fputs("</table></div>\n<div><h2>Process</h2><table id=\"process\">\n", f);
    static const char *const proc[][4] = {
        {"resident memory", "process_resident_memory_bytes", NULL, "bytes"},
        {"open file descriptors", "process_open_fds", NULL, "int"},
        {"CPU time", "process_cpu_seconds_total", NULL, "s"},
    };
    for (size_t i = 0; i < KVT_ARRAY_LEN(proc); i++) row(f, t, proc[i][0], 1, &proc[i][1]);
    fputs("</table></div></div>\n", f);
    recent_table(f, last, n_last);
    fputs(page_script, f);
    fputs("</body></html>\n", f);
    fclose(f);
    return out;
}
