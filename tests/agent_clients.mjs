// Agent loops against a live `kvtier serve` (a random-weight model) with the
// clients agents are written with: the official `openai` package, LangChain
// (@langchain/openai bindTools and withStructuredOutput) and the Vercel AI SDK
// (generateText with tools over @ai-sdk/openai-compatible). Each forces a tool
// call (the only way a random model calls one), checks the call parses and its
// arguments validate against the tool's schema (ajv), runs the tool, sends the
// result back and checks that the next step's cached_tokens grew over the
// whole earlier context. Also: JSON-schema output over 100 seeds validated by
// ajv, and a streamed call reassembled equal to the non-streamed one.
// Usage: BASE=http://127.0.0.1:PORT KEY=... node agent_clients.mjs (run from
// the folder holding node_modules).
import OpenAI from 'openai';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { HumanMessage, SystemMessage } from '@langchain/core/messages';
import { generateText, tool as aiTool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import Ajv from 'ajv';

const BLOCK = 32; // kvtier's default cache block
// The full cache blocks of a step of n prompt and reply tokens, which the next step reuses. The reply's last token
// was sampled but never run through the model, so its KV (and a block it would complete) does not exist.
const reusable = (n) => Math.floor((n - 1) / BLOCK) * BLOCK;
let fails = 0;
function check(what, cond, detail) {
  if (cond) console.log('ok: ' + what);
  else { console.error('FAIL: ' + what + (detail !== undefined ? ': ' + JSON.stringify(detail) : '')); fails++; }
}

const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 16 }, unit: { type: 'string', enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const ajv = new Ajv({ strict: false });
const validWeather = ajv.compile(weatherSchema);
const system = 'You are a weather agent. Call get_weather for every city you are asked about, then answer in one sentence. '.repeat(3);
const runWeather = (args) => JSON.stringify({ city: args.city, forecast: 'sunny', temperature: 21, unit: args.unit });

async function openaiLoop(client) {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema } }];
  const messages = [{ role: 'system', content: system }, { role: 'user', content: 'What is the weather in Paris?' }];
  const r1 = await client.chat.completions.create({ model: 'm', messages, tools, tool_choice: 'required', max_tokens: 120, seed: 7 });
  const call = r1.choices[0].message.tool_calls?.[0];
  check('openai: step 1 finishes with tool_calls', r1.choices[0].finish_reason === 'tool_calls', r1.choices[0]);
  let args = null;
  try { args = JSON.parse(call.function.arguments); } catch { /* checked below */ }
  check('openai: the arguments parse and validate', call && call.function.name === 'get_weather' && args && validWeather(args), call);

  // the same call streamed: its deltas reassemble into the non-streamed call
  const stream = await client.chat.completions.create({ model: 'm', messages, tools, tool_choice: 'required', max_tokens: 120, seed: 7, stream: true });
  const acc = {};
  let finish = null;
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    for (const d of c.delta.tool_calls || []) {
      const a = (acc[d.index] ??= { id: '', name: '', arguments: '' });
      a.id += d.id || ''; a.name += d.function?.name || ''; a.arguments += d.function?.arguments || '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  check('openai: the streamed call equals the non-streamed one',
    acc[0] && acc[0].name === call.function.name && acc[0].arguments === call.function.arguments && finish === 'tool_calls', acc);

  messages.push(r1.choices[0].message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: runWeather(args || {}) });
  const r2 = await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 12, seed: 8 });
  check('openai: step 2 accepts the tool result and answers', typeof r2.choices[0].message.content === 'string', r2.choices[0]);
  const before = r1.usage.prompt_tokens + r1.usage.completion_tokens;
  const cached = r2.usage.prompt_tokens_details.cached_tokens;
  check('openai: step 2 reuses the tools, the question and the generated call from the cache',
    cached >= reusable(before) && cached > r1.usage.prompt_tokens_details.cached_tokens, { before, cached });
}

async function structured(client) {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 20 },
      age: { type: 'integer' },
      email: { type: ['string', 'null'] },
      tags: { type: 'array', items: { type: 'string', enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 3 },
      address: { type: 'object', properties: { zip: { type: 'string' }, city: { type: 'string' } }, required: ['city'], additionalProperties: false },
    },
    required: ['name', 'age', 'email', 'tags', 'address'],
    additionalProperties: false,
  };
  const valid = ajv.compile(schema);
  // 100 seeds; fewer under the sanitizers (ASan sets KVT_SANITIZED, TSan TSAN_OPTIONS), which are 10x slower
  const seeds = process.env.KVT_SANITIZED || process.env.TSAN_OPTIONS ? 20 : 100;
  let good = 0, first = null;
  for (let seed = 1; seed <= seeds; seed++) {
    const r = await client.chat.completions.create({
      model: 'm', messages: [{ role: 'user', content: 'A person, as JSON.' }], max_tokens: 200, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } },
    });
    let doc = null;
    try { doc = JSON.parse(r.choices[0].message.content); } catch { /* counted */ }
    if (doc && valid(doc)) good++;
    else if (!first) first = { seed, content: r.choices[0].message.content, errors: valid.errors };
  }
  check(`json_schema: ${seeds} of ${seeds} seeds validate with ajv`, good === seeds, first || good);
}

async function langchainLoop() {
  const model = new ChatOpenAI({
    model: 'm', apiKey: process.env.KEY, configuration: { baseURL: process.env.BASE + '/v1' }, maxTokens: 120, maxRetries: 0,
    modelKwargs: { seed: 11 },
  });
  const weather = lcTool(async ({ city, unit }) => runWeather({ city, unit }), {
    name: 'get_weather', description: 'The weather in a city',
    schema: z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) }),
  });
  const msgs = [new SystemMessage(system), new HumanMessage('What is the weather in Oslo?')];
  const ai1 = await model.bindTools([weather], { tool_choice: 'required' }).invoke(msgs);
  const call = ai1.tool_calls?.[0];
  check('langchain: bindTools gets a tool call', ai1.tool_calls?.length === 1 && call.name === 'get_weather', ai1.tool_calls);
  check('langchain: its args validate', call && validWeather(call.args), call);
  const result = await weather.invoke(call);
  const ai2 = await model.bindTools([weather]).invoke([...msgs, ai1, result]);
  const u1 = ai1.usage_metadata, u2 = ai2.usage_metadata;
  const cached2 = u2?.input_token_details?.cache_read ?? 0;
  check('langchain: the tool result is accepted', typeof ai2.content === 'string');
  check('langchain: step 2 reuses step 1 from the cache',
    cached2 >= reusable(u1.input_tokens + u1.output_tokens), { u1, u2 });

  const Person = z.object({ name: z.string().max(20), age: z.number().int(), likes: z.array(z.enum(['tea', 'coffee'])).max(2) });
  const out = await model.withStructuredOutput(Person, { method: 'jsonSchema' }).invoke('Describe a person.');
  check('langchain: withStructuredOutput parses', Person.safeParse(out).success, out);
}

async function aiSdkLoop() {
  const provider = createOpenAICompatible({ name: 'kvtier', baseURL: process.env.BASE + '/v1', apiKey: process.env.KEY, includeUsage: true });
  let ran = 0;
  const r = await generateText({
    model: provider('m'), system, prompt: 'What is the weather in Rome?', maxOutputTokens: 120, seed: 5, maxRetries: 0,
    tools: {
      get_weather: aiTool({
        description: 'The weather in a city',
        inputSchema: z.object({ city: z.string().max(16), unit: z.enum(['c', 'f']) }),
        execute: async (args) => { ran++; return JSON.parse(runWeather(args)); },
      }),
    },
    prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: 'required' } : { toolChoice: 'none' }),
    stopWhen: stepCountIs(2),
  });
  const s0 = r.steps[0], s1 = r.steps[1];
  check('ai sdk: two steps, the first a tool call that ran', r.steps.length === 2 && s0.toolCalls.length === 1 && ran === 1, r.steps.length);
  check('ai sdk: the call input validates', s0 && validWeather(s0.toolCalls[0]?.input), s0?.toolCalls);
  const c1 = s0.usage.inputTokens + s0.usage.outputTokens, cached = s1?.usage.inputTokenDetails?.cacheReadTokens ?? 0;
  check('ai sdk: step 2 reuses step 1 from the cache', cached >= reusable(c1), { c1, cached, u: s1?.usage });
}

async function main() {
  const client = new OpenAI({ baseURL: process.env.BASE + '/v1', apiKey: process.env.KEY, maxRetries: 0, timeout: 120000 });
  for (const [name, f] of [['openai', () => openaiLoop(client)], ['structured', () => structured(client)],
    ['langchain', langchainLoop], ['ai sdk', aiSdkLoop]]) {
    try { await f(); } catch (e) { check(name + ' ran without an exception', false, String(e && e.stack || e)); }
  }
  console.log(fails ? `${fails} failed` : 'all passed');
  process.exit(fails ? 1 : 0);
}
main();
