// `unmask-cli serve` driven by the official OpenAI Node SDK (openai@6, the
// last major that runs on Node 20), on the demo model. Run by
// tests/server/run-node-tests.sh, which starts the servers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { BASE, PORT, request, sseRequest, rawExchange, head, health, cliGenerate, rebuildCanvas } from './lib.mjs';

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'test', maxRetries: 0, timeout: 120000 });
const T = { timeout: 120000 };

// Small generations keep the suite at seconds: 32 positions, 16 steps, one block.
const GEN = 32;
const SMALL = { max_tokens: GEN, temperature: 0.7, unmask: { steps: 16, block_length: GEN } };
const CLI_SMALL = ['--gen-length', String(GEN), '--steps', '16', '--block-length', String(GEN), '--temperature', '0.7'];
const PROMPT = 'Once upon a time';
const chat = (seed, extra = {}) => ({
  model: 'demo', messages: [{ role: 'user', content: PROMPT }], seed, ...SMALL, ...extra,
  unmask: { ...SMALL.unmask, ...(extra.unmask ?? {}) },
});

test('models.list and models.retrieve', T, async () => {
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  assert.equal(list.length, 1);
  const m = list[0];
  assert.equal(typeof m.id, 'string');
  assert.equal(m.object, 'model');
  assert.equal(m.owned_by, 'unmask');
  assert.equal(typeof m.created, 'number');
  assert.equal(m.unmask.arch, 'llada');
  assert.equal(m.unmask.mask_id, 4092);
  assert.equal(m.unmask.eos_id, 4091);
  assert.equal(m.unmask.max_seq_len, 4096);
  for (const k of ['steps', 'block_length', 'remasking', 'cfg_scale', 'temperature'])
    assert.ok(k in m.unmask.defaults, `defaults.${k} missing`);
  assert.deepEqual(await client.models.retrieve(m.id), m);
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

test('chat, not streamed: usage, finish_reason, seed, same ids as unmask-cli generate --chat', T, async () => {
  const r = await client.chat.completions.create(chat(7, { unmask: { return_trace: true } }));
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 0 && r.usage.completion_tokens <= GEN);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.ok(r.unmask.steps_run > 0 && r.unmask.forward_passes >= r.unmask.steps_run);
  assert.equal(r.unmask.prompt_len, r.usage.prompt_tokens);

  // The exact schedule of the CLI for the same prompt, seed and options.
  const ref = await cliGenerate(['--chat', '--prompt', PROMPT, '--seed', '7', ...CLI_SMALL]);
  assert.deepEqual(r.unmask.token_ids, ref.ids);
  assert.equal(r.unmask.prompt_len, ref.prompt_ids.length);
  assert.equal(c.message.content, ref.text);
  // finish_reason and completion_tokens follow the first EOS/EOT in the canvas.
  const { eos_id: eosId, eot_id: eotId } = (await client.models.list()).data[0].unmask;
  const eos = ref.ids.findIndex((id) => id === eosId || id === eotId);
  assert.equal(c.finish_reason, eos >= 0 ? 'stop' : 'length');
  assert.equal(r.usage.completion_tokens, eos >= 0 ? eos : GEN);

  // Same seed → same answer; the seed matters.
  const again = await client.chat.completions.create(chat(7));
  assert.equal(again.choices[0].message.content, c.message.content);
  const others = await Promise.all([8, 9].map((s) => client.chat.completions.create(chat(s))));
  assert.ok(others.some((o) => o.choices[0].message.content !== c.message.content), 'the seed changes nothing');
});

test('completions: string prompt, token-id prompt, suffix', T, async () => {
  const ref = await cliGenerate(['--prompt', PROMPT, '--seed', '3', ...CLI_SMALL]);
  const body = { model: 'demo', seed: 3, ...SMALL, unmask: { ...SMALL.unmask, return_trace: true } };
  const r = await client.completions.create({ ...body, prompt: PROMPT });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].logprobs, null);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.equal(r.choices[0].text, ref.text);
  assert.deepEqual(r.unmask.token_ids, ref.ids);
  assert.equal(r.usage.prompt_tokens, ref.prompt_ids.length);

  // The same prompt as token ids gives the same answer.
  const byIds = await client.completions.create({ ...body, prompt: ref.prompt_ids });
  assert.equal(byIds.choices[0].text, r.choices[0].text);
  assert.deepEqual(byIds.unmask.token_ids, r.unmask.token_ids);

  // suffix: its tokens are fixed at the end of the canvas before step 0.
  const SUFFIX = ' The end.';
  const sfx = (await cliGenerate(['--prompt', SUFFIX, '--gen-length', '4', '--steps', '4', '--block-length', '4'])).prompt_ids;
  const s = await client.completions.create({ ...body, prompt: PROMPT, suffix: SUFFIX });
  assert.equal(typeof s.choices[0].text, 'string');
  const ids = s.unmask.token_ids;
  const at = s.unmask.unmasked_at_step;
  assert.ok(ids.length >= GEN);
  assert.deepEqual(ids.slice(ids.length - sfx.length), sfx, 'suffix tokens at the end of the canvas');
  assert.ok(at.slice(at.length - sfx.length).every((v) => v === -1), 'suffix fixed before step 0');
  assert.ok(at.slice(0, at.length - sfx.length).every((v) => v >= 0), 'the rest diffused');
  assert.ok(!s.choices[0].text.includes('\u{FFFD}\u{FFFD}'), s.choices[0].text);
});

test('stream with include_usage: role first, usage only on the last chunk (choices: [])', T, async () => {
  const plain = await client.chat.completions.create(chat(11));
  const stream = await client.chat.completions.create({ ...chat(11), stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  assert.ok(chunks.length >= 3);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, plain.usage);
  for (const ch of chunks.slice(0, -1)) {
    assert.equal(ch.object, 'chat.completion.chunk');
    assert.equal(ch.id, chunks[0].id);
    assert.equal(ch.usage, null);
    assert.equal(ch.choices.length, 1);
  }
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const fin = chunks.filter((ch) => ch.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.equal(fin[0].choices[0].finish_reason, plain.choices[0].finish_reason);
  const text = chunks.map((ch) => ch.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, plain.choices[0].message.content);
});

test('the SDK stream helper assembles the non-stream text (finalChatCompletion)', T, async () => {
  for (const seed of [21, 22]) {
    const plain = await client.chat.completions.create(chat(seed));
    const final = await client.chat.completions.stream(chat(seed)).finalChatCompletion();
    assert.equal(final.choices[0].message.content, plain.choices[0].message.content);
    assert.equal(final.choices[0].finish_reason, plain.choices[0].finish_reason);
    // With step chunks too: the extension's top-level object never leaks into the message.
    const steps = await client.chat.completions.stream(chat(seed, { unmask: { stream_steps: 'diff' } })).finalChatCompletion();
    assert.equal(steps.choices[0].message.content, plain.choices[0].message.content);
    assert.deepEqual(Object.keys(steps.choices[0].message).sort(), Object.keys(final.choices[0].message).sort());
  }
});

test('the SSE framing: data lines, [DONE] last, text/event-stream', T, async () => {
  const r = await sseRequest('/v1/chat/completions', { ...chat(5), stream: true });
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/event-stream/);
  assert.deepEqual(r.malformed, []);
  assert.ok(r.done, 'no data: [DONE]');
  assert.ok(r.raw.trimEnd().endsWith('data: [DONE]'));
  for (const c of r.chunks) assert.equal(typeof c.created, 'number');
  // Completions stream as text_completion objects.
  const t = await sseRequest('/v1/completions', { model: 'demo', prompt: PROMPT, seed: 5, ...SMALL, stream: true });
  assert.equal(t.status, 200);
  assert.ok(t.done);
  assert.ok(t.chunks.length > 0 && t.chunks.every((c) => c.object === 'text_completion'));
});

test('a stop string truncates streamed and plain answers alike', T, async () => {
  const ref = (await client.chat.completions.create(chat(31, { max_tokens: 48, unmask: { block_length: 48 } }))).choices[0].message.content;
  assert.ok(ref.length >= 12, `answer too short to cut: ${JSON.stringify(ref)}`);
  const k = Math.floor(ref.length / 2);
  const stop = ref.slice(k, k + 3);
  const expected = ref.slice(0, ref.indexOf(stop));
  const body = chat(31, { max_tokens: 48, unmask: { block_length: 48 } });
  const r = await client.chat.completions.create({ ...body, stop });
  assert.equal(r.choices[0].message.content, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const r2 = await client.chat.completions.create({ ...body, stop: ['\u0001never', stop] });
  assert.equal(r2.choices[0].message.content, expected);
  let streamed = '';
  const s = await client.chat.completions.create({ ...body, stop, stream: true });
  for await (const ch of s) streamed += ch.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, expected);
});

test('unmask extension: canvas rebuilt from stream_steps "diff" equals return_trace', T, async () => {
  const body = chat(41, { max_tokens: 64, unmask: { steps: 32, block_length: 32, return_trace: true } });
  const plain = await client.chat.completions.create(body);
  const tr = plain.unmask;
  assert.equal(tr.token_ids.length, 64);
  assert.equal(tr.unmasked_at_step.length, 64);
  assert.equal(tr.confidence.length, 64);

  for (const mode of ['diff', 'full']) {
    const chunks = [];
    const s = await client.chat.completions.create({ ...body, stream: true, unmask: { ...body.unmask, return_trace: false, stream_steps: mode } });
    for await (const ch of s) chunks.push(ch);
    for (const ch of chunks) if (ch.unmask) assert.equal(ch.choices[0].delta.unmask, undefined);
    const steps = chunks.filter((c) => c.unmask?.type === 'step').map((c) => c.unmask);
    assert.ok(steps.length > 0);
    assert.ok(steps[0].canvas, 'the first step chunk is a keyframe');
    if (mode === 'full') assert.ok(steps.every((u) => u.canvas && !u.changes));
    else assert.ok(steps.slice(1).every((u) => u.changes && !u.canvas));
    for (const u of steps) {
      assert.equal(u.canvas_len, 64);
      assert.equal(u.prompt_len, tr.prompt_len);
      assert.ok(u.first_step <= u.step && u.step < u.steps);
    }
    const { canvas, seenAt, done } = rebuildCanvas(chunks);
    assert.ok(done, 'no done object on the finish chunk');
    assert.equal(done.steps_run, tr.steps_run);
    assert.deepEqual(canvas.map((e) => e?.[0] ?? null), tr.token_ids, `${mode}: rebuilt ids`);
    for (let pos = 0; pos < 64; pos++) {
      const want = tr.unmasked_at_step[pos];
      const [lo, hi] = seenAt[pos];
      // A keyframe tells only "by this step"; a diff tells the step (or its merged range).
      assert.ok(want <= hi && (lo === -1 || want >= lo), `${mode}: position ${pos} committed at ${want}, seen in [${lo}, ${hi}]`);
      assert.ok(Number.isFinite(canvas[pos][2]));
    }
    const text = chunks.map((ch) => ch.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, plain.choices[0].message.content);
  }
});

test('400 → BadRequestError with param, validated before any 200', T, async () => {
  const bad = async (body, param) => {
    for (const stream of [false, true])
      await assert.rejects(client.chat.completions.create({ ...body, stream }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.status, 400);
        assert.equal(e.type, 'invalid_request_error');
        assert.match(String(e.param), param);
        return true;
      });
  };
  await bad(chat(1, { n: 2 }), /^n$/);
  await bad(chat(1, { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }), /^tools$/);
  await bad(chat(1, { unmask: { steps: 0 } }), /steps/);
  await bad(chat(1, { unmask: { steps: 1e12 } }), /steps/);
  await bad(chat(1, { max_tokens: 5000 }), /max_tokens|messages/);
  await bad({ ...chat(1), messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] }, /messages/);
  // 404 and 501 map to their classes too.
  await assert.rejects(client.embeddings.create({ model: 'demo', input: 'x' }), (e) => e.status === 501);
});

test('a key-protected server: AuthenticationError without the key, /health public', T, async () => {
  const url = process.env.UM_KEYED_URL;
  const key = process.env.UM_KEYED_KEY;
  assert.ok(url && key, 'the runner starts a keyed server');
  const anon = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'test', maxRetries: 0 });
  await assert.rejects(anon.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(anon.chat.completions.create(chat(1)), (e) => e instanceof OpenAI.AuthenticationError);
  const keyed = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
  const list = [];
  for await (const m of keyed.models.list()) list.push(m);
  assert.equal(list.length, 1);
  const r = await keyed.chat.completions.create(chat(1));
  assert.equal(typeof r.choices[0].message.content, 'string');
  const h = await fetch(`${url}/health`);
  assert.equal(h.status, 200);
  const x = await fetch(`${url}/v1/models`, { headers: { 'x-api-key': key } });
  assert.equal(x.status, 200);
  const wrong = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}x` } });
  assert.equal(wrong.status, 401);
  // A preflight is answered before any key check.
  const pre = await fetch(`${url}/v1/chat/completions`, {
    method: 'OPTIONS', headers: { origin: 'http://localhost:3000', 'access-control-request-method': 'POST' },
  });
  assert.notEqual(pre.status, 401);
  assert.ok(pre.status < 500);
});

test('loopback Host check, unknown paths, wrong methods', T, async () => {
  const evil = await rawExchange((s) => s.end(head('GET', '/v1/models').replace(`Host: 127.0.0.1:${PORT}`, 'Host: evil.example')));
  assert.equal(evil.status, 403);
  const nf = await request({ path: '/v1/nope' });
  assert.equal(nf.status, 404);
  assert.equal(nf.json.error.type, 'not_found_error');
  const m = await request({ method: 'DELETE', path: '/v1/models' });
  assert.equal(m.status, 405);
  assert.ok(await health());
});
