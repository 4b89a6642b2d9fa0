// The parts of the API agents reach through their clients' newer surfaces,
// against a live `kvtier serve` (a random-weight model):
// - the Responses API: the AI SDK's default OpenAI provider (@ai-sdk/openai,
//   which calls /v1/responses) with generateText, streamText and a tool, and
//   the openai package's responses.create (whole and streamed), its
//   responses.stream helper, previous_response_id over five turns reusing the
//   earlier turns from the cache, and a forced function tool whose call item
//   is parsed and whose output goes back as an item;
// - tool calls streamed in fragments through the stream helpers (openai's
//   chat.completions.stream, the AI SDK's streamText over
//   @ai-sdk/openai-compatible), reassembled equal to the non-streamed call;
// - zod 4 schemas with the keywords people use (min/positive, email, uuid,
//   iso datetime, regex, discriminated unions, records, a recursive type,
//   integer bounds, bounded arrays) through the AI SDK's generateObject,
//   LangChain's withStructuredOutput and openai's zodResponseFormat with
//   chat.completions.parse, every output checked by ajv against the JSON
//   schema the client sent (read from the request) and by zod itself.
// A random model writes noise unless the grammar constrains it, so every
// finished output must validate.
// Usage: BASE=http://127.0.0.1:PORT KEY=... node agent_clients_api.mjs (run
// from the folder holding node_modules).
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, streamText, generateObject, tool as aiTool, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';

globalThis.AI_SDK_LOG_WARNINGS = false; // the Responses provider warns that it drops seed; the checks do not need it
const BLOCK = 32; // kvtier's default cache block
const KEY = process.env.KEY, V1 = process.env.BASE + '/v1';
// fewer seeds under the sanitizers (ASan sets KVT_SANITIZED, TSan TSAN_OPTIONS), which are 10x slower
const SEEDS = process.env.KVT_SANITIZED || process.env.TSAN_OPTIONS ? 2 : 6;
let fails = 0;
function check(what, cond, detail) {
  if (cond) console.log('ok: ' + what);
  else { console.error('FAIL: ' + what + (detail !== undefined ? ': ' + JSON.stringify(detail).slice(0, 2000) : '')); fails++; }
}
// The full cache blocks of a turn of `prompt` and `reply` tokens: what the next turn can reuse. The reply's last
// token was sampled but never run through the model, so its KV (and a block it would complete) does not exist.
const reusable = (prompt, reply) => Math.floor((prompt + reply - 1) / BLOCK) * BLOCK;

// The request bodies the clients send, so that their outputs are checked against what they asked for, and the
// replies' text (a promise), for the output a client refused.
const sent = [];
const recordingFetch = async (url, init) => {
  const rec = { url: String(url), body: null, reply: null };
  try { rec.body = JSON.parse(init.body); } catch { /* not JSON */ }
  sent.push(rec);
  const r = await fetch(url, init);
  rec.reply = r.clone().text();
  return r;
};
const ajvs = { 7: new Ajv({ strict: false, validateFormats: false }), 2020: new Ajv2020({ strict: false, validateFormats: false }) };
// ajv for the dialect the schema names (zod writes 2020-12 or draft-07); formats are checked by the patterns zod
// writes beside them and by zod's own parse
const compile = (schema) => ajvs[String(schema.$schema || '').includes('2020-12') ? 2020 : 7].compile(schema);

const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 16 }, unit: { type: 'string', enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const validWeather = compile(weatherSchema);
const WeatherZ = z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) });
const runWeather = (args) => JSON.stringify({ city: args?.city, forecast: 'sunny', temperature: 21, unit: args?.unit });
const parseArgs = (s) => { try { return JSON.parse(s); } catch { return null; } };

/* ---- the Responses API ------------------------------------------------------------------------- */

async function responsesAiSdk() {
  const openai = createOpenAI({ baseURL: V1, apiKey: KEY, fetch: recordingFetch });
  const opts = { model: openai('m'), prompt: 'Tell me about caches.', maxOutputTokens: 16, temperature: 0, maxRetries: 0 };
  const g = await generateText(opts);
  check('ai sdk responses: generateText calls /v1/responses', sent.at(-1)?.url.endsWith('/v1/responses'), sent.at(-1)?.url);
  check('ai sdk responses: generateText answers with usage', typeof g.text === 'string' && g.usage.inputTokens > 0 &&
    g.usage.outputTokens > 0 && g.usage.outputTokens <= 16 && ['stop', 'length'].includes(g.finishReason), [g.usage, g.finishReason]);
  let errors = 0;
  const s = streamText({ ...opts, onError: () => errors++ });
  let text = '', parts = 0;
  for await (const p of s.textStream) { text += p; parts++; }
  const su = await s.usage;
  check('ai sdk responses: streamText streams the generateText text', errors === 0 && parts >= 1 && text === g.text,
    { errors, parts, text, g: g.text });
  check('ai sdk responses: ... with the same usage and finish', su.outputTokens === g.usage.outputTokens &&
    su.inputTokens === g.usage.inputTokens && (await s.finishReason) === g.finishReason, { su, g: g.usage });

  let ran = 0;
  const t = await generateText({
    model: openai('m'), prompt: 'What is the weather in Rome?', maxOutputTokens: 80, temperature: 0, maxRetries: 0,
    tools: { get_weather: aiTool({ description: 'The weather in a city', inputSchema: WeatherZ,
      execute: async (a) => { ran++; return JSON.parse(runWeather(a)); } }) },
    prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: 'required' } : { toolChoice: 'none' }),
    stopWhen: stepCountIs(2),
  });
  const c0 = t.steps[0]?.toolCalls[0];
  check('ai sdk responses: a required tool is called, runs and its result goes back', t.steps.length === 2 && ran === 1 &&
    c0?.toolName === 'get_weather' && validWeather(c0.input) && typeof t.text === 'string', t.steps.map((x) => x.toolCalls));
  const u0 = t.steps[0].usage, cached = t.steps[1]?.usage.inputTokenDetails?.cacheReadTokens ?? 0;
  check('ai sdk responses: step 2 reuses step 1 from the cache', cached >= reusable(u0.inputTokens, u0.outputTokens),
    { u0, cached, reuse: t.steps[1]?.response?.body?.kvtier?.reuse_stop, sent: sent.at(-1)?.body?.input });
}

async function responsesOpenai(client) {
  const req = { model: 'm', input: 'Tell me about caches.', instructions: 'Be brief.', max_output_tokens: 12, temperature: 0 };
  const r = await client.responses.create(req);
  check('openai responses.create: a response object', r.object === 'response' && r.id.startsWith('resp_') &&
    ['completed', 'incomplete'].includes(r.status) && r.output[0]?.type === 'message', r);
  check('openai responses.create: output_text and usage', typeof r.output_text === 'string' && r.usage.output_tokens > 0 &&
    r.usage.output_tokens <= 12 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens &&
    r.usage.input_tokens_details.cached_tokens >= 0, r.usage);

  const events = [];
  for await (const e of await client.responses.create({ ...req, stream: true })) events.push(e);
  const last = events.at(-1), types = events.map((e) => e.type);
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  check('openai responses stream: created first, completed or incomplete last, numbered in order',
    types[0] === 'response.created' && ['response.completed', 'response.incomplete'].includes(last?.type) &&
    events.every((e, i) => e.sequence_number === i), types);
  check('openai responses stream: the deltas make the text of the whole response, with its usage', deltas === r.output_text &&
    last?.response?.usage?.output_tokens === r.usage.output_tokens, { deltas, text: r.output_text, usage: last?.response?.usage });

  const helper = client.responses.stream(req);
  let helperDeltas = '';
  helper.on('response.output_text.delta', (e) => { helperDeltas += e.delta; });
  const fin = await helper.finalResponse();
  check('openai responses.stream helper: its final response and deltas are the same text', fin.output_text === r.output_text &&
    helperDeltas === r.output_text, { fin: fin.output_text, helperDeltas });

  // five turns, each naming the previous: every full block of the previous turn's prompt and reply is reused
  const instructions = 'You answer questions about tiered caches in one short sentence each time. '.repeat(2);
  let prev = await client.responses.create({ model: 'm', input: 'What is T0?', instructions, max_output_tokens: 40, temperature: 0 });
  for (let turn = 2; turn <= 5; turn++) {
    const r2 = await client.responses.create({ model: 'm', previous_response_id: prev.id, input: `And turn ${turn}?`,
      instructions, max_output_tokens: 8, temperature: 0 });
    const cached = r2.usage.input_tokens_details.cached_tokens, before = prev.usage.input_tokens + prev.usage.output_tokens;
    check(`openai previous_response_id turn ${turn}: cached ${cached} covers the previous prompt and reply (${before}) to the block`,
      r2.previous_response_id === prev.id && cached >= reusable(prev.usage.input_tokens, prev.usage.output_tokens) &&
      r2.usage.input_tokens > before, r2.usage);
    prev = r2;
  }

  // a forced function tool: the call item parsed, its output sent back as an item
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema, strict: true }];
  const ask = { model: 'm', input: [{ role: 'user', content: 'What is the weather in Paris?' }], tools,
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 80, seed: 4 };
  const f = await client.responses.create(ask);
  const call = f.output.find((o) => o.type === 'function_call');
  const args = call && parseArgs(call.arguments);
  check('openai responses tool: a function_call item of get_weather', f.status === 'completed' && call?.name === 'get_weather' &&
    typeof call.call_id === 'string' && call.call_id.length > 0, f.output);
  check('openai responses tool: its arguments parse and validate', args && validWeather(args), call);
  const fs = client.responses.stream(ask);
  let argDeltas = 0;
  fs.on('response.function_call_arguments.delta', () => argDeltas++);
  const ff = await fs.finalResponse();
  const scall = ff.output.find((o) => o.type === 'function_call');
  check('openai responses tool streamed: the same call, in argument deltas', argDeltas >= 1 && scall?.name === call?.name &&
    scall?.arguments === call?.arguments, { argDeltas, scall });
  const back = await client.responses.create({ model: 'm', previous_response_id: f.id, tools, max_output_tokens: 12, seed: 5,
    input: [{ type: 'function_call_output', call_id: call?.call_id, output: runWeather(args) }] });
  check('openai responses tool: the output item is accepted and answered', back.status !== 'failed' &&
    back.output.some((o) => o.type === 'message') && typeof back.output_text === 'string', back.output);
  check('openai responses tool: the answer reuses the question and the call from the cache',
    back.usage.input_tokens_details.cached_tokens >= reusable(f.usage.input_tokens, f.usage.output_tokens), [f.usage, back.usage]);
  // the same conversation sent whole, the output items as the SDK returned them (as clients without stored state do)
  const whole = await client.responses.create({ model: 'm', tools, max_output_tokens: 12, seed: 5, store: false,
    input: [...ask.input, ...f.output, { type: 'function_call_output', call_id: call?.call_id, output: runWeather(args) }] });
  check('openai responses tool: the conversation sent whole as items gives the same answer from the cache',
    whole.output_text === back.output_text &&
    whole.usage.input_tokens_details.cached_tokens >= reusable(f.usage.input_tokens, f.usage.output_tokens), [whole.output, whole.usage]);
}

/* ---- tool calls streamed in fragments --------------------------------------------------------------- */

async function streamedToolsOpenai(client) {
  // a long city name gives the arguments many tokens to arrive in
  const schema = { ...weatherSchema, properties: { ...weatherSchema.properties, city: { type: 'string', minLength: 40, maxLength: 60 } } };
  const valid = compile(schema);
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: schema } }];
  let same = 0, split = 0, first = null;
  const frags = [];
  for (let seed = 1; seed <= SEEDS; seed++) {
    const req = { model: 'm', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, max_tokens: 160, seed,
      tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const whole = (await client.chat.completions.create(req)).choices[0].message.tool_calls?.[0];
    const s = client.chat.completions.stream(req);
    let n = 0;
    s.on('tool_calls.function.arguments.delta', () => n++);
    const fin = await s.finalChatCompletion();
    const got = fin.choices[0].message.tool_calls?.[0];
    frags.push(n);
    if (n > 1) split++;
    if (whole && got && got.function.name === whole.function.name && got.function.arguments === whole.function.arguments &&
      got.id.startsWith('call_') && valid(parseArgs(got.function.arguments)) && fin.choices[0].finish_reason === 'tool_calls') same++;
    else if (!first) first = { seed, whole, got, finish: fin.choices[0].finish_reason };
  }
  check(`openai chat.completions.stream: ${SEEDS} of ${SEEDS} forced calls reassemble to the non-streamed call and validate`,
    same === SEEDS, first);
  // how many fragments a call arrives in depends on when the stream is read; over the seeds' long arguments at
  // least one call comes in several
  check(`openai chat.completions.stream: arguments arrive in several fragments (per seed: ${frags})`, split >= 1, frags);
}

async function streamedToolsAiSdk() {
  const provider = createOpenAICompatible({ name: 'kvtier', baseURL: V1, apiKey: KEY, includeUsage: true });
  const tools = { get_weather: aiTool({ description: 'The weather in a city', inputSchema: WeatherZ }) };
  const opts = { model: provider('m'), prompt: 'What is the weather in Rome?', tools, toolChoice: 'required', maxOutputTokens: 120,
    seed: 5, maxRetries: 0 };
  const g = await generateText(opts);
  let errors = 0, deltas = '', nDeltas = 0, call = null;
  const s = streamText({ ...opts, onError: () => errors++ });
  for await (const p of s.fullStream) {
    if (p.type === 'tool-input-delta') { deltas += p.delta; nDeltas++; }
    if (p.type === 'tool-call') call = p;
  }
  const want = g.toolCalls[0];
  check('ai sdk streamText tool (openai-compatible): the call streams as input deltas that make its input',
    errors === 0 && nDeltas >= 1 && call?.toolName === 'get_weather' &&
      JSON.stringify(WeatherZ.safeParse(parseArgs(deltas)).data) === JSON.stringify(call.input),
    { errors, nDeltas, deltas, call });
  check('ai sdk streamText tool: the same call as generateText for the seed, and it validates',
    want && JSON.stringify(call?.input) === JSON.stringify(want.input) && validWeather(call.input) && (await s.finishReason) === 'tool-calls',
    { call: call?.input, want: want?.input });
}

/* ---- zod structured output -------------------------------------------------------------------------- */

// a recursive type, written with a getter (zod 4's way) and with z.lazy: LangChain's zod interop recurses without end
// on the getter form, so LangChain gets the lazy one
const Tree = z.object({ label: z.string().min(1).max(8), get children() { return z.array(Tree).max(2); } });
const TreeLazy = z.object({ label: z.string().min(1).max(8), children: z.lazy(() => z.array(TreeLazy).max(2)) });
const shape = {
  id: z.uuid(),
  email: z.email().max(40),
  when: z.iso.datetime(),
  code: z.string().regex(/^[A-Z]{2}-[0-9]{3}$/),
  name: z.string().min(1).max(12),
  qty: z.number().int().min(1).max(99),
  count: z.int().nonnegative(), // zod writes the safe-integer bounds as well
  price: z.number().positive().max(1000),
  kind: z.discriminatedUnion('type', [
    z.object({ type: z.literal('book'), pages: z.number().int().min(1).max(2000) }),
    z.object({ type: z.literal('pen'), color: z.enum(['red', 'blue']) }),
  ]),
  tags: z.string().max(6).array().min(1).max(4),
  tree: Tree,
};
const attrs = z.record(z.string().max(8), z.number().int().min(0).max(9));
const Item = z.object({ ...shape, attrs });
const ItemLc = z.object({ ...shape, tree: TreeLazy, attrs });
// openai's strict structured outputs refuse z.record (an object without additionalProperties: false) in the client
const ItemStrict = z.object(shape);

// Whether zod accepts doc. JSON Schema counts a string's length in code points and zod in UTF-16 units, so a string
// at its maxLength with a character past U+FFFF is valid JSON but too long for zod: zod's only allowed complaint.
function zodAccepts(zschema, doc) {
  const r = zschema.safeParse(doc);
  const at = (path) => path.reduce((v, k) => v?.[k], doc);
  const ok = r.success || r.error.issues.every((i) => i.code === 'too_big' && i.origin === 'string' &&
    typeof at(i.path) === 'string' && [...at(i.path)].length <= i.maximum);
  if (ok && !r.success) console.log('note: zod counts UTF-16 units where JSON Schema counts code points: ' + JSON.stringify(r.error.issues));
  return ok;
}

// Runs the seeds of one client, each giving the parsed output. Every output must be a finished reply that
// validates with ajv against the schema the request carried, and with zod (zodAccepts). When the client itself
// refused the output, the reply's content is checked, so that only a server fault fails.
async function zodSeeds(name, zschema, run) {
  let good = 0, first = null;
  for (let seed = 1; seed <= SEEDS; seed++) {
    const mark = sent.length;
    let out = null, err = null;
    try { out = await run(seed); } catch (e) { err = String(e?.stack || e).slice(0, 600); }
    const rec = sent.slice(mark).at(-1);
    const reply = rec?.reply ? parseArgs(await rec.reply) : null;
    const finish = reply?.choices?.[0]?.finish_reason;
    if (err) out = parseArgs(reply?.choices?.[0]?.message?.content);
    const schema = rec?.body?.response_format?.json_schema?.schema;
    const valid = schema && compile(schema);
    if (finish === 'stop' && valid && valid(out) && zodAccepts(zschema, out)) good++;
    else if (!first) first = { seed, finish, err, out, ajv: valid?.errors, zod: zschema.safeParse(out).error?.issues };
  }
  check(`zod ${name}: ${SEEDS} of ${SEEDS} seeds finish and validate with ajv against the sent schema and with zod`,
    good === SEEDS, first);
}

async function zodOutputs(client) {
  const provider = createOpenAICompatible({ name: 'kvtier', baseURL: V1, apiKey: KEY, supportsStructuredOutputs: true,
    fetch: recordingFetch });
  await zodSeeds('ai sdk generateObject', Item, async (seed) => (await generateObject({ model: provider('m'), schema: Item,
    prompt: 'An order item, as JSON.', maxOutputTokens: 600, seed, maxRetries: 0 })).object);

  const lc = (seed) => new ChatOpenAI({ model: 'm', apiKey: KEY, configuration: { baseURL: V1, fetch: recordingFetch },
    maxTokens: 600, maxRetries: 0, modelKwargs: { seed } });
  await zodSeeds('langchain withStructuredOutput', ItemLc, (seed) =>
    lc(seed).withStructuredOutput(ItemLc, { method: 'jsonSchema', strict: true }).invoke('An order item, as JSON.'));

  const rf = zodResponseFormat(ItemStrict, 'item');
  await zodSeeds('openai zodResponseFormat + chat.completions.parse', ItemStrict, async (seed) => {
    const r = await client.chat.completions.parse({ model: 'm', messages: [{ role: 'user', content: 'An order item, as JSON.' }],
      max_tokens: 600, seed, response_format: rf });
    return r.choices[0].message.parsed;
  });
}

async function main() {
  const client = new OpenAI({ baseURL: V1, apiKey: KEY, maxRetries: 0, timeout: 120000, fetch: recordingFetch });
  for (const [name, f] of [['ai sdk responses', responsesAiSdk], ['openai responses', () => responsesOpenai(client)],
    ['openai streamed tools', () => streamedToolsOpenai(client)], ['ai sdk streamed tools', streamedToolsAiSdk],
    ['zod outputs', () => zodOutputs(client)]]) {
    const t0 = Date.now();
    try { await f(); } catch (e) { check(name + ' ran without an exception', false, String(e && e.stack || e)); }
    console.log(`-- ${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
  console.log(fails ? `${fails} failed` : 'all passed');
  process.exit(fails ? 1 : 0);
}
main();
