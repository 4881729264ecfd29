/**
 * bench/signaling: how long SIP signaling and /readyz wait while the REST API is saturated
 * (REST load once stalled SIP OPTIONS for up to a second). Target: OPTIONS and INVITE->100 p99 under 20 ms
 * under REST saturation; INVITE->180 is measured beside it.
 *
 *   autocannon (own process) --HTTP--> daemon (own process) <--UDP-- SIP prober (this process)
 *     GET /v1/agents?limit=100, BENCH_SIGNALING_CONNECTIONS (100)    OPTIONS and INVITE, each at
 *     keep-alive connections, closed loop                            BENCH_SIGNALING_RATE (20)/s
 *                                                                 <--HTTP-- GET /readyz, same rate
 *
 * The daemon runs as an operator starts it (`node --single-threaded-gc bin/callbridge.js start`,
 * SIP and HTTP on 127.0.0.1), with 100 agents in its organization and an ACL trunk for
 * 127.0.0.1/32 routing NUMBER to the first of them. Probes, sent evenly spaced from this process
 * (open loop: a slow answer does not delay the next probe):
 *   - OPTIONS out of dialog: sent -> 200 received.
 *   - INVITE with an SDP offer to NUMBER: sent -> 100 Trying received (sent once the INVITE is
 *     authenticated, routed and admitted, on the main thread) and sent -> 180 Ringing received
 *     (after the RTP ports, which come from a media thread). The prober then CANCELs and ACKs the final response (487,
 *     or the 503 of the bridge: the daemon's bridge.upstream_url points at a port where nothing
 *     listens, so no voice session starts; bench/session and bench/bridge measure those).
 *   - GET /readyz over keep-alive sockets: sent -> body received.
 * A probe unanswered after PROBE_TIMEOUT_MS counts as lost (Infinity in the percentiles).
 *
 * Two daemons, measured in turns: callbridge with its defaults, and the same with
 * http.fair_share_ms 0 ("unscheduled": REST requests run as they arrive, as before the fair
 * share). For each, BENCH_SIGNALING_ROUNDS (2) rounds of three slices of BENCH_SIGNALING_SECS (6)
 * s: probes with no REST load (the baseline of the latency figures), probes under REST saturation
 * (autocannon started 1 s before the probes, so the load is at full speed) and REST alone. The
 * REST throughput figure is autocannon's completed requests per second in the loaded slices, its
 * baseline the unscheduled daemon's (a fair share that starved REST would show there).
 * BENCH_SIGNALING_COMPARE=0 measures the first daemon only (REST throughput baseline: REST alone).
 *
 * A busy machine: the prober's timestamps are taken when this process reads an answer, so this
 * process runs at nice BENCH_SIGNALING_PROBER_NICE (-10; root) while the daemons and autocannon
 * stay at 0, and the table shows the share of each slice the daemon's main thread spent waiting
 * for a CPU (schedstat): under saturation it is always runnable, and any wait for a CPU is a
 * wait for the probes too, which no scheduling inside the daemon removes.
 * BENCH_SIGNALING_DAEMON_NICE=<n> (a diagnostic) sets both daemons' main threads to nice n.
 *
 * Webhook flood (the first daemon only, BENCH_SIGNALING_FLOOD=0 skips it): a fourth slice per round
 * in which BENCH_SIGNALING_FLOOD_CONNECTIONS (8) concurrent autocannon clients (own process, closed
 * loop) POST forged carrier voice webhooks to /v1/telco/twilio/voice: 1 MB form bodies of ~110,000
 * parameters with a made-up X-Twilio-Signature, what anyone can send before a signature is checked
 * (such a flood once took OPTIONS p99 from 4.8 ms to hundreds of ms). Target: OPTIONS p99 under
 * 20 ms during the flood, against the same run's idle figure as baseline (telco.webhook_body_limit
 * answers 413 on the Content-Length; docs/telco.md "Limits").
 *
 * BENCH_SIGNALING_DAEMON_ENV='K=V,K=V' adds environment variables to both daemons (e.g.
 * CALLBRIDGE_HTTP_FAIR_SHARE_MS=4 for the first; the second keeps 0). Loopback only; every child
 * is stopped by PID in a finally.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { cpus, getPriority, loadavg, setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { freeSipPort } from '../test/interop/sipp.ts';
import { cpuSeconds, mainThreadCpuSeconds, ROOT, startChild, stopChild, waitUntil, type Child } from './lib/child.ts';
import { envNumber } from './lib/env.ts';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';

const HOST = '127.0.0.1';
const NUMBER = '+15550002000';
const AGENTS = 100;
const PROBE_TIMEOUT_MS = 5000;
const TARGET_MS = 20;
const AUTOCANNON = createRequire(import.meta.url).resolve('autocannon/autocannon.js');

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Nearest-rank percentile of ascending samples. */
function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

// ---------------------------------------------------------------------------------------------
// The prober: raw SIP over UDP and GET /readyz, open loop.

type Kind = 'options' | 'invite' | 'readyz';

interface Samples {
  /** Round trips in ms, one per probe answered. */
  options: number[];
  /** INVITE -> its first response (the 100 Trying). */
  invite: number[];
  /** INVITE -> 180 Ringing. */
  ringing: number[];
  readyz: number[];
  /** Probes with no answer within PROBE_TIMEOUT_MS. */
  lost: Record<Kind, number>;
  /** Final responses to the INVITEs (status -> count). */
  inviteFinal: Map<number, number>;
}

interface Pending {
  kind: 'options' | 'invite';
  sentAt: number;
  /** INVITE: what CANCEL, ACK and BYE repeat. */
  via?: string;
  from?: string;
  to?: string;
  answered?: boolean;
  rang?: boolean;
  cancelled?: boolean;
}

/** First header of that name (compact forms too), without the name. */
function header(text: string, long: string, compact?: string): string | undefined {
  const re = new RegExp(`^(?:${long}${compact ? `|${compact}` : ''})[ \\t]*:[ \\t]*(.*)$`, 'im');
  return re.exec(text)?.[1]?.trim();
}

class Prober {
  readonly #sock: Socket;
  readonly #sipPort: number;
  readonly #readyzUrl: URL;
  readonly #agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
  readonly #pending = new Map<string, Pending>();
  #samples: Samples = Prober.empty();
  #timers: NodeJS.Timeout[] = [];
  #seq = 0;
  readonly #localPort: number;
  #readyzOpen = 0;

  private constructor(sock: Socket, sipPort: number, readyzUrl: string) {
    this.#sock = sock;
    this.#sipPort = sipPort;
    this.#readyzUrl = new URL(readyzUrl);
    this.#localPort = sock.address().port;
    sock.on('message', (buf) => this.#onMessage(buf.toString('latin1')));
  }

  static empty(): Samples {
    return { options: [], invite: [], ringing: [], readyz: [], lost: { options: 0, invite: 0, readyz: 0 }, inviteFinal: new Map() };
  }

  static async open(sipPort: number, readyzUrl: string): Promise<Prober> {
    const sock = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      sock.once('error', reject);
      sock.bind(0, HOST, () => resolve());
    });
    return new Prober(sock, sipPort, readyzUrl);
  }

  /** Starts probing at `rate` per second of each kind, the three kinds spread over the period. */
  start(rate: number): void {
    this.#samples = Prober.empty();
    const period = 1000 / rate;
    const every = (offset: number, fn: () => void) => {
      const t = setTimeout(() => {
        fn();
        this.#timers.push(setInterval(fn, period));
      }, offset);
      this.#timers.push(t);
    };
    every(0, () => this.#options());
    every(period / 3, () => this.#invite());
    every((2 * period) / 3, () => this.#readyz());
  }

  /** Stops sending, waits for the answers still due (PROBE_TIMEOUT_MS at most), returns the samples. */
  async stop(): Promise<Samples> {
    for (const t of this.#timers) clearTimeout(t);
    this.#timers = [];
    const deadline = performance.now() + PROBE_TIMEOUT_MS;
    while (performance.now() < deadline && ([...this.#pending.values()].some((p) => !p.answered) || this.#readyzOpen > 0)) await sleep(20);
    const s = this.#samples;
    for (const [id, p] of this.#pending) {
      if (!p.answered) s.lost[p.kind]++;
      // Calls in progress get their CANCEL; anything left is forgotten after this slice.
      if (p.kind === 'invite' && !p.cancelled) this.#cancel(id, p);
    }
    this.#pending.clear();
    s.readyz.push(...Array<number>(this.#readyzOpen).fill(Number.POSITIVE_INFINITY));
    s.lost.readyz += this.#readyzOpen;
    return s;
  }

  async close(): Promise<void> {
    for (const t of this.#timers) clearTimeout(t);
    this.#agent.destroy();
    await new Promise<void>((resolve) => this.#sock.close(() => resolve()));
  }

  #send(text: string): void {
    this.#sock.send(text, this.#sipPort, HOST);
  }

  #common(kind: string): { n: number; via: string; from: string; callId: string } {
    const n = ++this.#seq;
    return {
      n,
      via: `SIP/2.0/UDP ${HOST}:${this.#localPort};rport;branch=z9hG4bK${kind}${n}x${randomBytes(4).toString('hex')}`,
      from: `<sip:prober@${HOST}:${this.#localPort}>;tag=${randomBytes(4).toString('hex')}`,
      callId: `${kind}-${n}-${randomBytes(6).toString('hex')}@${HOST}`,
    };
  }

  #options(): void {
    const { via, from, callId } = this.#common('o');
    const uri = `sip:probe@${HOST}:${this.#sipPort}`;
    const msg = [`OPTIONS ${uri} SIP/2.0`, `Via: ${via}`, `From: ${from}`, `To: <${uri}>`, `Call-ID: ${callId}`, 'CSeq: 1 OPTIONS', 'Max-Forwards: 70', 'Accept: application/sdp', 'Content-Length: 0', '', ''].join('\r\n');
    this.#pending.set(callId, { kind: 'options', sentAt: performance.now() });
    this.#send(msg);
  }

  #inviteUri(): string {
    return `sip:${NUMBER}@${HOST}:${this.#sipPort}`;
  }

  #invite(): void {
    const { via, from, callId } = this.#common('i');
    const uri = this.#inviteUri();
    const to = `<${uri}>`;
    const sdp = ['v=0', `o=- 1 1 IN IP4 ${HOST}`, 's=-', `c=IN IP4 ${HOST}`, 't=0 0', 'm=audio 4000 RTP/AVP 0 8', 'a=rtpmap:0 PCMU/8000', 'a=rtpmap:8 PCMA/8000', 'a=sendrecv', ''].join('\r\n');
    const msg = [
      `INVITE ${uri} SIP/2.0`,
      `Via: ${via}`,
      `From: ${from}`,
      `To: ${to}`,
      `Call-ID: ${callId}`,
      'CSeq: 1 INVITE',
      `Contact: <sip:prober@${HOST}:${this.#localPort}>`,
      'Max-Forwards: 70',
      'Content-Type: application/sdp',
      `Content-Length: ${Buffer.byteLength(sdp)}`,
      '',
      sdp,
    ].join('\r\n');
    this.#pending.set(callId, { kind: 'invite', sentAt: performance.now(), via, from, to });
    this.#send(msg);
  }

  #cancel(callId: string, p: Pending): void {
    p.cancelled = true;
    this.#send([`CANCEL ${this.#inviteUri()} SIP/2.0`, `Via: ${p.via}`, `From: ${p.from}`, `To: ${p.to}`, `Call-ID: ${callId}`, 'CSeq: 1 CANCEL', 'Max-Forwards: 70', 'Content-Length: 0', '', ''].join('\r\n'));
  }

  /** ACK of a final response to the INVITE: same branch for a non-2xx (17.1.1.3), a new one for a 2xx (13.2.2.4). */
  #ack(callId: string, p: Pending, toWithTag: string, twoXx: boolean): void {
    const via = twoXx ? this.#common('a').via : p.via;
    this.#send([`ACK ${this.#inviteUri()} SIP/2.0`, `Via: ${via}`, `From: ${p.from}`, `To: ${toWithTag}`, `Call-ID: ${callId}`, 'CSeq: 1 ACK', 'Max-Forwards: 70', 'Content-Length: 0', '', ''].join('\r\n'));
  }

  #bye(callId: string, p: Pending, toWithTag: string): void {
    const { via } = this.#common('b');
    this.#send([`BYE ${this.#inviteUri()} SIP/2.0`, `Via: ${via}`, `From: ${p.from}`, `To: ${toWithTag}`, `Call-ID: ${callId}`, 'CSeq: 2 BYE', 'Max-Forwards: 70', 'Content-Length: 0', '', ''].join('\r\n'));
  }

  #onMessage(text: string): void {
    const now = performance.now();
    const status = /^SIP\/2\.0 (\d{3})/.exec(text)?.[1];
    if (status === undefined) return; // a request (a BYE of ours crossing, an in-dialog request): ignored
    const code = Number(status);
    const callId = header(text, 'Call-ID', 'i');
    const cseq = header(text, 'CSeq');
    if (callId === undefined || cseq === undefined) return;
    const p = this.#pending.get(callId);
    if (!p) return;
    const method = cseq.split(/\s+/)[1];
    if (p.kind === 'options') {
      if (method !== 'OPTIONS' || p.answered) return;
      p.answered = true;
      this.#samples.options.push(now - p.sentAt);
      this.#pending.delete(callId);
      return;
    }
    if (method !== 'INVITE') return; // 200 to our CANCEL or BYE
    if (!p.answered) {
      p.answered = true;
      this.#samples.invite.push(now - p.sentAt);
    }
    if (code === 180 && !p.rang) {
      p.rang = true;
      this.#samples.ringing.push(now - p.sentAt);
    }
    const to = header(text, 'To', 't') ?? p.to ?? '';
    if (code < 200) {
      // CANCEL once it rings (a CANCEL after the 100 alone could end it before the 180 it times).
      if (code >= 180 && !p.cancelled) this.#cancel(callId, p);
      return;
    }
    this.#samples.inviteFinal.set(code, (this.#samples.inviteFinal.get(code) ?? 0) + 1);
    this.#ack(callId, p, to, code === 200);
    if (code === 200) this.#bye(callId, p, to);
    this.#pending.delete(callId);
  }

  #readyz(): void {
    const t0 = performance.now();
    this.#readyzOpen++;
    let done = false;
    const end = (ok: boolean) => {
      if (done) return;
      done = true;
      this.#readyzOpen--;
      if (ok) this.#samples.readyz.push(performance.now() - t0);
      else {
        this.#samples.readyz.push(Number.POSITIVE_INFINITY);
        this.#samples.lost.readyz++;
      }
    };
    const req = http.get({ agent: this.#agent, host: this.#readyzUrl.hostname, port: this.#readyzUrl.port, path: this.#readyzUrl.pathname }, (res) => {
      res.resume();
      res.once('end', () => end(res.statusCode === 200));
      res.once('error', () => end(false));
    });
    req.setTimeout(PROBE_TIMEOUT_MS, () => req.destroy(new Error('timeout')));
    req.once('error', () => end(false));
  }
}

/**
 * Seconds a thread has spent runnable but waiting for a CPU (second field of Linux
 * /proc/<pid>/task/<tid>/schedstat, ns); NaN without it.
 */
function runQueueWaitSeconds(pid: number | undefined, tid = pid): number {
  if (pid === undefined) return Number.NaN;
  try {
    return Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[1]) / 1e9;
  } catch {
    return Number.NaN;
  }
}

// ---------------------------------------------------------------------------------------------
// REST load: the autocannon CLI in its own process, so that its work does not delay the prober.

interface LoadResult {
  rps: number;
  completed: number;
  seconds: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
}

interface Load {
  proc: ChildProcess;
  result: Promise<LoadResult>;
  stop(): void;
}

function startLoad(url: string, key: string, connections: number, seconds: number): Load {
  return startAutocannon([AUTOCANNON, '-c', String(connections), '-d', String(seconds), '-p', '1', '-j', '-H', `authorization=Bearer ${key}`, url]);
}

/** Forged voice webhooks: `bodyFile` POSTed form-encoded with a made-up signature, closed loop. */
function startWebhookFlood(url: string, bodyFile: string, connections: number, seconds: number): Load {
  return startAutocannon([
    AUTOCANNON, '-c', String(connections), '-d', String(seconds), '-p', '1', '-j', '-m', 'POST', '-i', bodyFile,
    '-H', 'content-type=application/x-www-form-urlencoded', '-H', 'x-twilio-signature=Zm9yZ2VkLXNpZ25hdHVyZQ==', url,
  ]);
}

/**
 * A forged webhook body of `bytes` bytes: Twilio's parameter names, then filler parameters
 * (`p<n>=1`), ~9 bytes each: 1 MB is ~110,000 parameters.
 */
function forgedWebhookBody(bytes: number): string {
  const parts = ['AccountSid=AC' + 'f'.repeat(32), 'CallSid=CA' + 'e'.repeat(32), 'From=%2B15559990000', 'To=%2B15550002000', 'CallStatus=ringing', 'Direction=inbound'];
  let size = parts.join('&').length;
  for (let i = 0; size < bytes; i++) {
    const p = `p${i}=1`;
    parts.push(p);
    size += p.length + 1;
  }
  return parts.join('&').slice(0, bytes);
}

function startAutocannon(args: string[]): Load {
  const proc = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  // The load runs at the ordinary priority, whatever the prober's (BENCH_SIGNALING_PROBER_NICE).
  if (proc.pid !== undefined) {
    try {
      setPriority(proc.pid, 0);
    } catch {
      // not allowed to lower it back: the prober's priority was not raised either
    }
  }
  let out = '';
  let err = '';
  proc.stdout?.setEncoding('utf8').on('data', (d: string) => (out += d));
  proc.stderr?.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-4000)));
  const result = new Promise<LoadResult>((resolve, reject) => {
    proc.once('error', reject);
    proc.once('close', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      try {
        const r = JSON.parse(line) as {
          requests: { total: number; average: number };
          latency: { p50: number; p99: number };
          duration: number;
          non2xx: number;
          errors: number;
          timeouts: number;
        };
        resolve({ rps: r.requests.total / r.duration, completed: r.requests.total, seconds: r.duration, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors + r.timeouts });
      } catch {
        reject(new Error(`autocannon exited ${code} without its JSON result:\n${out.slice(-2000)}\n${err}`));
      }
    });
  });
  const stop = () => {
    if (proc.exitCode === null && proc.signalCode === null && proc.pid !== undefined) process.kill(proc.pid, 'SIGKILL');
  };
  return { proc, result, stop };
}

// ---------------------------------------------------------------------------------------------

interface Slice {
  label: 'idle' | 'loaded' | 'rest only' | 'webhook flood';
  samples: Samples;
  load?: LoadResult;
  /** The daemon's main-thread CPU share during the slice (1 = one core). */
  mainCpu: number;
  /** The daemon's whole-process CPU share during the slice. */
  procCpu: number;
  /** Share of the slice the daemon's main thread spent runnable but waiting for a CPU (busy machine). */
  mainWait: number;
}

function merge(list: Samples[]): Samples {
  const out = Prober.empty();
  for (const s of list) {
    out.options.push(...s.options);
    out.invite.push(...s.invite);
    out.ringing.push(...s.ringing);
    out.readyz.push(...s.readyz);
    for (const k of ['options', 'invite', 'readyz'] as const) out.lost[k] += s.lost[k];
    for (const [c, n] of s.inviteFinal) out.inviteFinal.set(c, (out.inviteFinal.get(c) ?? 0) + n);
  }
  for (const k of ['options', 'invite', 'ringing', 'readyz'] as const) out[k].sort((a, b) => a - b);
  return out;
}

function daemonEnvExtra(): Record<string, string> {
  const raw = process.env.BENCH_SIGNALING_DAEMON_ENV ?? '';
  const env: Record<string, string> = {};
  for (const pair of raw.split(',').map((s) => s.trim()).filter(Boolean)) {
    const i = pair.indexOf('=');
    if (i <= 0) throw new RangeError(`BENCH_SIGNALING_DAEMON_ENV: "${pair}" is not K=V`);
    env[pair.slice(0, i)] = pair.slice(i + 1);
  }
  return env;
}

/** One daemon under test, ready: agents, trunk, prober. */
interface Target {
  label: string;
  daemon: Child;
  base: string;
  key: string;
  listUrl: string;
  prober: Prober;
  slices: Slice[];
}

async function startTarget(label: string, env: Record<string, string>, dataDir: string): Promise<Target> {
  const port = await freeSipPort();
  const sipPort = await freeSipPort();
  // Nothing listens there: each routed call is refused (503) as soon as the bridge fails to open
  // its voice session, right after the 180. The bench measures signaling; starting a voice
  // session per call (tens of ms of main-thread work, bench/session and bench/bridge measure
  // it) would be most of what the probes wait for, loaded or not.
  const nowhere = await freeSipPort();
  const daemon = startChild(label, ['--single-threaded-gc', join(ROOT, 'bin', 'callbridge.js'), 'start'], {
    CALLBRIDGE_DATA_DIR: dataDir,
    CALLBRIDGE_HTTP_HOST: HOST,
    CALLBRIDGE_HTTP_PORT: String(port),
    CALLBRIDGE_SIP_HOST: HOST,
    CALLBRIDGE_SIP_PORT: String(sipPort),
    CALLBRIDGE_LOG_LEVEL: 'fatal',
    CALLBRIDGE_BRIDGE_UPSTREAM_URL: `http://${HOST}:${nowhere}`,
    CALLBRIDGE_BRIDGE_UPSTREAM_API_KEY: 'bench-signaling-nowhere',
    ...env,
  });
  const nice = process.env.BENCH_SIGNALING_DAEMON_NICE;
  if (nice !== undefined && nice !== '' && daemon.proc.pid !== undefined) {
    // The main thread (its TID is the PID) and the threads it starts from now on.
    setPriority(daemon.proc.pid, Number(nice));
  }
  const base = `http://${HOST}:${port}`;
  await waitUntil(daemon, 'GET /readyz 200', 30_000, async () => (await fetch(`${base}/readyz`)).status === 200);
  const key = readFileSync(join(dataDir, 'initial-api-key'), 'utf8').trim();
  const post = async (path: string, body: unknown): Promise<{ id: string }> => {
    const res = await fetch(base + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await res.text();
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as { id: string };
  };
  const agents: string[] = [];
  for (let i = 0; i < AGENTS; i++) agents.push((await post('/v1/agents', { name: `bench-signaling-${i}` })).id);
  const trunk = await post('/v1/sip-trunks', { pbx: 'generic', name: 'bench signaling', inbound_auth_type: 'acl', inbound_acl: [`${HOST}/32`] });
  await post(`/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agents[0], alternate_number: NUMBER });
  const listUrl = `${base}/v1/agents?limit=100`;
  const page = await fetch(listUrl, { headers: { authorization: `Bearer ${key}` } });
  const pageBody = await page.text();
  if (page.status !== 200 || (JSON.parse(pageBody) as unknown[]).length !== AGENTS) throw new Error(`GET /v1/agents?limit=100: ${page.status}, ${pageBody.slice(0, 200)}`);
  process.stdout.write(`${label}: pid ${daemon.proc.pid}, HTTP ${base}, SIP udp:${HOST}:${sipPort}${Object.keys(env).length > 0 ? `, env ${JSON.stringify(env)}` : ''}; the agent page is ${Buffer.byteLength(pageBody)} bytes\n`);
  const prober = await Prober.open(sipPort, `${base}/readyz`);
  return { label, daemon, base, key, listUrl, prober, slices: [] };
}

/** What a target's slices add up to. */
function summarize(t: Target) {
  const idle = merge(t.slices.filter((s) => s.label === 'idle').map((s) => s.samples));
  const loaded = merge(t.slices.filter((s) => s.label === 'loaded').map((s) => s.samples));
  const sumLoad = (label: Slice['label']) => {
    const l = t.slices.filter((s) => s.label === label).flatMap((s) => (s.load ? [s.load] : []));
    const completed = l.reduce((a, r) => a + r.completed, 0);
    const seconds = l.reduce((a, r) => a + r.seconds, 0);
    return { rps: completed / seconds, bad: l.reduce((a, r) => a + r.non2xx + r.errors, 0), p99: Math.max(...l.map((r) => r.p99)) };
  };
  const cpu = (label: Slice['label']) => {
    const l = t.slices.filter((s) => s.label === label);
    const avg = (f: (s: Slice) => number) => formatValue(l.reduce((a, s) => a + f(s), 0) / l.length);
    return `${avg((s) => s.procCpu)} / ${avg((s) => s.mainCpu)} / ${avg((s) => s.mainWait)}`;
  };
  const flood = merge(t.slices.filter((s) => s.label === 'webhook flood').map((s) => s.samples));
  return { idle, loaded, flood, flooded: t.slices.some((s) => s.label === 'webhook flood'), restLoaded: sumLoad('loaded'), restOnly: sumLoad('rest only'), floodLoad: sumLoad('webhook flood'), cpu };
}

export async function run(): Promise<void> {
  const secs = envNumber('BENCH_SIGNALING_SECS', 6);
  const rounds = Math.round(envNumber('BENCH_SIGNALING_ROUNDS', 2));
  const connections = Math.round(envNumber('BENCH_SIGNALING_CONNECTIONS', 100));
  const rate = envNumber('BENCH_SIGNALING_RATE', 20);
  const compare = process.env.BENCH_SIGNALING_COMPARE !== '0';
  const flood = process.env.BENCH_SIGNALING_FLOOD !== '0';
  const floodConnections = Math.round(envNumber('BENCH_SIGNALING_FLOOD_CONNECTIONS', 8));
  const FLOOD_BODY_BYTES = 1024 * 1024;
  const proberNice = Number(process.env.BENCH_SIGNALING_PROBER_NICE ?? -10);
  if (!Number.isInteger(proberNice) || proberNice < -20 || proberNice > 19) throw new RangeError(`BENCH_SIGNALING_PROBER_NICE must be an integer from -20 to 19, got "${process.env.BENCH_SIGNALING_PROBER_NICE}"`);
  const extraEnv = daemonEnvExtra();
  const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');
  process.stdout.write(
    `machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, load average ${load()}\n` +
      `REST load: autocannon (own process), ${connections} connections, GET /v1/agents?limit=100 (${AGENTS} agents); ` +
      `probes: OPTIONS, INVITE (then CANCEL) and GET /readyz, ${rate}/s each, open loop; per daemon ${rounds} rounds of ${secs} s idle, ${secs} s loaded, ${secs} s REST only` +
      `${compare ? '; daemons (their turns interleaved): the defaults, and http.fair_share_ms 0 (REST unscheduled)' : ''}` +
      `${flood ? `; the first daemon also ${secs} s under a webhook flood per round (${floodConnections} clients POSTing forged 1 MB voice webhooks)` : ''}\n`,
  );

  const dirs: string[] = [];
  const targets: Target[] = [];
  const floodDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-flood-'));
  dirs.push(floodDir);
  const floodBody = join(floodDir, 'forged-webhook.txt');
  const floodParams = forgedWebhookBody(FLOOD_BODY_BYTES);
  writeFileSync(floodBody, floodParams);
  let current: Load | undefined;
  let restorePriority = () => undefined as void;
  const killAll = () => {
    current?.stop();
    for (const t of targets) if (t.daemon.proc.pid !== undefined && t.daemon.proc.exitCode === null && t.daemon.proc.signalCode === null) process.kill(t.daemon.proc.pid, 'SIGKILL');
  };
  process.once('exit', killAll);
  try {
    const wanted: [string, Record<string, string>][] = [['callbridge', extraEnv]];
    if (compare) wanted.push(['unscheduled', { ...extraEnv, CALLBRIDGE_HTTP_FAIR_SHARE_MS: '0' }]);
    for (const [label, env] of wanted) {
      const dir = mkdtempSync(join(tmpdir(), 'callbridge-bench-signaling-'));
      dirs.push(dir);
      targets.push(await startTarget(label, env, dir));
    }

    // The prober's timestamps are taken when this process reads the answer: on a busy machine a
    // prober waiting for a CPU would add its own wait to the daemon's. Raised after the daemons
    // started (they keep nice 0); the autocannon processes are set back to 0 when spawned.
    const nice0 = getPriority(0);
    try {
      setPriority(0, proberNice);
      restorePriority = () => setPriority(0, nice0);
      process.stdout.write(`prober (this process) at nice ${proberNice}; daemons and load at ${nice0}\n`);
    } catch (err) {
      process.stdout.write(`WARNING: could not set this process to nice ${proberNice} (${(err as Error).message}): the prober's own waits for a CPU count in the figures\n`);
    }

    // Warm-up: the REST path and the SIP path compiled, the bridge's first sessions opened.
    for (const t of targets) {
      process.stdout.write(`  ${t.label}: warm-up (REST load and probes, 3 s)...\n`);
      current = startLoad(t.listUrl, t.key, connections, 3);
      t.prober.start(rate);
      await current.result;
      current = undefined;
      await t.prober.stop();
    }

    const measure = async (t: Target, label: Slice['label'], round: number): Promise<void> => {
      process.stdout.write(`  ${t.label}: ${label}, round ${round}/${rounds} (${secs} s)...`);
      const pid = t.daemon.proc.pid;
      let loadRun: Load | undefined;
      if (label === 'webhook flood') {
        loadRun = current = startWebhookFlood(`${t.base}/v1/telco/twilio/voice`, floodBody, floodConnections, secs + 2);
        await sleep(1000);
      } else if (label !== 'idle') {
        loadRun = current = startLoad(t.listUrl, t.key, connections, secs + 2);
        await sleep(1000); // autocannon's start and the connections' first requests
      }
      const cpu0 = cpuSeconds(pid);
      const main0 = mainThreadCpuSeconds(pid);
      const wait0 = runQueueWaitSeconds(pid);
      const t0 = performance.now();
      if (label !== 'rest only') t.prober.start(rate);
      await sleep(secs * 1000);
      const wall = (performance.now() - t0) / 1000;
      const procCpu = (cpuSeconds(pid) - cpu0) / wall;
      const mainCpu = (mainThreadCpuSeconds(pid) - main0) / wall;
      const mainWait = (runQueueWaitSeconds(pid) - wait0) / wall;
      const samples = label === 'rest only' ? Prober.empty() : await t.prober.stop();
      const loadResult = loadRun ? await loadRun.result : undefined;
      current = undefined;
      const s = merge([samples]);
      t.slices.push({ label, samples: s, mainCpu, procCpu, mainWait, ...(loadResult ? { load: loadResult } : {}) });
      const q = (a: number[]) => `${formatValue(percentile(a, 0.5))}/${formatValue(percentile(a, 0.99))}`;
      process.stdout.write(
        (label === 'rest only' ? '' : ` OPTIONS p50/p99 ${q(s.options)} ms, INVITE->100 ${q(s.invite)} ms, INVITE->180 ${q(s.ringing)} ms, readyz ${q(s.readyz)} ms`) +
          (loadResult ? `${label === 'rest only' ? '' : ';'} ${label === 'webhook flood' ? `forged webhooks ${formatValue(loadResult.rps)} req/s (${loadResult.non2xx} refused, ${loadResult.errors} errors)` : `REST ${formatValue(loadResult.rps)} req/s`}` : '') +
          `; daemon CPU ${formatValue(procCpu)} (main thread ${formatValue(mainCpu)}, waiting for a CPU ${formatValue(mainWait)})\n`,
      );
      if (label !== 'idle') await sleep(500); // let autocannon's connections close before the next slice
    };
    for (let round = 1; round <= rounds; round++) {
      for (const t of targets) {
        await measure(t, 'idle', round);
        await measure(t, 'loaded', round);
        await measure(t, 'rest only', round);
        if (flood && t === targets[0]) await measure(t, 'webhook flood', round);
      }
    }

    const sums = targets.map((t) => ({ t, ...summarize(t) }));
    const rows = [['daemon', 'slices', 'probe', 'n', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'lost']];
    for (const x of sums) {
      for (const [label, s] of [['idle', x.idle], ['loaded', x.loaded], ...(x.flooded ? [['webhook flood', x.flood] as const] : [])] as const) {
        for (const k of ['options', 'invite', 'ringing', 'readyz'] as const) {
          const a = s[k];
          const name = k === 'invite' ? 'invite->100' : k === 'ringing' ? 'invite->180' : k;
          rows.push([x.t.label, label, name, String(a.length), formatValue(percentile(a, 0.5)), formatValue(percentile(a, 0.9)), formatValue(percentile(a, 0.99)), formatValue(a[a.length - 1] ?? Number.NaN), k === 'ringing' ? '' : String(s.lost[k])]);
        }
      }
    }
    process.stdout.write(`\n${table(rows)}\n`);
    for (const x of sums) {
      const finals = merge([x.idle, x.loaded]).inviteFinal;
      process.stdout.write(
        `  ${x.t.label}: REST during the loaded slices ${formatValue(x.restLoaded.rps)} req/s (autocannon p99 ${formatValue(x.restLoaded.p99)} ms, whole ms), REST alone ${formatValue(x.restOnly.rps)} req/s (p99 ${formatValue(x.restOnly.p99)} ms); ` +
          `daemon CPU share, whole process / main thread / main thread waiting for a CPU: idle ${x.cpu('idle')}, loaded ${x.cpu('loaded')}, REST only ${x.cpu('rest only')}; ` +
          `INVITE final responses: ${finals.size === 0 ? 'none' : [...finals].map(([c, n]) => `${c} x${n}`).join(', ')}\n`,
      );
    }
    process.stdout.write(`  load average after the run: ${load()}\n`);

    const main = sums[0]!;
    const off = sums[1];
    const p99 = (a: number[]) => percentile(a, 0.99);
    const figures: Figure[] = [
      { name: 'sip_options_p99_under_rest_load', value: p99(main.loaded.options), unit: 'ms', baseline: p99(main.idle.options), note: 'OPTIONS -> 200; baseline: no REST load' },
      { name: 'sip_invite_100_p99_under_rest_load', value: p99(main.loaded.invite), unit: 'ms', baseline: p99(main.idle.invite), note: 'INVITE -> 100 Trying; baseline: no REST load' },
      { name: 'sip_invite_180_p99_under_rest_load', value: p99(main.loaded.ringing), unit: 'ms', baseline: p99(main.idle.ringing), note: 'INVITE -> 180 Ringing (after the RTP ports from a media thread); baseline: no REST load' },
      { name: 'readyz_p99_under_rest_load', value: p99(main.loaded.readyz), unit: 'ms', baseline: p99(main.idle.readyz), note: 'GET /readyz; baseline: no REST load' },
    ];
    if (off) {
      figures.push(
        { name: 'rest_rps_under_rest_load', value: main.restLoaded.rps, unit: 'req/s', baseline: off.restLoaded.rps, note: `GET /v1/agents?limit=100, ${connections} connections, with the probes; baseline: the unscheduled daemon` },
        { name: 'sip_options_p99_under_rest_load_unscheduled', value: p99(off.loaded.options), unit: 'ms', baseline: p99(off.idle.options), note: 'http.fair_share_ms 0; baseline: no REST load' },
        { name: 'sip_invite_100_p99_under_rest_load_unscheduled', value: p99(off.loaded.invite), unit: 'ms', baseline: p99(off.idle.invite), note: 'http.fair_share_ms 0; baseline: no REST load' },
        { name: 'readyz_p99_under_rest_load_unscheduled', value: p99(off.loaded.readyz), unit: 'ms', baseline: p99(off.idle.readyz), note: 'http.fair_share_ms 0; baseline: no REST load' },
      );
    } else {
      figures.push({ name: 'rest_rps_under_rest_load', value: main.restLoaded.rps, unit: 'req/s', baseline: main.restOnly.rps, note: `GET /v1/agents?limit=100, ${connections} connections, with the probes; baseline: the same load without probes` });
    }
    if (main.flooded) {
      figures.push({
        name: 'sip_options_p99_under_webhook_flood',
        value: p99(main.flood.options),
        unit: 'ms',
        baseline: p99(main.idle.options),
        note: `OPTIONS -> 200 while ${floodConnections} clients POST forged 1 MB voice webhooks (${floodParams.split('&').length} parameters; ${formatValue(main.floodLoad.rps)} req/s answered); baseline: idle`,
      });
      figures.push({ name: 'sip_options_p50_under_webhook_flood', value: percentile(main.flood.options, 0.5), unit: 'ms', baseline: percentile(main.idle.options, 0.5), note: 'the same, p50; baseline: idle p50' });
    }
    const verdict = (v: number) => (v < TARGET_MS ? 'met' : 'NOT MET');
    process.stdout.write(
      `\ntargets (under REST saturation, p99 < ${TARGET_MS} ms):\n` +
        `  OPTIONS: ${verdict(figures[0]!.value)} (${formatValue(figures[0]!.value)} ms)\n` +
        `  INVITE -> 100: ${verdict(figures[1]!.value)} (${formatValue(figures[1]!.value)} ms)\n` +
        `  INVITE -> 180 (measured beside it): ${verdict(figures[2]!.value)} (${formatValue(figures[2]!.value)} ms)\n` +
        (main.flooded ? `  OPTIONS under a forged webhook flood: ${verdict(p99(main.flood.options))} (${formatValue(p99(main.flood.options))} ms; idle ${formatValue(p99(main.idle.options))} ms)\n` : ''),
    );
    printFigures('bench/signaling figures (ratio = value / baseline; for latency lower is better)', figures);
    for (const x of sums) {
      const lost = (['options', 'invite', 'readyz'] as const).reduce((a, k) => a + x.idle.lost[k] + x.loaded.lost[k], 0);
      if (lost > 0) process.stdout.write(`\nWARNING: ${x.t.label}: ${lost} probes got no answer within ${PROBE_TIMEOUT_MS} ms (counted as Infinity in the percentiles)\n`);
    }
    const bad = sums.reduce((a, x) => a + x.restLoaded.bad + x.restOnly.bad, 0);
    if (bad > 0) throw new Error(`bench/signaling: ${bad} REST requests failed or were not 2xx; the figures are not valid`);
  } finally {
    try {
      restorePriority();
    } catch {
      // lowering a priority back is always allowed; nothing to do otherwise
    }
    current?.stop();
    for (const t of targets) await t.prober.close().catch(() => undefined);
    for (const t of targets) await stopChild(t.daemon).catch(() => undefined);
    process.removeListener('exit', killAll);
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}
