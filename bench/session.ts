/**
 * bench/session: what the agent runtime itself adds to a voice session, beside the
 * bare socket with no runtime measured in the same run.
 *
 *   1. Reply latency. From the end of the caller's speech as the runtime defines it (the input
 *      frame that completes stop_secs of silence after the speech: the frame on which the VAD
 *      ends the turn) to the first response_audio byte of the reply, with zero-latency fakes for
 *      STT, LLM and TTS, one session at a time, BENCH_SESSION_TURNS (100) turns after 5 warm-up
 *      turns, p50 and p99. Baseline: the same socket round trip with no runtime (a bare `ws`
 *      server that answers a marked input frame with one response_audio-sized message), as many
 *      samples.
 *   1b. Sentence gaps behind a slow TTS. The same turns, BENCH_SESSION_GAP_TURNS (30), with a TTS
 *      that waits GAP_TTS_WAIT_MS (300) before it answers (a vendor's time to first byte) and
 *      says GAP_TONE_MS (200) per piece: local/echo's two pieces are two short sentences. Measured
 *      at the client: the silence inside each reply for a client that starts playing at the
 *      reply's first chunk and plays every chunk as soon as it has it (no buffer of its own), p50
 *      and p99. Baseline: the silence between the two sentences if the second one's TTS request
 *      waited for the first one's synthesis (a runtime without look-ahead): the TTS's time to first
 *      audio at the daemon (p50, this run) minus the first sentence's audio.
 *   1c. Vendor TTS adapters. For each vendor adapter type (cartesia, hume, minimax, fish: the
 *      real adapters, configured through tts.providers), BENCH_SESSION_VENDOR_TURNS (20) turns of
 *      an agent speaking through it to a fake of that vendor (test/agent/tts/fakes/, run by
 *      bench/lib/session-vendors.ts) that speaks the vendor's protocol and waits
 *      VENDOR_FIRST_CHUNK_MS (200) before its first chunk: t0 -> first response_audio, split at
 *      the sentence's arrival at the fake. The runtime's first sentence comes from local/echo
 *      within a few ms of t0, so this is the time from the first sentence to the first audio at
 *      the client. Baseline: the fake's own delay. Each reply is a new agent turn, so the
 *      WebSocket vendors open their socket (and context/task) in it; that is in the figure.
 *   1d. Turn timelines (docs/latency.md). What recording each agent turn's timeline costs, in this
 *      process on virtual time (bench/lib/turn-timeline-cost.ts): a real AgentRuntime with the
 *      runtime tests' vendor fakes, BENCH_SESSION_TIMELINE_TURNS (200) caller turns, CPU per turn
 *      with the daemon's observers (metrics, the store writer into a real SQLite store, its
 *      writes drained inside the measured time). Baseline: the same turns with no observer (the
 *      runtime records nothing), in alternating blocks of the same run.
 *   2. Concurrent sessions. BENCH_SESSION_STEPS (50,100,150,200,250,300) sessions at once, each
 *      streaming audio in real time and speaking every 3 s so that replies stream too. Per step,
 *      over BENCH_SESSION_STEP_SECS (9) after a settle time: the daemon's CPU (whole process and
 *      its main thread, the event loop), CPU per session, whether the reply audio stays real
 *      time, and the reply latency under load. Baseline: the bare server carrying the same
 *      sessions at the highest valid step, replying with the same paced audio.
 *
 * Processes (all on 127.0.0.1): the daemon (bench/session-server.ts: startDaemon as main.ts
 * composes it, SIP off, log level warn; the agent runtime with local STT, local/echo and the real
 * OpenAI-compatible TTS adapter), the fake TTS (bench/session-tts-server.ts: answers every
 * /audio/speech at once with `tone-<ms>` of PCM), the baseline (bench/session-baseline-server.ts)
 * and this process, the load generator. The servers' CPU is read from /proc/<pid>/stat.
 *
 * The client (one event loop for all sessions): every session sends a 20 ms `input_audio` frame
 * every 20 ms, drift-free (the schedule is start + n * 20 ms; a late tick sends what is due),
 * sessions spread evenly over the 20 ms; frames are serialized once up front (line noise at
 * about -70 dBFS, and speechLike() of test/agent/e2e/voice-client.ts at about -16 dBFS). Times
 * are process.hrtime (CLOCK_MONOTONIC, the same clock in every process). t0 is taken just before
 * the send of the stop_secs-th noise frame after the speech; t1 on the arrival of the first
 * response_audio of a turn id not seen before. The bench checks that speech_stopped never
 * arrives before t0 (else t0 would not be the frame the VAD ended the turn on) and, with the
 * fake TTS's request log, splits the latency into "t0 -> TTS request received" and "TTS request
 * -> first audio at the client".
 *
 * Agents: vad start_secs 0.1, stop_secs 0.3, silence timeout off, noise suppression off (the
 * default), first message "Hi.", local/echo (its answer "You said: (speech, N.N seconds)." is
 * two TTS pieces, "You said:" and the rest). Latency agent: voice tone-100 (0.2 s replies), the
 * caller says 0.3 s, waits for the reply's committed response_text, pauses 50-250 ms (random, so
 * the turn end falls anywhere relative to the daemon's timers), and so on. Load agent: voice
 * tone-500 (1 s replies, 25 chunks of 40 ms), the caller says 0.5 s every 3 s.
 *
 * Real time: the runtime sends 40 ms chunks up to 200 ms ahead of the playhead, so a turn's
 * first 6 chunks arrive at once and every later one about 40 ms after the one before. A later
 * chunk is *late* when it comes more than 60 ms (40 + 20 tolerance) after the previous one;
 * *on-time share* = 1 - late / (chunks after the 6th). Also counted: *underruns*, chunks that
 * arrive after they would start to play for a client that starts playing at the first chunk
 * with no buffer of its own. A step is *held* when the daemon's main thread used less than 100 %
 * of a core, the on-time share is at least 99 %, every utterance got its reply and no session
 * failed. A step is *valid* only when the client kept up: frames sent at most 10 ms behind
 * schedule at p99 and the client's own event loop delay p99 at most 10 ms (on 2 cores the client
 * needs one of them). The steps go on past a step not held (on a busy machine one step may miss
 * by a few chunks and the next hold) and stop at the first step not valid, with a failed
 * session, or with the daemon's main thread at 98 % of a core or more.
 *
 * Figures: session_reply_latency_p50/p99 (baseline: socket RTT p50/p99), session_added_latency_p99
 * (reply p99 - RTT p99; baseline: the target, 30 ms), session_sentence_gap_p50/p99 (1b),
 * session_vendor_first_audio_<type>_p50 (1c; baseline: the fake vendor's delay),
 * session_turn_timeline_cpu_per_turn (1d; baseline: the same turns without the timeline),
 * session_cpu_per_session (ms of daemon CPU per second of session; baseline: bare server),
 * sessions_per_core (1000 / that; baseline: bare server), sessions_held (highest held step;
 * baseline: the target, 200),
 * session_loaded_reply_latency_p99 and session_loaded_on_time_share at the highest valid step
 * (baseline: bare server at the same step). BENCH_SESSION_OTLP=1 runs the daemon with tracing on
 * (OTEL_EXPORTER_OTLP_ENDPOINT at a counting OTLP/HTTP sink in this process) and adds
 * session_trace_spans_per_export; the cost of tracing is its figures against a run without it
 * (docs/tracing.md). Targets are reported, never asserted; run() throws
 * when the measurement is invalid (a server did not start, a session failed to connect or closed,
 * an utterance got no reply, speech_stopped came before t0).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import WebSocket from 'ws';
import { speechLike } from '../test/agent/e2e/voice-client.ts';
import { cpuSeconds, daemonLoopDelay, mainThreadCpuSeconds, ROOT, running, startChild, stopChild, waitForLine, type Child, type LoopDelay } from './lib/child.ts';
import { printFigures, table, type Figure } from './lib/result.ts';
import { envIntegerList, envNumber } from './lib/env.ts';
import { startVendorFakes, VENDOR_FIRST_CHUNK_MS, type VendorFakes } from './lib/session-vendors.ts';
import { measureTurnTimelineCost } from './lib/turn-timeline-cost.ts';

const HOST = '127.0.0.1';
const FRAME_MS = 20;
const FRAME_SAMPLES = 480;
const CHUNK_MS = 40;
/** Chunks the pacer sends at once at the start of a turn (200 ms lead + the one sent 1 ms later). */
const LEAD_CHUNKS = 6;
const LATE_GAP_MS = CHUNK_MS + 20;
const STOP_SECS = 0.3;
const STOP_FRAMES = Math.round((STOP_SECS * 1000) / FRAME_MS);
const VAD = { start_secs: 0.1, stop_secs: STOP_SECS, silence_timeout_secs: 0 };
const LATENCY_TONE_MS = 100;
const LOAD_TONE_MS = 500;
const GAP_TONE_MS = 200;
const GAP_TTS_WAIT_MS = 300;
/** local/echo's answer is two TTS pieces ("You said:" and the rest), each one tone. */
const LOAD_REPLY_CHUNKS = (2 * LOAD_TONE_MS) / CHUNK_MS;
const LOAD_CYCLE_FRAMES = 150;
/** A load session speaks only from its second second on: the VAD learns the line's noise first. */
const QUIET_START_FRAMES = 50;
const WARMUP_TURNS = 5;
const TARGET_ADDED_MS = 30;
const TARGET_SESSIONS = 200;
/** The client kept up: frames sent at most this late (p99), event loop delay p99 at most this. */
const CLIENT_LAG_LIMIT_MS = 10;
const ON_TIME_NEEDED = 0.99;
/** The steps stop once the daemon's main thread is this busy (share of a core). */
const SATURATED = 0.98;

/** BENCH_SESSION_DEBUG=1: each session keeps its last events, printed for slow or missing replies. */
const DEBUG = process.env.BENCH_SESSION_DEBUG === '1';

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Nearest-rank percentile. */
function percentile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

const f1 = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : String(v));
const f2 = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : String(v));
/** p50, p90, p99 and max, for the latency tables' rows. */
const quantiles = (values: readonly number[]) => [0.5, 0.9, 0.99, 1].map((q) => f2(percentile(values, q)));

// ---------------------------------------------------------------------------------------------
// Frames, serialized once.

interface Frames {
  noise: string[];
  speech: string[];
}

function frameJson(pcm: Int16Array): string {
  return `{"type":"input_audio","data":{"audio":"${Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength).toString('base64')}"}}`;
}

function makeFrames(speechSecs: number): Frames {
  const noise: string[] = [];
  let seed = 7;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let k = 0; k < 64; k++) {
    const f = new Int16Array(FRAME_SAMPLES);
    for (let i = 0; i < FRAME_SAMPLES; i++) f[i] = Math.round((rand() - 0.5) * 32);
    noise.push(frameJson(f));
  }
  const pcm = speechLike(speechSecs);
  const speech: string[] = [];
  for (let i = 0; i < pcm.length; i += FRAME_SAMPLES) {
    const f = new Int16Array(FRAME_SAMPLES);
    f.set(pcm.subarray(i, Math.min(i + FRAME_SAMPLES, pcm.length)));
    speech.push(frameJson(f));
  }
  return { noise, speech };
}

// ---------------------------------------------------------------------------------------------
// What the sessions record while a window is open.

class WindowStats {
  readonly started = nowMs();
  latencies: number[] = [];
  sendLags: number[] = [];
  frames = 0;
  /** Chunks after the lead burst, and of those: gap > 60 ms; arrived after their play time. */
  chunks = 0;
  lateGaps = 0;
  underruns = 0;
  replies = 0;
  interruptions = 0;
  /** Utterances whose reply had not started when the next utterance ended. */
  missedReplies = 0;
}

/** Shared by the sessions: where they record (nothing between windows). */
class Recorder {
  stats: WindowStats | undefined;
}

interface Reply {
  turnId: string;
  t0: number;
  t1: number;
  /** Arrival of the last speech_stopped before t1. */
  speechStoppedAt: number | undefined;
  /** Silence inside the reply at its client (TurnTrack.silenceMs), once the turn is committed. */
  silenceMs: number;
}

interface TurnTrack {
  id: string;
  first: number;
  last: number;
  k: number;
  reply: Reply | undefined;
  /**
   * A client that starts playing at the turn's first chunk and plays every chunk as soon as it has
   * it: when the audio received so far ends, and how long it waited for audio in between (the
   * silences the caller hears inside the reply, e.g. between two sentences).
   */
  playEndMs: number;
  silenceMs: number;
}

/** Duration of a response_audio chunk from its base64 length (PCM16 at 24 kHz). */
const chunkMs = (base64Length: number) => (Math.floor((base64Length * 3) / 4) / 2 / 24_000) * 1000;

const AUDIO_PREFIX = Buffer.from('{"type":"response_audio"');
const TURN_KEY = Buffer.from('"turn_id":"');
const AUDIO_KEY = Buffer.from('"audio":"');

/** One voice session of the load generator. */
class BenchSession {
  readonly ws: WebSocket;
  readonly #frames: Frames;
  readonly #rec: Recorder;
  startAt = 0;
  /** Frames sent. */
  n = 0;
  /** Index of the next speech frame to send; -1: not speaking. */
  #speechPos = -1;
  /** Noise frames since the speech ended; -1: not counting. */
  #silence = -1;
  /** Speak every `every` frames, starting at frame index `phase` of each cycle. */
  cycle: { every: number; phase: number } | undefined;
  /** Baseline server: the t0 frame carries `"mark": markChunks` (its reply's length in chunks). */
  markChunks: number | undefined;
  /** Latency baseline: every `markEvery`-th frame is marked 1 and is a t0. */
  markEvery: number | undefined;
  /** Send time of the frame that ends the current utterance, until its reply starts. */
  #t0: number | undefined;
  #turn: TurnTrack | undefined;
  #speechStoppedAt: number | undefined;
  #replyWaiter: ((r: Reply) => void) | undefined;
  #turnDoneWaiter: (() => void) | undefined;
  #started!: () => void;
  readonly startedPromise = new Promise<void>((r) => (this.#started = r));
  closing = false;
  failure: string | undefined;
  /** BENCH_SESSION_DEBUG: recent events. */
  readonly trace: string[] = [];

  #debug(what: string): void {
    if (!DEBUG) return;
    this.trace.push(`${(nowMs() - this.startAt).toFixed(1)} n=${this.n} ${what}`);
    if (this.trace.length > 40) this.trace.shift();
  }
  onFailure: ((s: BenchSession) => void) | undefined;

  constructor(url: string, frames: Frames, rec: Recorder) {
    this.#frames = frames;
    this.#rec = rec;
    this.ws = new WebSocket(url, { perMessageDeflate: false });
    this.ws.on('message', (data) => this.#onMessage(data as Buffer));
    this.ws.on('close', (code, reason) => {
      if (!this.closing) this.#fail(`socket closed ${code} ${reason.toString()}`);
    });
    this.ws.on('error', (err) => {
      if (!this.closing) this.#fail(`socket error: ${err.message}`);
    });
  }

  #fail(why: string): void {
    if (this.failure !== undefined) return;
    this.failure = why;
    this.onFailure?.(this);
  }

  /** Opens the socket and waits for session_started. */
  async open(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.startedPromise,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no session_started within ${timeoutMs} ms${this.failure ? `: ${this.failure}` : ''}`)), timeoutMs);
          this.ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
          this.ws.once('error', (err) => reject(err));
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  close(): void {
    this.closing = true;
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
  }

  /** Sends every frame due by `now`. */
  sendDue(now: number): void {
    const stats = this.#rec.stats;
    for (;;) {
      const due = this.startAt + this.n * FRAME_MS;
      if (due > now) return;
      if (stats) {
        stats.sendLags.push(now - due);
        stats.frames++;
      }
      this.#sendFrame();
      this.n++;
    }
  }

  #sendFrame(): void {
    if (this.ws.readyState !== WebSocket.OPEN) return;
    const cycle = this.cycle;
    // Not in the first second: the VAD takes its noise floor from the first frames.
    if (cycle !== undefined && this.n >= QUIET_START_FRAMES && this.n % cycle.every === cycle.phase) this.#speechPos = 0;
    const { speech, noise } = this.#frames;
    if (this.#speechPos >= 0) {
      const text = speech[this.#speechPos++] as string;
      if (this.#speechPos >= speech.length) {
        this.#speechPos = -1;
        this.#silence = 0;
      }
      this.ws.send(text);
      return;
    }
    let text = noise[this.n % noise.length] as string;
    let t0 = false;
    if (this.#silence >= 0 && ++this.#silence === STOP_FRAMES) {
      this.#silence = -1;
      t0 = true;
      if (this.markChunks !== undefined) text = `${text.slice(0, -1)},"mark":${this.markChunks}}`;
    } else if (this.markEvery !== undefined && this.n % this.markEvery === 0) {
      t0 = true;
      text = `${text.slice(0, -1)},"mark":1}`;
    }
    if (t0) {
      if (this.#t0 !== undefined && this.#rec.stats) {
        this.#rec.stats.missedReplies++;
        this.#debug('t0 with a reply still pending');
        if (DEBUG) process.stdout.write(`DEBUG no reply:\n  ${this.trace.join('\n  ')}\n`);
      }
      this.#t0 = nowMs();
      this.#debug('t0');
    }
    this.ws.send(text);
  }

  /** Latency phase: says the utterance now; resolves when its reply has been committed. */
  utter(timeoutMs: number): Promise<Reply> {
    this.#speechPos = 0;
    return new Promise<Reply>((resolve, reject) => {
      let reply: Reply | undefined;
      const timer = setTimeout(() => {
        this.#replyWaiter = undefined;
        this.#turnDoneWaiter = undefined;
        reject(new Error(`no ${reply ? 'committed response_text' : 'response_audio'} of the reply within ${timeoutMs} ms${this.failure ? ` (${this.failure})` : ''}`));
      }, timeoutMs);
      this.#replyWaiter = (r) => {
        reply = r;
        this.#replyWaiter = undefined;
        this.#turnDoneWaiter = () => {
          clearTimeout(timer);
          this.#turnDoneWaiter = undefined;
          r.silenceMs = this.#turn?.id === r.turnId ? this.#turn.silenceMs : Number.NaN;
          resolve(r);
        };
      };
    });
  }

  /** Resolves when the next agent turn (any) has been committed. */
  nextTurnDone(timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no committed response_text within ${timeoutMs} ms${this.failure ? ` (${this.failure})` : ''}`)), timeoutMs);
      this.#turnDoneWaiter = () => {
        clearTimeout(timer);
        this.#turnDoneWaiter = undefined;
        resolve();
      };
    });
  }

  #onMessage(buf: Buffer): void {
    const at = nowMs();
    if (buf.length > 64 && buf.subarray(0, AUDIO_PREFIX.length).equals(AUDIO_PREFIX)) {
      const ti = buf.indexOf(TURN_KEY);
      const ai = buf.indexOf(AUDIO_KEY, ti);
      if (ti > 0 && ai > 0) {
        const turnId = buf.toString('latin1', ti + TURN_KEY.length, ti + TURN_KEY.length + 36);
        const audioEnd = buf.indexOf(0x22, ai + AUDIO_KEY.length);
        this.#onAudio(turnId, chunkMs(Math.max(0, audioEnd - ai - AUDIO_KEY.length)), at);
        return;
      }
    }
    let msg: { type?: string; data?: any };
    try {
      msg = JSON.parse(buf.toString('utf8')) as typeof msg;
    } catch {
      this.#fail('server sent malformed JSON');
      return;
    }
    if (DEBUG) this.#debug(`${msg.type} ${msg.type === 'response_text' ? JSON.stringify(msg.data) : ''}`);
    switch (msg.type) {
      case 'response_audio':
        this.#onAudio(String(msg.data?.turn_id), typeof msg.data?.audio === 'string' ? chunkMs(msg.data.audio.length) : 0, at);
        return;
      case 'response_text':
        if (msg.data?.is_final === true) {
          if (this.#turn?.reply !== undefined && this.#turn.id === msg.data.turn_id && this.#rec.stats) this.#rec.stats.replies++;
          this.#turnDoneWaiter?.();
        }
        return;
      case 'speech_stopped':
        this.#speechStoppedAt = at;
        return;
      case 'interruption':
        if (this.#rec.stats) this.#rec.stats.interruptions++;
        return;
      case 'session_started':
        this.#started();
        return;
      case 'session_ended':
        if (!this.closing) this.#fail(`session_ended ${JSON.stringify(msg.data)}`);
        return;
      default:
        return;
    }
  }

  #onAudio(turnId: string, audioMs: number, at: number): void {
    const t = this.#turn;
    if (t === undefined || t.id !== turnId) {
      let reply: Reply | undefined;
      if (this.#t0 !== undefined && at >= this.#t0) {
        reply = { turnId, t0: this.#t0, t1: at, speechStoppedAt: this.#speechStoppedAt, silenceMs: Number.NaN };
        this.#t0 = undefined;
        this.#rec.stats?.latencies.push(reply.t1 - reply.t0);
        if (DEBUG && reply.t1 - reply.t0 > 30) process.stdout.write(`DEBUG slow reply ${f1(reply.t1 - reply.t0)} ms:\n  ${this.trace.join('\n  ')}\n`);
      }
      this.#debug(`first audio of turn ${turnId}`);
      this.#turn = { id: turnId, first: at, last: at, k: 1, reply, playEndMs: at + audioMs, silenceMs: 0 };
      if (reply) this.#replyWaiter?.(reply);
      return;
    }
    t.k++;
    if (audioMs > 0) {
      if (at > t.playEndMs) t.silenceMs += at - t.playEndMs;
      t.playEndMs = Math.max(at, t.playEndMs) + audioMs;
    }
    const stats = this.#rec.stats;
    if (stats && audioMs > 0 && t.k > LEAD_CHUNKS) {
      stats.chunks++;
      if (at - t.last > LATE_GAP_MS) stats.lateGaps++;
      if (at > t.first + (t.k - 1) * CHUNK_MS) stats.underruns++;
    }
    t.last = at;
  }
}

/** Drives every session's microphone from one timer (about 1 ms). */
class Mic {
  readonly sessions = new Set<BenchSession>();
  #timer: NodeJS.Timeout | undefined;

  add(s: BenchSession, startAt: number): void {
    s.startAt = startAt;
    this.sessions.add(s);
    if (this.#timer === undefined) this.#tick();
  }

  remove(s: BenchSession): void {
    this.sessions.delete(s);
  }

  #tick = (): void => {
    const now = nowMs();
    for (const s of this.sessions) s.sendDue(now);
    this.#timer = setTimeout(this.#tick, 1);
  };

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.sessions.clear();
  }
}

// ---------------------------------------------------------------------------------------------
// The daemon's REST API

class Api {
  constructor(
    readonly base: string,
    readonly key: string,
  ) {}

  async post(path: string, body: unknown): Promise<any> {
    const res = await fetch(this.base + path, { method: 'POST', headers: { authorization: `Bearer ${this.key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`POST ${path}: HTTP ${res.status} ${text}`);
    return JSON.parse(text);
  }

  /** An agent whose every TTS piece is `voiceMs` of tone, answered after `ttsWaitMs`. */
  async agent(voiceMs: number, ttsWaitMs = 0): Promise<string> {
    const voice = ttsWaitMs > 0 ? `tone-${voiceMs}-wait-${ttsWaitMs}` : `tone-${voiceMs}`;
    const a = await this.post('/v1/agents', {
      name: `bench session ${voice}`,
      vad_settings: VAD,
      first_message: 'Hi.',
      voice_settings: { id: voice, provider: 'provider_1' },
    });
    return a.id as string;
  }

  /** An agent speaking through a vendor adapter's voice provider (1c). */
  async vendorAgent(provider: string, voiceId: string): Promise<string> {
    const a = await this.post('/v1/agents', { name: `bench session ${provider}`, vad_settings: VAD, first_message: 'Hi.', voice_settings: { id: voiceId, provider } });
    return a.id as string;
  }

  async sessionUrl(agentId: string): Promise<string> {
    const { token } = (await this.post('/v1/session-token', { agent_id: agentId })) as { token: string };
    return `${this.base.replace(/^http/, 'ws')}/v1/connection?token=${encodeURIComponent(token)}`;
  }
}

// ---------------------------------------------------------------------------------------------
// Phase 1: latency

interface LatencyResult {
  samples: number[];
  /** speech_stopped arrival - t0. */
  stoppedLags: number[];
  /** t0 -> TTS request received; TTS request received -> first audio at the client. */
  beforeTts: number[];
  afterTts: number[];
  /** Per reply, the silence inside it at the client (Reply.silenceMs). */
  silences: number[];
}

/** When each TTS request (sentence) reached the fake TTS, on the bench's clock. */
interface TtsLog {
  /** Forgets the requests so far (the warm-up's). */
  reset(): Promise<void>;
  read(): Promise<{ at: number; input: string }[]>;
}

/** The fake speech server's request log (GET /stats returns it and starts over). */
function speechServerLog(ttsUrl: string): TtsLog {
  return {
    reset: () => fetch(`${ttsUrl}/stats`).then((r) => void r.text()),
    read: async () => (await (await fetch(`${ttsUrl}/stats`)).json()) as { at: number; input: string }[],
  };
}

async function measureLatency(api: Api, agentId: string, turns: number, frames: Frames, ttsLog: TtsLog, progress: (s: string) => void): Promise<LatencyResult> {
  const rec = new Recorder();
  const mic = new Mic();
  const s = new BenchSession(await api.sessionUrl(agentId), frames, rec);
  try {
    await s.open(10_000);
    const firstDone = s.nextTurnDone(10_000);
    mic.add(s, nowMs());
    await firstDone;
    const replies: Reply[] = [];
    for (let i = 0; i < WARMUP_TURNS + turns; i++) {
      if (i === WARMUP_TURNS) await ttsLog.reset();
      await sleep(50 + Math.random() * 200);
      const r = await s.utter(5000);
      if (i >= WARMUP_TURNS) replies.push(r);
      if ((i + 1) % 25 === 0) progress(`${i + 1}/${WARMUP_TURNS + turns} turns`);
    }
    const tts = await ttsLog.read();
    const result: LatencyResult = { samples: [], stoppedLags: [], beforeTts: [], afterTts: [], silences: [] };
    const early: string[] = [];
    for (const r of replies) {
      result.samples.push(r.t1 - r.t0);
      result.silences.push(r.silenceMs);
      if (r.speechStoppedAt === undefined || r.speechStoppedAt < r.t0) {
        early.push(r.speechStoppedAt === undefined ? 'none' : `${f2(r.speechStoppedAt - r.t0)} ms`);
      } else {
        result.stoppedLags.push(r.speechStoppedAt - r.t0);
      }
      const req = tts.find((q) => q.at >= r.t0 && q.at <= r.t1);
      if (req) {
        result.beforeTts.push(req.at - r.t0);
        result.afterTts.push(r.t1 - req.at);
      }
    }
    if (early.length > 0) throw new Error(`speech_stopped did not follow t0 in ${early.length} of ${replies.length} turns (${early.slice(0, 5).join(', ')}): t0 is not the frame the VAD ended the turn on`);
    return result;
  } finally {
    mic.stop();
    s.close();
  }
}

async function measureRtt(baseUrl: string, samples: number, frames: Frames): Promise<number[]> {
  const rec = new Recorder();
  const mic = new Mic();
  const s = new BenchSession(`${baseUrl}/v1/connection`, frames, rec);
  try {
    await s.open(10_000);
    s.markEvery = 5;
    mic.add(s, nowMs());
    // Warm-up: 10 round trips, not counted.
    await sleep(10 * 5 * FRAME_MS + 50);
    const stats = (rec.stats = new WindowStats());
    const deadline = nowMs() + samples * 5 * FRAME_MS * 2 + 5000;
    while (stats.latencies.length < samples) {
      if (s.failure) throw new Error(`baseline session failed: ${s.failure}`);
      if (nowMs() > deadline) throw new Error(`baseline: only ${stats.latencies.length} of ${samples} round trips answered`);
      await sleep(50);
    }
    return stats.latencies.slice(0, samples);
  } finally {
    mic.stop();
    s.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Phase 2: concurrency


interface StepResult {
  target: 'daemon' | 'baseline';
  sessions: number;
  secs: number;
  /** Server CPU over the window, share of one core: whole process and main thread. */
  cpu: number;
  mainCpu: number;
  /** ms of server CPU per second of one session. */
  cpuMsPerSessionSec: number;
  clientCpu: number;
  /** The server's event-loop delay over the window (daemon only), ms. */
  serverLoop: LoopDelay | undefined;
  sendLagP99: number;
  sendLagMax: number;
  loopDelayP99: number;
  replies: number;
  latencyP50: number;
  latencyP99: number;
  chunks: number;
  lateGaps: number;
  underruns: number;
  onTime: number;
  interruptions: number;
  missedReplies: number;
  failures: number;
  clientOk: boolean;
  held: boolean;
}

class LoadRun {
  readonly rec = new Recorder();
  readonly mic = new Mic();
  readonly sessions: BenchSession[] = [];
  readonly failed: BenchSession[] = [];
  #connected = 0;

  constructor(
    readonly target: 'daemon' | 'baseline',
    readonly frames: Frames,
    readonly newUrl: () => Promise<string>,
    readonly pid: number,
    readonly loopProbe?: () => Promise<LoopDelay>,
  ) {}

  /** Adds sessions up to `n`, `parallel` connecting at a time; each starts at a phase of its own. */
  async grow(n: number, parallel = 8): Promise<void> {
    const add = async () => {
      const s = new BenchSession(await this.newUrl(), this.frames, this.rec);
      s.onFailure = (x) => this.failed.push(x);
      await s.open(15_000);
      const k = this.#connected++;
      // Utterances spread over the cycle, frame times spread over 20 ms.
      s.cycle = { every: LOAD_CYCLE_FRAMES, phase: (k * 37) % LOAD_CYCLE_FRAMES };
      if (this.target === 'baseline') s.markChunks = LOAD_REPLY_CHUNKS;
      this.sessions.push(s);
      this.mic.add(s, nowMs() + ((k * 7) % FRAME_MS) + Math.random());
    };
    const todo = n - this.sessions.length;
    let started = 0;
    const worker = async () => {
      while (started < todo) {
        started++;
        await add();
      }
    };
    await Promise.all(Array.from({ length: Math.min(parallel, Math.max(0, todo)) }, worker));
  }

  async window(secs: number): Promise<StepResult> {
    const loop = monitorEventLoopDelay({ resolution: 1 });
    const stats = new WindowStats();
    const cpu0 = cpuSeconds(this.pid);
    const main0 = mainThreadCpuSeconds(this.pid);
    const client0 = process.cpuUsage();
    const failed0 = this.failed.length;
    await this.loopProbe?.();
    this.rec.stats = stats;
    loop.enable();
    await sleep(secs * 1000);
    loop.disable();
    this.rec.stats = undefined;
    const serverLoop = await this.loopProbe?.();
    const elapsed = (nowMs() - stats.started) / 1000;
    const cpu = (cpuSeconds(this.pid) - cpu0) / elapsed;
    const mainCpu = (mainThreadCpuSeconds(this.pid) - main0) / elapsed;
    const c = process.cpuUsage(client0);
    const n = this.sessions.length;
    const onTime = stats.chunks > 0 ? 1 - stats.lateGaps / stats.chunks : Number.NaN;
    const sendLagP99 = percentile(stats.sendLags, 0.99);
    const loopDelayP99 = loop.percentile(99) / 1e6;
    const failures = this.failed.length - failed0;
    const clientOk = sendLagP99 <= CLIENT_LAG_LIMIT_MS && loopDelayP99 <= CLIENT_LAG_LIMIT_MS;
    return {
      target: this.target,
      sessions: n,
      secs: elapsed,
      cpu,
      mainCpu,
      cpuMsPerSessionSec: (cpu * 1000) / n,
      clientCpu: (c.user + c.system) / 1e6 / elapsed,
      serverLoop,
      sendLagP99,
      sendLagMax: stats.sendLags.reduce((m, v) => Math.max(m, v), 0),
      loopDelayP99,
      replies: stats.replies,
      latencyP50: percentile(stats.latencies, 0.5),
      latencyP99: percentile(stats.latencies, 0.99),
      chunks: stats.chunks,
      lateGaps: stats.lateGaps,
      underruns: stats.underruns,
      onTime,
      interruptions: stats.interruptions,
      missedReplies: stats.missedReplies,
      failures,
      clientOk,
      held: failures === 0 && stats.latencies.length > 0 && stats.missedReplies === 0 && mainCpu < 1 && onTime >= ON_TIME_NEEDED,
    };
  }

  close(): void {
    this.mic.stop();
    for (const s of this.sessions) s.close();
  }
}

function stepRow(r: StepResult): string[] {
  return [
    r.target,
    String(r.sessions),
    f1(r.cpu * 100),
    f1(r.mainCpu * 100),
    r.serverLoop ? `${f1(r.serverLoop.p99)}/${f1(r.serverLoop.max)}` : '-',
    f2(r.cpuMsPerSessionSec),
    f1(r.clientCpu * 100),
    `${f1(r.sendLagP99)}/${f1(r.loopDelayP99)}`,
    String(r.replies),
    `${f1(r.latencyP50)}/${f1(r.latencyP99)}`,
    `${f2(r.onTime * 100)}`,
    String(r.underruns),
    `${r.interruptions}/${r.missedReplies}`,
    r.failures > 0 ? `FAILED ${r.failures}` : !r.clientOk ? 'client-limited' : r.held ? 'held' : 'not held',
  ];
}

const STEP_HEADER = ['target', 'sessions', 'cpu %', 'main %', 'loop p99/max', 'ms/sess-s', 'client %', 'lag p99/loop p99', 'replies', 'reply p50/p99 ms', 'on-time %', 'underruns', 'barge-in/no reply', 'verdict'];

// ---------------------------------------------------------------------------------------------

export async function run(): Promise<void> {
  const turns = Math.round(envNumber('BENCH_SESSION_TURNS', 100));
  const gapTurns = Math.round(envNumber('BENCH_SESSION_GAP_TURNS', 30));
  const vendorTurns = Math.round(envNumber('BENCH_SESSION_VENDOR_TURNS', 20));
  const steps = envIntegerList('BENCH_SESSION_STEPS', '50,100,150,200,250,300');
  const stepSecs = envNumber('BENCH_SESSION_STEP_SECS', 9);
  const timelineTurns = Math.round(envNumber('BENCH_SESSION_TIMELINE_TURNS', 200));
  const settleSecs = envNumber('BENCH_SESSION_SETTLE_SECS', 3);
  // BENCH_SESSION_OTLP=1: the daemon exports traces (docs/tracing.md) to a sink in this process;
  // compare its figures with a run without it (tracing off, the default).
  const otlp = process.env.BENCH_SESSION_OTLP === '1' ? await startOtlpSink() : undefined;
  const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');
  process.stdout.write(`machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, load average ${load()}\n`);
  // 1d first, in this process, before any child competes for the CPU.
  const timeline = await measureTurnTimelineCost(timelineTurns);
  if (timeline.stored < timelineTurns) throw new Error(`turn timelines: ${timeline.stored} stored for ${timelineTurns} turns`);
  process.stdout.write(`turn timelines: ${f1(timeline.withUs)} us CPU per turn with, ${f1(timeline.withoutUs)} us without (${timelineTurns} turns)\n`);

  const dataDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-session-'));
  const children: Child[] = [];
  const killAll = () => {
    for (const c of children) if (running(c) && c.proc.pid !== undefined) process.kill(c.proc.pid, 'SIGKILL');
  };
  process.once('exit', killAll);
  const runs: LoadRun[] = [];
  let fakeVendors: VendorFakes | undefined;
  try {
    if (vendorTurns > 0) fakeVendors = await startVendorFakes(nowMs);
    const tts = startChild('fake TTS', ['--import', 'tsx', join(ROOT, 'bench', 'session-tts-server.ts')], {});
    children.push(tts);
    const ttsUrl = `http://${HOST}:${await waitForLine(tts, /LISTENING (\d+)/, 30_000)}`;
    // BENCH_SESSION_NODE_ARGS: extra node options for the daemon only (e.g. --cpu-prof, --trace-gc).
    const nodeArgs = (process.env.BENCH_SESSION_NODE_ARGS ?? '').split(/\s+/).filter((a) => a !== '');
    const daemon = startChild('daemon', [...nodeArgs, '--import', 'tsx', join(ROOT, 'bench', 'session-server.ts')], {
      BENCH_SESSION_DATA_DIR: dataDir,
      BENCH_SESSION_TTS_URL: `${ttsUrl}/v1`,
      ...(fakeVendors ? { BENCH_SESSION_VENDOR_TTS: JSON.stringify(fakeVendors.providers) } : {}),
      ...(otlp ? { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url } : { OTEL_EXPORTER_OTLP_ENDPOINT: undefined, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: undefined }),
    });
    children.push(daemon);
    const baseline = startChild('baseline', ['--import', 'tsx', join(ROOT, 'bench', 'session-baseline-server.ts')], {});
    children.push(baseline);
    const daemonUrl = await waitForLine(daemon, /LISTENING (\S+)/, 60_000);
    const baselineUrl = `ws://${HOST}:${await waitForLine(baseline, /LISTENING (\d+)/, 30_000)}`;
    const key = readFileSync(join(dataDir, 'initial-api-key'), 'utf8').trim();
    const api = new Api(daemonUrl, key);
    const latencyAgent = await api.agent(LATENCY_TONE_MS);
    const loadAgent = await api.agent(LOAD_TONE_MS);
    const gapAgent = await api.agent(GAP_TONE_MS, GAP_TTS_WAIT_MS);
    const daemonPid = daemon.proc.pid ?? -1;
    const baselinePid = baseline.proc.pid ?? -1;
    process.stdout.write(`daemon pid ${daemonPid} on ${daemonUrl}, baseline pid ${baselinePid}, fake TTS pid ${tts.proc.pid ?? '?'}\n`);
    const progress = (what: string) => process.stdout.write(`  ${what}\n`);

    // 1. Latency, then its baseline.
    progress(`reply latency: ${turns} turns (+${WARMUP_TURNS} warm-up), one session, caller says 0.3 s, stop_secs ${STOP_SECS}`);
    const lat = await measureLatency(api, latencyAgent, turns, makeFrames(0.3), speechServerLog(ttsUrl), progress);
    progress(`socket round trip without runtime: ${turns} samples`);
    const rtt = await measureRtt(baselineUrl, turns, makeFrames(0.3));

    // 1b. Sentence gaps behind a slow TTS; the daemon's TTS first-audio figures cover just them.
    progress(`sentence gaps: ${gapTurns} turns, each TTS piece ${GAP_TONE_MS} ms of audio answered after ${GAP_TTS_WAIT_MS} ms`);
    await daemonLoopDelay(daemon);
    const gaps = await measureLatency(api, gapAgent, gapTurns, makeFrames(0.3), speechServerLog(ttsUrl), progress);
    const gapTtsFirst = (await daemonLoopDelay(daemon)).ttsFirst;
    if (gapTtsFirst === undefined || gapTtsFirst.n === 0) throw new Error("sentence gaps: the daemon reported no TTS request's first audio");
    const gapBaseline = Math.max(0, gapTtsFirst.p50 - GAP_TONE_MS);

    // 1c. Vendor TTS adapters against their fakes.
    const vendorRuns: { type: string; lat: LatencyResult }[] = [];
    if (fakeVendors) {
      const fakes = fakeVendors;
      const log: TtsLog = { reset: async () => fakes.reset(), read: async () => fakes.log() };
      for (const v of fakes.vendors) {
        progress(`vendor ${v.type} (${v.slot}): ${vendorTurns} turns, the fake answering after ${VENDOR_FIRST_CHUNK_MS} ms`);
        vendorRuns.push({ type: v.type, lat: await measureLatency(api, await api.vendorAgent(v.slot, v.voiceId), vendorTurns, makeFrames(0.3), log, progress) });
      }
    }

    // 2. Concurrency.
    const loadFrames = makeFrames(0.5);
    const daemonRun = new LoadRun('daemon', loadFrames, () => api.sessionUrl(loadAgent), daemonPid, () => daemonLoopDelay(daemon));
    runs.push(daemonRun);
    const results: StepResult[] = [];
    for (const n of steps) {
      progress(`${n} concurrent sessions: connecting, ${settleSecs} s settle, ${stepSecs} s measured`);
      try {
        await daemonRun.grow(n);
      } catch (err) {
        throw new Error(`daemon: a session failed to connect on the way to ${n} sessions: ${(err as Error).message}`, { cause: err });
      }
      await sleep(settleSecs * 1000);
      const r = await daemonRun.window(stepSecs);
      results.push(r);
      progress(`  ${table([STEP_HEADER, stepRow(r)]).split('\n').slice(2).join('')}`);
      // Beyond a failed or client-limited step, or a saturated event loop, figures mean nothing.
      if (r.failures > 0 || !r.clientOk || r.mainCpu >= SATURATED) break;
    }
    daemonRun.close();
    const failedSessions = daemonRun.failed.map((s) => s.failure);
    const valid = results.filter((r) => r.clientOk && r.failures === 0 && r.latencyP99 === r.latencyP99);
    const top = valid.at(-1);
    let base: StepResult | undefined;
    if (top) {
      progress(`baseline: ${top.sessions} concurrent sessions on the bare server`);
      const baseRun = new LoadRun('baseline', loadFrames, async () => `${baselineUrl}/v1/connection`, baselinePid);
      runs.push(baseRun);
      await baseRun.grow(top.sessions);
      await sleep(settleSecs * 1000);
      base = await baseRun.window(stepSecs);
      baseRun.close();
    }

    // ---- report
    const latP50 = percentile(lat.samples, 0.5);
    const latP99 = percentile(lat.samples, 0.99);
    const rttP50 = percentile(rtt, 0.5);
    const rttP99 = percentile(rtt, 0.99);
    process.stdout.write(
      `\nreply latency, one session (${lat.samples.length} turns), ms:\n` +
        table([
          ['', 'p50', 'p90', 'p99', 'max'],
          ['t0 -> first response_audio', ...quantiles(lat.samples)],
          ['  t0 -> TTS request at the fake', ...quantiles(lat.beforeTts)],
          ['  TTS request -> first audio at client', ...quantiles(lat.afterTts)],
          ['t0 -> speech_stopped at client', ...quantiles(lat.stoppedLags)],
          ['baseline: socket round trip', ...quantiles(rtt)],
          ['silence inside a reply', ...quantiles(lat.silences)],
        ]) +
        '\n',
    );
    process.stdout.write(
      `\nsentence gaps (${gaps.samples.length} turns, two sentences of ${GAP_TONE_MS} ms each, TTS answering after ${GAP_TTS_WAIT_MS} ms), ms:\n` +
        table([
          ['', 'p50', 'p90', 'p99', 'max'],
          ['silence inside a reply', ...quantiles(gaps.silences)],
          ['t0 -> first response_audio', ...quantiles(gaps.samples)],
          [`TTS request -> first audio at the daemon (${gapTtsFirst.n})`, f2(gapTtsFirst.p50), '', f2(gapTtsFirst.p99), f2(gapTtsFirst.max)],
        ]) +
        '\n',
    );
    if (vendorRuns.length > 0) {
      process.stdout.write(
        `\nvendor TTS adapters (${vendorTurns} turns each, the fake vendor's first chunk after ${VENDOR_FIRST_CHUNK_MS} ms, then 40 ms chunks 30 ms apart), ms:\n` +
          table([
            ['', 'p50', 'p90', 'p99', 'max'],
            ...vendorRuns.flatMap(({ type, lat: l }) => [
              [`${type}: t0 -> first response_audio`, ...quantiles(l.samples)],
              [`  t0 -> sentence at the fake`, ...quantiles(l.beforeTts)],
              [`  sentence at the fake -> first audio at client`, ...quantiles(l.afterTts)],
            ]),
          ]) +
          '\n',
      );
    }
    process.stdout.write(`\nconcurrent sessions (each: real-time audio, 0.5 s utterance every 3 s, 1 s reply):\n${table([STEP_HEADER, ...results.map(stepRow), ...(base ? [stepRow(base)] : [])])}\n`);
    process.stdout.write(
      'cpu %: server process (all threads) / main %: its main thread, share of one core; loop: event-loop delay of the daemon, ms; ms/sess-s: server CPU ms per second of one session;\n' +
        'lag: frames sent behind schedule by the client; loop: client event-loop delay; on-time: chunks after the first 6 arriving <= 60 ms after the previous one;\n' +
        'underruns: chunks arriving after their play time for a client with no buffer; barge-in: interruption events; no reply: utterances whose reply had not started by the next one.\n',
    );
    process.stdout.write(`load average after: ${load()}\n`);
    // Tracing on: what was exported, counted once the daemon's drain flushed its last spans.
    let got: ReturnType<NonNullable<typeof otlp>['received']> | undefined;
    if (otlp) {
      await stopChild(daemon);
      got = otlp.received();
      process.stdout.write(`traces on: the OTLP sink received ${got.requests} export requests, ${got.spans} spans, ${f1(got.bytes / 1024)} KiB of OTLP/JSON\n`);
    }

    if (lat.samples.length < turns) throw new Error(`only ${lat.samples.length} of ${turns} replies measured`);
    if (gaps.silences.length < gapTurns || gaps.silences.some((x) => Number.isNaN(x))) throw new Error(`sentence gaps: ${gaps.silences.filter((x) => !Number.isNaN(x)).length} of ${gapTurns} replies measured to their end`);
    if (results.length === 0 || !top) throw new Error('no valid concurrency step: the client could not drive even the first step, or sessions failed');
    for (const { type, lat: l } of vendorRuns) {
      if (l.samples.length < vendorTurns || l.afterTts.length < vendorTurns) throw new Error(`vendor ${type}: ${l.afterTts.length} of ${vendorTurns} replies measured at the fake`);
    }
    if (failedSessions.length > 0) throw new Error(`${failedSessions.length} session(s) failed during the load: ${failedSessions.slice(0, 3).join('; ')}`);
    if (!base) throw new Error('baseline concurrency step missing');
    const held = results.filter((r) => r.held && r.clientOk).at(-1);
    const figures: Figure[] = [
      { name: 'session_reply_latency_p50', value: latP50, unit: 'ms', baseline: rttP50, note: `end of speech (t0) -> first response_audio, ${lat.samples.length} turns; baseline: socket RTT, no runtime` },
      { name: 'session_reply_latency_p99', value: latP99, unit: 'ms', baseline: rttP99, note: 'the same, p99' },
      { name: 'session_added_latency_p99', value: latP99 - rttP99, unit: 'ms', baseline: TARGET_ADDED_MS, note: `reply p99 - RTT p99; baseline: the target (< ${TARGET_ADDED_MS} ms)` },
      { name: 'session_sentence_gap_p50', value: percentile(gaps.silences, 0.5), unit: 'ms', baseline: gapBaseline, note: `silence inside a reply of two ${GAP_TONE_MS} ms sentences, TTS answering after ${GAP_TTS_WAIT_MS} ms; baseline: TTS first audio p50 - first sentence (no look-ahead)` },
      { name: 'session_sentence_gap_p99', value: percentile(gaps.silences, 0.99), unit: 'ms', baseline: gapBaseline, note: 'the same, p99' },
      ...vendorRuns.map(({ type, lat: l }) => ({
        name: `session_vendor_first_audio_${type}_p50`,
        value: percentile(l.samples, 0.5),
        unit: 'ms',
        baseline: VENDOR_FIRST_CHUNK_MS,
        note: `${type} adapter: end of speech -> first response_audio (the first sentence is ready within ms), p99 ${f1(percentile(l.samples, 0.99))}; baseline: the fake vendor's own delay`,
      })),
      {
        name: 'session_turn_timeline_cpu_per_turn',
        value: timeline.withUs,
        unit: 'us',
        baseline: timeline.withoutUs,
        note: `CPU per agent turn (runtime on virtual time, vendor fakes) with the timeline recorded, its metrics and its store write (SQLite); baseline: the same turns with no timeline; ${timeline.turns} turns, ${f1(timeline.withUs - timeline.withoutUs)} us added`,
      },
      { name: 'session_cpu_per_session', value: top.cpuMsPerSessionSec, unit: 'ms/s', baseline: base.cpuMsPerSessionSec, note: `server CPU ms per session-second at ${top.sessions} sessions; baseline: bare ws server, same load` },
      { name: 'sessions_per_core', value: 1000 / top.cpuMsPerSessionSec, unit: 'sessions', baseline: 1000 / base.cpuMsPerSessionSec, note: '1000 / cpu_per_session; baseline: bare ws server' },
      { name: 'sessions_held', value: held?.sessions ?? 0, unit: 'sessions', baseline: TARGET_SESSIONS, note: `highest step held (main thread < 100 %, on-time >= 99 %, all replied); baseline: the target (${TARGET_SESSIONS}); steps ${steps.join(',')}` },
      { name: 'session_loaded_reply_latency_p99', value: top.latencyP99, unit: 'ms', baseline: base.latencyP99, note: `t0 -> first response_audio at ${top.sessions} sessions; baseline: bare server, same load` },
      { name: 'session_loaded_on_time_share', value: top.onTime * 100, unit: '%', baseline: base.onTime * 100, note: `chunks on time at ${top.sessions} sessions; baseline: bare server` },
    ];
    if (otlp && got) {
      figures.push({ name: 'session_trace_spans_per_export', value: got.spans, unit: 'spans', baseline: Math.max(1, got.requests), note: `tracing on (BENCH_SESSION_OTLP=1): spans received by the OTLP sink; baseline: its export requests (ratio: spans per batch)` });
    }
    printFigures(`bench/session: runtime latency and concurrent sessions${otlp ? ' (tracing on, OTLP/HTTP to a local sink)' : ''}`, figures);
    const lastTried = results.at(-1);
    if (lastTried && !lastTried.clientOk) {
      process.stdout.write(`note: the step of ${lastTried.sessions} sessions was limited by the client (send lag p99 ${f1(lastTried.sendLagP99)} ms, loop delay p99 ${f1(lastTried.loopDelayP99)} ms): higher steps were not measured; sessions_per_core is extrapolated from CPU.\n`);
    }
  } finally {
    for (const r of runs) r.close();
    for (const c of children.reverse()) await stopChild(c);
    await fakeVendors?.close();
    await otlp?.close();
    process.off('exit', killAll);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** An OTLP/HTTP receiver that only counts what the daemon exports (BENCH_SESSION_OTLP=1). */
async function startOtlpSink(): Promise<{ url: string; received(): { requests: number; spans: number; bytes: number }; close(): Promise<void> }> {
  const got = { requests: 0, spans: 0, bytes: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      got.requests++;
      got.bytes += body.length;
      try {
        const parsed = JSON.parse(body.toString('utf8')) as { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }> };
        for (const r of parsed.resourceSpans ?? []) for (const sc of r.scopeSpans ?? []) got.spans += sc.spans?.length ?? 0;
      } catch {
        // Not JSON: counted as a request and its bytes only.
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, HOST, r));
  return {
    url: `http://${HOST}:${(server.address() as AddressInfo).port}`,
    received: () => ({ ...got }),
    close: () => new Promise((r) => server.close(() => r())),
  };
}
