// Drives a live `kvtier serve` with the official `openai` npm package (v4):
// models, completions, chat, streaming (with usage), embeddings, a 400 and a 401.
// Usage: BASE=http://127.0.0.1:PORT KEY=... node openai_client.cjs  (openai on NODE_PATH)
const OpenAI = require('openai');

let fails = 0;
function check(what, cond) {
  if (cond) console.log('ok: ' + what);
  else { console.error('FAIL: ' + what); fails++; }
}

async function main() {
  const client = new OpenAI({ baseURL: process.env.BASE + '/v1', apiKey: process.env.KEY, maxRetries: 0, timeout: 60000 });
  const models = await client.models.list();
  check('models.list names the model', models.data.length === 1 && models.data[0].id === 'm');

  const prompt = 'Hello from the official openai client; this prompt is long enough to fill at least one cache block.';
  const c1 = await client.completions.create({ model: 'm', prompt, max_tokens: 5, temperature: 0 });
  check('completion text and usage', typeof c1.choices[0].text === 'string' && c1.usage.completion_tokens === 5);
  const c2 = await client.completions.create({ model: 'm', prompt, max_tokens: 5, temperature: 0 });
  check('repeat reports cached_tokens', c2.usage.prompt_tokens_details.cached_tokens > 0);
  check('repeat text identical', c2.choices[0].text === c1.choices[0].text);

  let streamed = '';
  const cs = await client.completions.create({ model: 'm', prompt, max_tokens: 5, temperature: 0, stream: true });
  for await (const ch of cs) streamed += ch.choices.length ? ch.choices[0].text : '';
  check('completion stream equals the plain text', streamed === c1.choices[0].text);

  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say something.' }];
  const chat = await client.chat.completions.create({ model: 'm', messages, max_tokens: 6, temperature: 0 });
  check('chat reply', chat.choices[0].message.role === 'assistant' && chat.usage.completion_tokens > 0);
  check('chat kvtier report', chat.kvtier && typeof chat.kvtier.cached_tokens_by_tier.T0 === 'number');

  const stream = await client.chat.completions.create({
    model: 'm', messages, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null;
  for await (const ch of stream) {
    if (ch.choices.length) {
      text += ch.choices[0].delta.content || '';
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    if (ch.usage) usage = ch.usage;
  }
  check('chat stream equals the plain reply', text === chat.choices[0].message.content);
  check('chat stream finish_reason', finish === chat.choices[0].finish_reason);
  check('chat stream usage chunk', usage && usage.completion_tokens === chat.usage.completion_tokens);

  // embeddings.create asks for base64 by default and decodes it to floats
  const texts = ['The first text to embed.', 'A second, different text.'];
  const em = await client.embeddings.create({ model: 'm', input: texts });
  const v0 = em.data[0].embedding;
  const norm = Math.sqrt(v0.reduce((a, x) => a + x * x, 0));
  check('embeddings.create: one vector of n_embd per input, L2 norm 1',
    em.data.length === 2 && v0.length === 64 && Math.abs(norm - 1) < 1e-4 && em.usage.prompt_tokens > 0);
  const ef = await client.embeddings.create({ model: 'm', input: texts[0], encoding_format: 'float' });
  check('embeddings.create: float and base64 give the same vector',
    ef.data[0].embedding.length === 64 && ef.data[0].embedding.every((x, i) => Math.fround(x) === v0[i]));

  try {
    await client.completions.create({ model: 'm', prompt: 'x', n: 3 });
    check('n=3 (above --parallel 2) rejected', false);
  } catch (e) {
    check('n=3 is a BadRequestError naming n', e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'n');
  }
  try {
    const bad = new OpenAI({ baseURL: process.env.BASE + '/v1', apiKey: 'wrong', maxRetries: 0 });
    await bad.models.list();
    check('wrong key rejected', false);
  } catch (e) {
    check('wrong key is an AuthenticationError', e instanceof OpenAI.AuthenticationError && e.status === 401);
  }
}

main().then(() => process.exit(fails ? 1 : 0), (e) => { console.error('FAIL: ' + (e && e.stack || e)); process.exit(1); });
