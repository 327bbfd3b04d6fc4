// Helpers shared by the server tests: plain HTTP, SSE and raw-socket
// clients on node's built-in modules only (the load test needs no npm
// package), the engine-info probe, and `unmask-cli generate` for reference
// answers. Everything talks to 127.0.0.1 only, with a timeout on every call.
import http from 'node:http';
import net from 'node:net';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';

// Set by tests/server/run-node-tests.sh.
export const BASE = process.env.UM_SERVER_URL;           // http://127.0.0.1:PORT
export const SERVER_PID = Number(process.env.UM_SERVER_PID || 0);
export const CLI = process.env.UM_CLI;
export const MODEL_DIR = process.env.UM_DEMO_MODEL;
if (!BASE || !/^http:\/\/127\.0\.0\.1:\d+$/.test(BASE))
  throw new Error(`UM_SERVER_URL must be http://127.0.0.1:PORT, not ${BASE}`);
export const PORT = Number(new URL(BASE).port);

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One HTTP exchange; by default on a connection of its own (agent: false)
// so that a test's faults cannot leak into the next one. Resolves with status,
// headers, body text and parsed JSON (null when it isn't JSON).
// `agent`: an http.Agent to keep connections alive, as SDK clients do.
export function request({ method = 'GET', path = '/', headers = {}, body, timeoutMs = 30000, signal, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined
      : Buffer.isBuffer(body) || typeof body === 'string' ? Buffer.from(body) : Buffer.from(JSON.stringify(body));
    const h = { ...headers };
    if (data !== undefined && !Object.keys(h).some((k) => k.toLowerCase() === 'content-type'))
      h['Content-Type'] = 'application/json';
    if (data !== undefined) h['Content-Length'] = data.length;
    const req = http.request({ host: '127.0.0.1', port: PORT, method, path, headers: h, agent, signal }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        clearTimeout(timer);
        const text = Buffer.concat(parts).toString('utf8');
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
      res.on('error', (e) => { clearTimeout(timer); reject(e); });
    });
    const timer = setTimeout(() => req.destroy(new Error(`${method} ${path}: no answer in ${timeoutMs} ms`)), timeoutMs);
    req.on('error', (e) => { clearTimeout(timer); reject(e); });
    req.end(data);
  });
}

export const postJson = (path, body, opts = {}) => request({ method: 'POST', path, body, ...opts });

// A streaming POST read as SSE. onEvent(kind, value, ctl) sees every event
// as it arrives (kind 'head' with the response, 'chunk' with the parsed
// JSON, 'done', 'comment');
// ctl.abort() drops the connection (the client disconnecting). Resolves
// with the status, headers, parsed chunks, the raw text, whether
// `data: [DONE]` came and whether we aborted.
// `signal` aborts it at any time, before the answer's head too.
export function sseRequest(path, body, { headers = {}, timeoutMs = 60000, onEvent, signal, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const out = { status: 0, headers: {}, chunks: [], raw: '', done: false, aborted: false, malformed: [] };
    let settled = false;
    const finish = (err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) reject(err); else resolve(out);
    };
    const req = http.request({
      host: '127.0.0.1', port: PORT, method: 'POST', path, agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': data.length, Accept: 'text/event-stream', ...headers },
    }, (res) => {
      out.status = res.statusCode;
      out.headers = res.headers;
      let buf = '';
      const ctl = { abort() { out.aborted = true; req.destroy(); finish(); } };
      onEvent?.('head', res, ctl);
      res.setEncoding('utf8');
      res.on('data', (d) => {
        out.raw += d;
        if (res.statusCode !== 200) return;
        buf += d;
        let i;
        while (!settled && (i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (ev.startsWith(':')) { onEvent?.('comment', ev, ctl); continue; }
          if (!ev.startsWith('data: ') || ev.includes('\n')) { out.malformed.push(ev); continue; }
          const payload = ev.slice(6);
          if (payload === '[DONE]') { out.done = true; onEvent?.('done', null, ctl); continue; }
          let chunk;
          try { chunk = JSON.parse(payload); } catch { out.malformed.push(ev); continue; }
          out.chunks.push(chunk);
          onEvent?.('chunk', chunk, ctl);
        }
      });
      res.on('end', () => { if (buf.length) out.malformed.push(buf); finish(); });
      res.on('error', (e) => (out.aborted ? finish() : finish(e)));
      res.on('close', () => finish());
    });
    const timer = setTimeout(() => { req.destroy(); finish(new Error(`${path}: stream not finished in ${timeoutMs} ms`)); }, timeoutMs);
    signal?.addEventListener('abort', () => { out.aborted = true; req.destroy(); finish(); }, { once: true });
    req.on('error', (e) => (out.aborted ? finish() : finish(e)));
    req.end(data);
  });
}

// Raw bytes over one TCP connection. `send(sock)` writes what it wants
// (possibly in pieces, possibly never finishing); we collect what the
// server answers until it closes, the response is complete, or timeoutMs.
// Resolves { status, text, closed, timedOut }.
export function rawExchange(send, { timeoutMs = 10000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port: PORT });
    let got = Buffer.alloc(0);
    let settled = false;
    const done = (extra) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      const text = got.toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      sock.destroy();
      resolve({ status: m ? Number(m[1]) : 0, text, closed: false, timedOut: false, ...extra });
    };
    const timer = setTimeout(() => done({ timedOut: true }), timeoutMs);
    sock.on('data', (d) => {
      got = Buffer.concat([got, d]);
      const text = got.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return;
      const m = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, end));
      if (m && got.length >= end + 4 + Number(m[1])) done();
      else if (/\r\ntransfer-encoding:\s*chunked/i.test(text.slice(0, end)) && text.endsWith('\r\n0\r\n\r\n')) done();
    });
    sock.on('close', () => done({ closed: true }));
    // A server that answers early and closes makes our remaining writes fail: that is fine.
    sock.on('error', () => {});
    sock.on('connect', () => send(sock));
  });
}

// A request head for rawExchange.
export function head(method, path, headers = {}) {
  let s = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${PORT}\r\n`;
  for (const [k, v] of Object.entries(headers)) s += `${k}: ${v}\r\n`;
  return s + '\r\n';
}

export async function health() {
  const r = await request({ path: '/health', timeoutMs: 5000 });
  return r.status === 200 && r.json?.status === 'ok';
}

export const info = async () => (await request({ path: '/v1/unmask/info', timeoutMs: 5000 })).json;

// What /v1/unmask/info says about the engine's one slot and its FIFO.
export function queueState(i) {
  const q = i?.queue ?? {};
  return { running: Boolean(q.running), waiting: Number(q.waiting ?? 0) };
}

// Polls /v1/unmask/info every few ms until pred(state) holds; resolves
// with the ms it took, or rejects after timeoutMs.
export async function waitForQueue(pred, timeoutMs = 10000, everyMs = 2) {
  const t0 = performance.now();
  for (;;) {
    const s = queueState(await info());
    if (pred(s)) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs) throw new Error(`engine state ${JSON.stringify(s)} after ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

// The server's resident memory in KiB (Linux /proc).
export function rssKiB(pid = SERVER_PID) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

// `unmask-cli generate --json` with the same model, for reference ids.
export function cliGenerate(args, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    execFile(CLI, ['generate', '--model', MODEL_DIR, '--json', ...args], { timeout: timeoutMs, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`unmask-cli generate ${args.join(' ')}: ${err.message}\n${stderr}`));
        else resolve(JSON.parse(stdout));
      });
  });
}

// The canvas a client rebuilds from stream_steps chunks: the keyframe
// ("canvas") and then the diffs ("changes"). Returns per-position
// [id, piece, conf] (or null), the step at which each position was first
// seen ([first_step, step] of its chunk), and the step chunks' JSON sizes.
export function rebuildCanvas(chunks) {
  let canvas = null;
  let seenAt = null;
  const sizes = [];
  let done = null;
  for (const c of chunks) {
    const u = c.unmask;
    if (!u) continue;
    if (u.type === 'done') { done = u; continue; }
    if (u.type !== 'step') throw new Error(`unknown unmask chunk type ${u.type}`);
    sizes.push(JSON.stringify(c).length);
    if (u.canvas) {
      if (u.canvas.length !== u.canvas_len) throw new Error(`keyframe of ${u.canvas.length} for canvas_len ${u.canvas_len}`);
      const first = canvas === null;
      if (first) { canvas = new Array(u.canvas_len).fill(null); seenAt = new Array(u.canvas_len).fill(null); }
      u.canvas.forEach((e, pos) => {
        if (e === null) {
          if (canvas[pos] !== null) throw new Error(`position ${pos} remasked at step ${u.step}`);
          return;
        }
        if (canvas[pos] !== null && canvas[pos][0] !== e[0]) throw new Error(`position ${pos} changed at step ${u.step}`);
        if (canvas[pos] === null) { canvas[pos] = e; seenAt[pos] = [first ? -1 : u.first_step, u.step]; }
      });
    } else {
      if (canvas === null) throw new Error('a diff before any keyframe');
      for (const [pos, id, piece, conf] of u.changes) {
        if (pos < 0 || pos >= canvas.length) throw new Error(`change at ${pos} outside the canvas`);
        if (canvas[pos] !== null) throw new Error(`position ${pos} committed twice (step ${u.step})`);
        canvas[pos] = [id, piece, conf];
        seenAt[pos] = [u.first_step, u.step];
      }
    }
  }
  return { canvas, seenAt, sizes, done };
}
