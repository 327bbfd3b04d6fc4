#!/usr/bin/env bash
# The server's figures (a benchmark, not a test), on 127.0.0.1:
#   tests/tools/bench-server.sh [BUILD_DIR] [MODEL] [REPEATS]
# 1. Overhead of `unmask-cli serve` over `unmask-cli generate` for the same
#    generation (prompt, seed, options): the client's round trip through
#    HTTP, not streamed and streamed, against the engine time generate
#    reports (its "seconds"); medians of REPEATS interleaved runs.
# 2. Time to the first chunk and to the first content chunk of a stream.
# 3. Stream size per step for unmask.stream_steps "diff" against "full" at
#    gen 256 / 128 steps.
# Defaults: build/, data/demo-model, 5 repeats. Needs node (≥ 18).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
model=${2:-data/demo-model}
repeats=${3:-5}
cli=$build/app/unmask-cli
[ -x "$cli" ] || { echo "no $cli: build first" >&2; exit 1; }
command -v node >/dev/null || { echo "needs node" >&2; exit 1; }

tmp=$(mktemp -d)
export XDG_CONFIG_HOME=$tmp/config XDG_CACHE_HOME=$tmp/cache
# The same threads for both sides.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
: >"$tmp/out"; : >"$tmp/err"   # before the child opens them: sed reads them at once
"$cli" serve --port 0 --model "$model" >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
url=
for _ in $(seq 600); do
  url=$(sed -n 's|^Listening on \(http://127\.0\.0\.1:[0-9]*\)/$|\1|p' "$tmp/out" | head -n 1)
  [ -n "$url" ] && break
  kill -0 $pid 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "server did not listen" >&2; exit 1; }

echo "model $model, $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS, $repeats repeats, $(date -u +%F)"
UM_SERVER_URL=$url UM_SERVER_PID=$pid UM_CLI=$cli UM_DEMO_MODEL=$model REPEATS=$repeats \
  node --input-type=module - <<'EOF'
import { request, postJson, sseRequest, cliGenerate, health, sleep } from './tests/server/node/lib.mjs';

const REPEATS = Number(process.env.REPEATS);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const ms = (x) => `${x.toFixed(1)} ms`;
for (let i = 0; i < 600 && !(await health().catch(() => false)); i++) await sleep(100);

const PROMPT = 'Once upon a time';
async function overhead(gen, steps, block) {
  const cliArgs = ['--prompt', PROMPT, '--seed', '1', '--gen-length', `${gen}`, '--steps', `${steps}`, '--block-length', `${block}`, '--temperature', '0.7'];
  const body = { prompt: PROMPT, seed: 1, max_tokens: gen, temperature: 0.7, unmask: { steps, block_length: block } };
  const cliS = [], plain = [], stream = [], diff = [], engine = [], http = [];
  let same = true;
  for (let r = 0; r < REPEATS + 1; r++) {
    const ref = await cliGenerate(cliArgs, 600000);
    let t = performance.now();
    const p = await postJson('/v1/completions', body, { timeoutMs: 600000 });
    const tPlain = performance.now() - t;
    t = performance.now();
    const s = await sseRequest('/v1/completions', { ...body, stream: true }, { timeoutMs: 600000 });
    const tStream = performance.now() - t;
    t = performance.now();
    await sseRequest('/v1/completions', { ...body, stream: true, unmask: { ...body.unmask, stream_steps: 'diff' } }, { timeoutMs: 600000 });
    const tDiff = performance.now() - t;
    same &&= p.json.choices[0].text === ref.text && s.chunks.map((c) => c.choices[0]?.text ?? '').join('') === ref.text;
    if (r === 0) continue; // warm-up
    cliS.push(ref.seconds * 1000); plain.push(tPlain); stream.push(tStream); diff.push(tDiff);
    engine.push(p.json.unmask.elapsed_ms);
    // What the server adds around its engine in the same request (HTTP,
    // JSON, tokenizing, queue hand-offs): immune to the machine's noise.
    http.push(tPlain - p.json.unmask.elapsed_ms);
  }
  console.log(`gen ${gen} / ${steps} steps / block ${block}: round trip − the server's engine time: median ${ms(median(http))}, ` +
    `max ${ms(Math.max(...http))} (${(median(http) / median(engine) * 100).toFixed(2)} % of its engine time)`);
  // Minima (the least disturbed runs) and medians; on a busy machine trust the minima.
  for (const [name, f] of [['min', (a) => Math.min(...a)], ['median', median]]) {
    const base = f(cliS);
    const pct = (x) => `${((f(x) / base - 1) * 100).toFixed(1)} %`;
    console.log(`gen ${gen} / ${steps} steps / block ${block}, ${name}: generate (engine) ${ms(base)}; server round trip: plain ${ms(f(plain))} (${pct(plain)}), ` +
      `stream ${ms(f(stream))} (${pct(stream)}), stream_steps diff ${ms(f(diff))} (${pct(diff)}); ` +
      `the server's engine time (elapsed_ms) ${ms(f(engine))} (${pct(engine)}); same text as generate: ${same}`);
  }
}

async function firstChunk(gen, steps, block) {
  const body = { prompt: PROMPT, seed: 1, max_tokens: gen, temperature: 0.7, stream: true, unmask: { steps, block_length: block } };
  const first = [], content = [], step = [], total = [];
  for (let r = 0; r < REPEATS; r++) {
    for (const mode of ['none', 'diff']) {
      const t0 = performance.now();
      let tFirst = NaN, tContent = NaN, tStep = NaN;
      await sseRequest('/v1/completions', { ...body, unmask: { ...body.unmask, stream_steps: mode } }, {
        timeoutMs: 600000,
        onEvent: (k, c) => {
          if (k !== 'chunk') return;
          const now = performance.now() - t0;
          if (Number.isNaN(tFirst)) tFirst = now;
          if (Number.isNaN(tContent) && c.choices[0]?.text) tContent = now;
          if (Number.isNaN(tStep) && c.unmask?.type === 'step') tStep = now;
        },
      });
      if (mode === 'none') { first.push(tFirst); content.push(tContent); total.push(performance.now() - t0); } else step.push(tStep);
    }
  }
  console.log(`gen ${gen} / ${steps} steps / block ${block}: first chunk ${ms(median(first))}, first content ${ms(median(content))}, ` +
    `first step chunk (diff) ${ms(median(step))}, whole stream ${ms(median(total))}`);
}

async function streamSize(gen, steps, block) {
  const body = { messages: [{ role: 'user', content: 'Write a long story.' }], seed: 1, max_tokens: gen, temperature: 0.7, stream: true, unmask: { steps, block_length: block } };
  const rows = [];
  for (const mode of ['none', 'diff', 'full']) {
    const r = await sseRequest('/v1/chat/completions', { ...body, unmask: { ...body.unmask, stream_steps: mode } }, { timeoutMs: 600000 });
    const stepChunks = r.chunks.filter((c) => c.unmask?.type === 'step');
    const stepBytes = stepChunks.reduce((n, c) => n + JSON.stringify(c).length + 8, 0);
    rows.push(`${mode}: ${(r.raw.length / 1024).toFixed(1)} KiB in all, ${stepChunks.length} step chunks` +
      (stepChunks.length ? `, ${(stepBytes / stepChunks.length).toFixed(0)} B per step chunk (first ${JSON.stringify(stepChunks[0]).length} B)` : ''));
  }
  const t = await postJson('/v1/chat/completions', { ...body, stream: false, unmask: { ...body.unmask, return_trace: true } }, { timeoutMs: 600000 });
  rows.push(`not streamed with return_trace: ${(t.text.length / 1024).toFixed(1)} KiB`);
  console.log(`stream size at gen ${gen} / ${steps} steps / block ${block}:\n  ${rows.join('\n  ')}`);
}

console.log('1. Overhead over unmask-cli generate:');
await overhead(128, 128, 32);
await overhead(256, 128, 32);
console.log('2. Time to first chunk (medians):');
await firstChunk(128, 128, 32);
await firstChunk(256, 128, 32);
await firstChunk(256, 128, 256);
console.log('3. Stream size:');
await streamSize(256, 128, 32);
EOF
