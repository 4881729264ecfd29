/**
 * bench/bridge: N concurrent phone calls through the whole call bridge: SIPp places the
 * calls and plays most callers' RTP, this process is the phone of a sample of them (the heard
 * figures), callbridge bridges each call to a voice
 * session of `local/echo`. Per step: CPU and memory per call, the bridge-added processing latency
 * per direction (p50/p99) beside the media-path floor measured in the same run, whether the bridge
 * sends every 20 ms frame on time (timed inside the bridge) and, secondary, whether the callers
 * hear them on time (timed at arrival here). Targets (this 2-core machine): 200
 * concurrent bridged calls with no audio gaps (every 20 ms frame SENT on time within 5 ms) and
 * added latency under 5 ms p99 per direction. Targets are reported, never asserted; run() throws
 * when the measurement is invalid (a process did not start, a call was not established or failed,
 * no audio flowed, A's send timing saw no frame).
 *
 * Processes (all on 127.0.0.1):
 *   SIPp (UAC; RTP of N - K calls) --SIP+RTP--> A: bench/bridge-server.ts, the bridge daemon
 *   SIPp (UAC, signaling of K calls) --SIP-->     (SIP, RTP, the bridge; no agent runtime of its own)
 *   this process: K RTP sockets <--RTP------->
 *                                          |  bridge.upstream_url: POST /v1/session-token + WebSocket
 *                                          v
 *                                        B: bench/session-server.ts, the voice server (local STT,
 *                                           local/echo, energy VAD; TTS = bench/session-tts-server.ts,
 *                                           a fake that answers `tone-<ms>` at once)
 * Why two daemons: the bridge talks to its voice server over the same loopback WebSocket whether
 * that server is in its own process (the default) or another one (upstream mode): one code path.
 * Splitting them lets /proc/<pid>/stat of A be the bridge's CPU alone (SIP, RTP, media, the
 * WebSocket client), not the agent runtime's; B's CPU is printed beside it. The fake TTS keeps
 * eSpeak's synthesis cost (the agent's, not the bridge's) out of a 2-core machine.
 *
 * One call: INVITE (SDP offer: the caller's RTP address) -> 200 (the answer is read from SIPp's
 * <log> as soon as it arrives) -> ACK -> hold -> BYE. Two SIPp processes place the N calls over
 * the same ramp (BENCH_BRIDGE_RATE, 25 calls/s in all); each call holds long enough that all are
 * up for a settle time (3 s) plus the measured window (BENCH_BRIDGE_SECS, 20 s):
 *   - K = BENCH_BRIDGE_NODE_CALLERS (20) calls offer this process's RTP socket for the call (from
 *     SIPp's -inf CSV); this process sends their audio and times what they hear (the heard figures);
 *   - the other N - K offer SIPp's own RTP socket ([rtpstream_audio_port]) and SIPp plays their
 *     audio itself (<exec rtp_stream>, the same 3 s cycle, looped from the answer on). SIPp's RTP
 *     threads are C: with every caller in this process the load generator took ~30 % of a core at
 *     200 calls, with SIPp playing them ~15 % (sipp% + client%), which the bridge gets back.
 * The caller's audio: 20 ms PCMU packets in real time (here on a drift-free schedule, calls spread
 * over the 20 ms; SIPp paces its own), a 3 s cycle of 0.5 s speech-like audio (-16 dBFS harmonics
 * with a syllable envelope) and 2.5 s of line noise (-70 dBFS), each call at its own phase. The agent (vad 0.1/0.3 s) answers
 * every utterance with "You said: ..." as two TTS pieces of tone-800: 1.6 s of audio per 3 s, so
 * both directions carry audio all the time and the outbound path plays a talk spurt per cycle.
 *
 * Measured over the window, per step:
 *   - CPU per call: A's user+system CPU / window / N, in ms of CPU per second of call; also A's
 *     main thread (its event loop) as % of a core, B's CPU and the whole machine's busy share
 *     (/proc/stat), this process's CPU, both SIPp processes' CPU. Below the table, per busy thread
 *     of A and B (>= 5 % of a core): its CPU and the time it was runnable but waiting for a CPU
 *     (/proc/<pid>/task/<tid>/schedstat), % of the window: whether a late frame waited for a CPU;
 *     its minor page faults per second. CPU stalls: times a CPU did not run a real-time thread
 *     that wanted it for > 4 ms (a SCHED_RR 99 sleeper pinned to each CPU woke that late: the
 *     vCPU not running, non-preemptible kernel work, RT throttling; bench/lib/cpu-stall-probe.ts).
 *   - memory per call: (A's VmRSS with N calls up - A's VmRSS idle before the step) / N.
 *   - bridge-added latency: the bridge's own processing per frame, timed inside A (see
 *     bench/bridge-server.ts): in = RTP receive (parse, jitter-buffer insert) + the 20 ms tick
 *     (playout, decode, 8k->24k, base64, input_audio send); out = response_audio handling (JSON,
 *     base64, queue) + encode and send (24k->8k, G.711, RTP). A direction's p99 is the SUM of its
 *     two parts' p99s (an upper bound). The jitter buffer's depth and the playout queue's lead are
 *     buffering by design, not processing, and are not in it (docs/media-jitter-and-pacing.md).
 *     Floor: bench/media run in a child process at the start of this run (the same media path in
 *     a closed loop over loopback UDP, without SIP, WebSocket or the bridge): its
 *     media_latency_p50/p99 (both directions' handler time per packet) and media_path_us_per_frame.
 *   - sent on time (the primary figure), timed inside A by wrapping RtpSession.prototype.send
 *     (bench/bridge-server.ts has the exact rules). The bridge sends RTP continuously, one 20 ms
 *     frame per tick of a drift-free pacer (encoded silence while the agent is quiet). Per call,
 *     every audio send (timestampIncrement > 0) is stamped when the bridge hands it to send();
 *     frame i (its position: the sum of the earlier increments / its increment, plus the frames
 *     the schedule moved on by at stalls) is due at ref + 20 ms * i, ref = the earliest
 *     (send time - 20 ms * i) of that call so far in the window (not its whole life: see
 *     bench/bridge-server.ts); lateness
 *     = (send time - 20 ms * i) - ref; on time = lateness <= 5 ms. `sent on time%` = on-time
 *     frames / frames sent in the window, all calls; `send late p99`/max: of those latenesses.
 *     `skipped` = frames of the calls' schedules never sent in the window, each a gap the caller
 *     hears: position jumps over more than one frame, sends refused by send(), and stalls: a send
 *     k = floor((lateness + 5 ms) / 20 ms) >= 1 frames behind (the pacer skips stalled ticks
 *     without moving the timestamp, or catches up in a burst) counts k and moves the call's
 *     schedule on by k frames, so one stall is one gap, not every later frame late. `A
 *     underruns` = agent talk spurts (OutboundPath.encodeAndSend with marker) starting within
 *     300 ms of the same call's previous agent frame, no barge-in (OutboundPath.clear) between:
 *     the agent's audio ran dry mid-reply. Judged by A's own clock, so the callers' pacing and
 *     receive timing are not in it; A still shares the 2 cores with B, SIPp and the callers, so a
 *     machine-busy step is pessimistic for A.
 *   - held outside stalls (information, RESULT bridge_calls_held_outside_stalls): the verdict's
 *     test again with each late frame whose [due, sent] overlaps a CPU stall of the probe counted
 *     on time and its skips forgiven (tick jumps and refused sends stay counted). No thread of
 *     the bridge can be faster than the CPU it runs on; this separates the bridge's misses from
 *     the platform's. The header also measures the platform alone: the probe's stalls over
 *     BENCH_BRIDGE_IDLE_SECS (15) before anything of the bench starts.
 *   - A's event-loop delay: monitorEventLoopDelay({ resolution: 5 }) records the whole interval
 *     between its timer's firings (an idle loop shows ~5 ms), so every delay here, A's and this
 *     process's, percentiles and max, is max(0, value - 5 ms): the delay beyond the timer's period.
 *   - heard on time (secondary): every RTP packet the callers receive inside the window, by
 *     arrival time in this process. Per call, spurts: a new one at each marker bit (the first
 *     frame of an agent reply) or where arrivals pause 100 ms longer than the timestamps advance.
 *     Within a spurt, packet k (from the RTP timestamp) is due at ref + 20 ms * k, ref = the
 *     spurt's earliest (arrival - 20 ms * k) so far; on time = arrived within 5 ms of due
 *     (`heard on time%` = on time / packets, `heard late p99`). A packet over 20 ms late is a
 *     pause (counted once in `heard underruns`; the schedule re-anchors on it). `missing` =
 *     timestamp jumps inside a spurt (frames never received). `heard underruns` also counts
 *     spurts starting within 300 ms of the previous agent-audio packet (a payload other than the
 *     bridge's encoded silence: the bridge sends silence between replies, so the packet just
 *     before a marker is silence).
 *   - the load generator: how late this process sent its packets (`send p99`, and the share
 *     within 5 ms of their schedule) and its event-loop delay p99 (`client loop p99`, corrected as
 *     above). A step is CLIENT-LIMITED when either p99 is over 5 ms or the machine was >= 97 %
 *     busy: the callers' arrival times are then not trustworthy to 5 ms, and a heard miss is not
 *     the bridge's. It qualifies the heard figures only; the verdict does not use them.
 * A step is HELD when all N calls were up through the window (A bridging N calls at its end, every
 * SIPp call successful, and A sending frames on all N calls in the window), A's sent-on-time
 * share >= 99.9 %, no skipped frame, no A underrun, and A's event loop (main thread CPU) below
 * 95 % of a core. Steps go on to the end (BENCH_BRIDGE_STEPS, default 50,100,150,200).
 * Media threads (docs/media-workers.md): BENCH_BRIDGE_MEDIA_THREADS, BENCH_BRIDGE_MEDIA_NICE and
 * BENCH_BRIDGE_MEDIA_REALTIME set A's rtp.media_threads, rtp.media_thread_nice and
 * rtp.media_thread_realtime (unset: the daemon's defaults), BENCH_BRIDGE_MEDIA_YOUNG_GEN_MB its
 * rtp.media_thread_young_gen_mb. With media threads the probe runs on
 * each of them too (bench/lib/bridge-probe-worker.ts) and the figures are merged; `loop%` is then
 * A's main thread only, and each media thread's event-loop delay and GC are printed below the
 * table, with its late frames (over 5 ms) and how many of them overlapped a GC pause of that
 * thread or of the main thread. The in-direction latency is measured as before (RTP
 * receive + tick up to the input_audio send, all in the media thread); were caller frames to
 * cross to the main thread (a recording), `handoffIn` (tick start in the worker to arrival on
 * the main thread) would be added as a third part.
 * BENCH_BRIDGE_REALTIME=1 runs the real-time deployment (docs/media-workers.md): media threads
 * SCHED_RR 10, A's and B's main threads SCHED_RR 5 (BENCH_BRIDGE_MAIN_REALTIME; B's main thread
 * is where the voice sessions run, as A's would be in the one-daemon set-up); and the fake TTS SCHED_RR 4, below B's main thread
 * (BENCH_BRIDGE_TTS_REALTIME; why: at the declaration). BENCH_BRIDGE_LOADGEN_REALTIME=<priority>
 * (diagnostic, default 0) puts the load generator (SIPp, this process) under SCHED_RR too. The
 * header prints the kernel's real-time throttling setting; per step, B's TTS requests' wait for
 * their first audio (the fake answers at once: a long wait is CPU starvation, and the agent's
 * next sentence comes late).
 * A and B run under node --single-threaded-gc, as npm start and the Docker image run the daemon
 * (BENCH_BRIDGE_CONCURRENT_GC=1: without it, V8's GC helper threads beside the media threads).
 * Diagnostics: BENCH_BRIDGE_NODE_ARGS (node flags for A, e.g. --cpu-prof; BENCH_BRIDGE_B_NODE_ARGS
 * for B), BENCH_BRIDGE_MALLOC_ARENA_MAX (A's and B's MALLOC_ARENA_MAX; default 2, as npm start and the
 * Docker image set it; `default` leaves it unset: glibc's 8 arenas per core), BENCH_BRIDGE_A_NICE
 * (A's scheduling priority, e.g. -10 as root; default unchanged), BENCH_BRIDGE_LOG=<file> (A's
 * log at info level: why calls ended).
 *
 * The media-stream phase (the carrier's programmable-voice path, docs/telco.md), after the SIP
 * steps and against the same A and B: BENCH_BRIDGE_STREAMS (100; 0 skips the phase) carrier
 * stream calls to an imported number (written into A's store before it starts: account, auth
 * token, assigned to the same agent; A's http.public_url is its own loopback address, see
 * bench/bridge-server.ts). bench/lib/media-stream-callers.ts is the carrier: per call a voice
 * webhook POST signed as Twilio signs it (X-Twilio-Signature, HMAC-SHA1 of the URL and the sorted
 * parameters with the auth token), the TwiML's <Connect><Stream>, then that WebSocket with
 * connected, start (the one-time token from the TwiML's parameters), media of 160 mu-law bytes
 * base64 every 20 ms of real time (the same 3 s caller cycle as the SIP callers, each stream at
 * its own phase) and, after the window, stop; it plays what it receives at 20 ms per frame and
 * echoes marks, as the carrier does. Calls are placed at BENCH_BRIDGE_RATE, then the same settle
 * time and BENCH_BRIDGE_SECS window as a SIP step. Measured over the window: A's CPU per call
 * (ms of CPU per second of call; stream media runs on A's main thread, so `event loop` is
 * printed beside it), B's, this process's and the machine's; and, at this process's arrival
 * times, the agent's `media` messages: talk spurts split where arrivals pause > 100 ms; within a
 * spurt message k is due at ref + 20 ms * k (ref: the spurt's earliest arrival - 20 ms * k); off
 * slot = more than 5 ms after its slot (over 20 ms: a pause, counted, and the schedule re-anchors).
 * A stream is held when its socket stayed open until this side's stop, it received the agent's
 * audio in the window (replies to the caller's audio: the first message is over before it) and
 * >= 99 % of those messages were on their slot. The bridge's own probe (bench/bridge-server.ts)
 * times RTP only, so none of the SIP figures above covers streams. The phase throws when a
 * webhook does not answer <Connect><Stream> or a stream is not open after the settle time.
 *
 * Figures (RESULT lines): bridge_calls_held (the highest step held; baseline: the target 200);
 * at the reported step, the highest step run (every figure below but the heard one is measured
 * inside A, which the load generator's pacing does not distort, so no step is disqualified; the
 * heard figure's note says when that step was client-limited): bridge_cpu_per_call (baseline:
 * the media floor per call, media_path_us_per_frame * 50 frames/s), bridge_mem_per_call
 * (baseline: B's memory per session at the same step), bridge_in_latency_p50/p99 and
 * bridge_out_latency_p50/p99 (baseline: the floor's media_latency_p50/p99), bridge_on_time_share
 * (A's sent-on-time share) and bridge_heard_on_time_share (the callers' heard-on-time share),
 * both with baseline: the share of this process's own sends on time within 5 ms (the load
 * generator's pacing). With the media-stream phase also: bridge_streams_held (streams held as
 * above; baseline: streams placed), bridge_stream_cpu_per_call (A's CPU ms per second of stream
 * call; baseline: this run's bridge_cpu_per_call, the SIP path at the reported step: the two are
 * at different call counts unless BENCH_BRIDGE_STREAMS equals that step, and A's fixed costs
 * (idle media threads) weigh more per call at few calls) and bridge_stream_off_slot_share (the
 * agent's media messages more than 5 ms off their slot at this process, a figure, not a target;
 * baseline: the share of this process's own media sends more than 5 ms late).
 */
import dgram from 'node:dgram';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { openStore } from '../src/store/index.ts';
import { kernelRtThrottling, setRoundRobin } from '../src/media/thread-scheduling.ts';
import { createCodec } from '../src/media/codecs.ts';
import { startCpuStallProbe, STALL_MS, type CpuStalls } from './lib/cpu-stall-probe.ts';
import { lateOverlapping } from './lib/bridge-probe.ts';
import { cpuSeconds, daemonLoopDelay, mainThreadCpuSeconds, ROOT, roundRobinProcess, running, startChild, statCpuSplit, stopChild, waitForLine, type Child, type LoopDelay } from './lib/child.ts';
import { printFigures, table, type Figure } from './lib/result.ts';
import { sippAvailable } from '../test/interop/sipp.ts';
import { envIntegerList, envNumber } from './lib/env.ts';
import { spawnCallerSipp, type CallerSipp } from './lib/caller-sipp.ts';
import { MediaStreamCallers, PACED_SHARE, type StreamFigures } from './lib/media-stream-callers.ts';

const HOST = '127.0.0.1';
const FRAME_MS = 20;
const ON_TIME_MS = 5;
const NUMBER = '+15550003000';
/** The imported carrier number of the media-stream phase, assigned to the same agent. */
const STREAM_NUMBER = '+15550003001';
const SETTLE_MS = 3000;
const CYCLE_FRAMES = 150;
const SPEECH_FRAMES = 25;
const TARGET_CALLS = 200;
/** Arrivals pausing this much longer than their timestamps advance start a new talk spurt. */
const SPURT_PAUSE_MS = 100;
/** A packet this late inside a spurt is a pause in the agent's audio (counted as a gap), not pacing. */
const PAUSE_LATE_MS = 20;
/** A talk spurt starting this soon after the previous agent audio is an underrun. */
const UNDERRUN_MS = 300;
/** monitorEventLoopDelay's resolution: it records whole intervals of its timer, so this is subtracted. */
const LOOP_RESOLUTION_MS = 5;
/** The bridge's encoded silence (PCMU of zeros): the payload it sends while the agent is quiet. */
const SILENCE = (() => {
  const out = new Uint8Array(160);
  createCodec('PCMU').encode(new Int16Array(160), out);
  return Buffer.from(out);
})();

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function quantile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function rssMb(pid: number | undefined): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

interface BusyThread {
  tid: number;
  name: string;
  cpuPct: number;
  sysPct: number;
  waitPct: number;
  runsPerSec: number;
  /** Minor page faults per second: memory the thread touched for the first time (or again after the kernel took it). */
  faultsPerSec: number;
}

/** One thread's counters: CPU seconds (of them in the kernel: sys), seconds runnable but waiting, times put on a CPU. */
type ThreadTimes = { name: string; cpu: number; sys: number; wait: number; runs: number; faults: number };

/** Per thread of a process (/proc/<pid>/task/<tid>/schedstat and stat). */
function threadTimes(pid: number | undefined): Map<number, ThreadTimes> {
  const out = new Map<number, ThreadTimes>();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        // schedstat: ns on a CPU, ns runnable but waiting, times it was put on a CPU.
        const [cpu, wait, runs] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').trim().split(/\s+/).map(Number);
        // The kernel's share: syscalls and, on loopback, the receivers' network stack and the
        // softirqs that ran in this thread's time.
        const { sys, minorFaults } = statCpuSplit(`/proc/${pid}/task/${tid}/stat`);
        const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
        out.set(Number(tid), { name, cpu: (cpu ?? 0) / 1e9, sys, wait: (wait ?? 0) / 1e9, runs: runs ?? 0, faults: minorFaults });
      } catch {
        // the thread ended
      }
    }
  } catch {
    // no /proc
  }
  return out;
}

/**
 * Busy and total jiffies of the whole machine (/proc/stat's cpu line), and steal: time the
 * hypervisor ran something else while a vCPU had work (counted in busy; a run with much of it
 * had less machine than its CPU figures suggest).
 */
function machineJiffies(): { busy: number; total: number; steal: number; irq: number } {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const idle = (f[3] ?? 0) + (f[4] ?? 0);
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
    // irq + softirq: with IRQ time accounting, the network stack's softirqs land here rather
    // than in the thread they interrupted.
    return { busy: total - idle, total, steal: f[7] ?? 0, irq: (f[5] ?? 0) + (f[6] ?? 0) };
  } catch {
    return { busy: Number.NaN, total: Number.NaN, steal: Number.NaN, irq: Number.NaN };
  }
}

// ---------------------------------------------------------------------------------------------
// The callers' audio: one 3 s cycle of PCMU payloads

function cyclePayloads(): Buffer[] {
  const out: Buffer[] = [];
  const codec = createCodec('PCMU');
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff) * 2 - 1;
  for (let f = 0; f < CYCLE_FRAMES; f++) {
    const pcm = new Int16Array(160);
    for (let i = 0; i < 160; i++) {
      const n = f * 160 + i;
      const t = n / 8000;
      if (f < SPEECH_FRAMES) {
        // Voiced speech-like: harmonics of a gliding 110-140 Hz pitch, formant-ish weights, 4 Hz syllables.
        const f0 = 125 + 15 * Math.sin(2 * Math.PI * 1.3 * t);
        let x = 0;
        for (let k = 1; k <= 25; k++) {
          const fk = k * f0;
          if (fk > 3400) break;
          const w = Math.exp(-(((fk - 500) / 300) ** 2)) + 0.6 * Math.exp(-(((fk - 1500) / 400) ** 2)) + 0.3 * Math.exp(-(((fk - 2500) / 500) ** 2));
          x += w * Math.sin(2 * Math.PI * fk * t + k);
        }
        const env = 0.55 + 0.45 * Math.sin(2 * Math.PI * 4 * t);
        pcm[i] = Math.max(-32768, Math.min(32767, Math.round(4200 * env * x)));
      } else {
        pcm[i] = Math.round(10 * rand()); // about -70 dBFS line noise
      }
    }
    const enc = new Uint8Array(160);
    codec.encode(pcm, enc);
    out.push(Buffer.from(enc));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The callers: one RTP socket per call, one send schedule for all

interface Caller {
  sock: dgram.Socket;
  port: number;
  remote?: { address: string; port: number };
  startAt: number;
  sent: number;
  seq: number;
  ts: number;
  ssrc: number;
  phase: number;
  /** Arrivals inside the window: time (ms, performance.now()), RTP timestamp, marker, agent audio (not the encoded silence). */
  at: number[];
  rtpTs: number[];
  marker: boolean[];
  agent: boolean[];
  received: number;
}

class Callers {
  readonly calls: Caller[] = [];
  readonly #payloads: Buffer[];
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  window: { from: number; to: number } = { from: Infinity, to: -Infinity };
  /** Send lateness (ms) of packets sent inside the window. */
  lateness: number[] = [];

  constructor(payloads: Buffer[]) {
    this.#payloads = payloads;
  }

  async open(n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const sock = dgram.createSocket('udp4');
      await new Promise<void>((r) => sock.bind(0, HOST, r));
      const c: Caller = { sock, port: sock.address().port, startAt: 0, sent: 0, seq: (Math.random() * 0x8000) | 0, ts: (Math.random() * 0x7fffffff) >>> 0, ssrc: (Math.random() * 0xffffffff) >>> 0, phase: Math.floor(Math.random() * CYCLE_FRAMES), at: [], rtpTs: [], marker: [], agent: [], received: 0 };
      sock.on('message', (msg) => {
        if (msg.length < 12 || msg[0]! >> 6 !== 2) return;
        const pt = msg[1]!;
        if (pt >= 200 && pt <= 204) return; // RTCP (callbridge sends it to port + 1, maybe another call's socket)
        c.received++;
        const now = performance.now();
        if (now < this.window.from || now > this.window.to) return;
        c.at.push(now);
        c.rtpTs.push(msg.readUInt32BE(4));
        c.marker.push((pt & 0x80) !== 0);
        c.agent.push(msg.length !== 12 + SILENCE.length || SILENCE.compare(msg, 12) !== 0);
      });
      sock.on('error', () => {});
      this.calls.push(c);
    }
  }

  /** Starts a call's stream towards callbridge's SDP answer; calls are spread over the 20 ms. */
  start(c: Caller, remote: { address: string; port: number }): void {
    if (c.remote) return;
    c.remote = remote;
    const now = performance.now();
    const slot = (this.calls.indexOf(c) % 10) * 2;
    c.startAt = now + ((slot - (now % FRAME_MS) + FRAME_MS) % FRAME_MS);
    if (this.#timer === undefined) this.#loop();
  }

  #loop = (): void => {
    if (this.#closed) return;
    const now = performance.now();
    let next = now + FRAME_MS;
    for (const c of this.calls) {
      if (!c.remote) continue;
      let due = c.startAt + c.sent * FRAME_MS;
      let burst = 0;
      while (due <= now + 0.3) {
        if (now - due > 3 * FRAME_MS || burst >= 3) {
          // Stalled: skip the stale ones (timestamps advance, as after a loss).
          c.sent++;
          c.seq = (c.seq + 1) & 0xffff;
          c.ts = (c.ts + 160) >>> 0;
          due += FRAME_MS;
          continue;
        }
        const payload = this.#payloads[(c.phase + c.sent) % CYCLE_FRAMES]!;
        const p = Buffer.allocUnsafe(172);
        p[0] = 0x80;
        p[1] = c.sent === 0 ? 0x80 : 0;
        p.writeUInt16BE(c.seq, 2);
        p.writeUInt32BE(c.ts, 4);
        p.writeUInt32BE(c.ssrc, 8);
        payload.copy(p, 12);
        c.sock.send(p, c.remote.port, c.remote.address);
        if (now >= this.window.from && now <= this.window.to) this.lateness.push(now - due);
        c.sent++;
        c.seq = (c.seq + 1) & 0xffff;
        c.ts = (c.ts + 160) >>> 0;
        due += FRAME_MS;
        burst++;
      }
      if (due < next) next = due;
    }
    this.#timer = setTimeout(this.#loop, Math.max(0, next - performance.now()));
  };

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await Promise.all(this.calls.map((c) => new Promise<void>((r) => c.sock.close(() => r()))));
  }
}

/** On-time analysis of what the callers heard inside the window. */
function analyse(calls: readonly Caller[]): { frames: number; onTime: number; late: number[]; missing: number; underruns: number; pauses: number; spurts: number; silentCalls: number } {
  let frames = 0;
  let onTime = 0;
  let missing = 0;
  let underruns = 0;
  let pauses = 0;
  let spurts = 0;
  let silentCalls = 0;
  const late: number[] = [];
  for (const c of calls) {
    if (c.at.length === 0) {
      silentCalls++;
      continue;
    }
    let i = 0;
    /** Arrival of the last agent-audio packet before the current spurt. */
    let lastAgent = -Infinity;
    while (i < c.at.length) {
      // A spurt: from a marker (or the window's first packet) to before the next marker.
      // A new spurt also where the arrivals pause far longer than the timestamps advance (a sender
      // that sends nothing while the agent is silent; callbridge sends encoded silence, so its
      // spurts start at markers).
      let j = i + 1;
      while (j < c.at.length && !c.marker[j] && c.at[j]! - c.at[j - 1]! - (((c.rtpTs[j]! - c.rtpTs[j - 1]!) >>> 0) / 160) * FRAME_MS < SPURT_PAUSE_MS) j++;
      spurts++;
      // The packet before a marker is the bridge's silence: measure from the last agent audio.
      if (c.at[i]! - lastAgent < UNDERRUN_MS) underruns++;
      // Forward pass: packet k is due at ref + 20 ms * k (k from the RTP timestamp); ref is the
      // earliest start seen so far. A packet more than PAUSE_LATE_MS late is a pause (the playout
      // queue had nothing: the agent's audio came late), counted once as a gap, and re-anchors.
      const ts0 = c.rtpTs[i]!;
      let ref = Infinity;
      let prevK = -1;
      for (let k = i; k < j; k++) {
        const idx = ((c.rtpTs[k]! - ts0) >>> 0) / 160;
        if (prevK >= 0 && idx - prevK > 1) missing += idx - prevK - 1;
        prevK = idx;
        const anchor = c.at[k]! - idx * FRAME_MS;
        if (anchor < ref) ref = anchor;
        let l = anchor - ref;
        if (l > PAUSE_LATE_MS) {
          pauses++;
          ref = anchor;
          l = 0;
        }
        late.push(l);
        frames++;
        if (l <= ON_TIME_MS) onTime++;
      }
      for (let k = j - 1; k >= i; k--) {
        if (c.agent[k]) {
          lastAgent = c.at[k]!;
          break;
        }
      }
      i = j;
    }
  }
  return { frames, onTime, late, missing, underruns, pauses, spurts, silentCalls };
}

// ---------------------------------------------------------------------------------------------
// Processes

interface ProcStats {
  rtpIn: { n: number; p50: number; p99: number; max: number };
  tickIn: { n: number; p50: number; p99: number; max: number };
  /** Media workers only: a caller frame's tick start (worker) to its arrival on A's main thread. */
  handoffIn?: { n: number; p50: number; p99: number; max: number };
  msgOut: { n: number; p50: number; p99: number; max: number };
  sendOut: { n: number; p50: number; p99: number; max: number };
  /** A's send-side timing of the window (bench/bridge-server.ts): lateness in ms. */
  send: { frames: number; onTime: number; skipped: number; calls: number; p50: number; p99: number; p999: number; max: number };
  /** Agent talk spurts restarting within 300 ms of the previous agent frame (A-side). */
  underruns: number;
  /** A's event-loop delay beyond the monitor's 5 ms resolution, ms. */
  loop: { p50: number; p99: number; max: number };
  gc: { count: number; totalMs: number; maxMs: number; maxKind?: string; lateFrames?: number; duringGc?: number };
  /** Media workers (BENCH_BRIDGE_MEDIA_THREADS): each one's event-loop delay and GC. */
  mediaThreads?: { index: number; loop: { p50: number; p99: number; max: number }; gc: { count: number; totalMs: number; maxMs: number; maxKind?: string; lateFrames?: number; duringGc?: number }; duringMainGc?: number }[];
  /** A file with every thread's frames sent over 5 ms late, [due, sent] pairs in epoch ms (capped per thread). */
  lateFile?: string;
  active: number;
  heapUsedMb: number;
}

let statsSeq = 0;
async function bridgeStats(a: Child): Promise<ProcStats> {
  // Each STATS line carries its request's number: the child's output is kept as a bounded tail,
  // so a position in it does not say which line is new.
  const seq = ++statsSeq;
  process.kill(a.proc.pid!, 'SIGUSR2');
  const deadline = Date.now() + 5000;
  for (;;) {
    const m = new RegExp(`STATS ${seq} (\\{.*\\})\\n`).exec(a.output());
    if (m) return JSON.parse(m[1]!) as ProcStats;
    if (Date.now() > deadline) throw new Error(`the bridge daemon did not print STATS:\n${a.output()}`);
    await sleep(20);
  }
}

async function api(base: string, key: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(base + path, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** bench/media in a child: the media-path floor of this run. */
async function mediaFloor(): Promise<{ pathUs: number; p50: number; p99: number; output: string }> {
  const href = pathToFileURL(join(ROOT, 'bench', 'media.ts')).href;
  const child = startChild('bench/media', ['--import', 'tsx', '-e', `import(${JSON.stringify(href)}).then((m) => m.run()).then(() => process.exit(0), (e) => { console.error(e); process.exit(1); })`], {
    BENCH_MEDIA_FRAMES: process.env.BENCH_MEDIA_FRAMES ?? '10000',
  });
  const code = await child.exited;
  const out = child.output();
  if (code !== 0) throw new Error(`bench/media (the floor) failed:\n${out}`);
  const get = (name: string) => {
    const m = new RegExp(`^RESULT ${name} (\\S+) \\S+ baseline=(\\S+)`, 'm').exec(out);
    if (!m) throw new Error(`bench/media printed no ${name}:\n${out}`);
    return Number(m[1]);
  };
  return { pathUs: get('media_path_us_per_frame'), p50: get('media_latency_p50'), p99: get('media_latency_p99'), output: out };
}

// ---------------------------------------------------------------------------------------------
// A step

interface Step {
  n: number;
  established: number;
  aCpuMsPerCallSec: number;
  aMainPct: number;
  aCpuPct: number;
  bCpuPct: number;
  clientCpuPct: number;
  /** Both SIPp processes' CPU (signaling, and the RTP SIPp plays), % of a core. */
  sippCpuPct: number;
  /**
   * A's (B's) threads busy >= 5 % of a core: CPU, of it in the kernel (sysPct), and run-queue wait
   * (runnable, no CPU), % of the window; runsPerSec: how often the thread was put on a CPU
   * (wake-ups and preemptions), per second; faultsPerSec: minor page faults per second.
   */
  aThreads: BusyThread[];
  bThreads: BusyThread[];
  /** Calls whose RTP this process played and heard (the rest SIPp played). */
  nodeCallers: number;
  machineBusyPct: number;
  /** Of the whole machine's time, % stolen by the hypervisor (inside machineBusyPct). */
  stealPct: number;
  irqPct: number;
  /** Times in the window a CPU did not run a real-time thread for > STALL_MS (bench/lib/cpu-stall-probe.ts). */
  cpuStalls: { count: number; maxMs: number; totalMs: number };
  /** A's late frames whose lateness overlaps a CPU stall, and the frames they skipped. */
  lateInStalls: { frames: number; skipped: number };
  /** Held but for the frames late during CPU stalls (information; the verdict is `held`). */
  heldOutsideStalls: boolean;
  /** B's event-loop delay beyond the monitor's 5 ms period, ms. */
  bLoop: LoopDelay;
  memPerCallMb: number;
  bMemPerCallMb: number;
  stats: ProcStats;
  inP50: number;
  inP99: number;
  outP50: number;
  outP99: number;
  /** A's send side (the verdict's). */
  sentOnTimeShare: number;
  sendLateP50: number;
  sendLateP99: number;
  sendLateMax: number;
  sentFrames: number;
  sendCalls: number;
  skipped: number;
  aUnderruns: number;
  /** The callers' arrivals (secondary). */
  heardOnTimeShare: number;
  heardLateP99: number;
  heardFrames: number;
  missing: number;
  heardUnderruns: number;
  spurtsPerCall: number;
  clientSendP99: number;
  clientSendOnTime: number;
  clientLoopP99: number;
  clientLimited: boolean;
  held: boolean;
  sippCode: number | null;
  failed: number;
}

async function runStep(n: number, ctx: { a: Child; b: Child; sippBin: string; sipPort: number; payloads: Buffer[]; windowSecs: number; rate: number; nodeCallers: number; cpuStalls: CpuStalls; loadgenRealtime: number }, log: (s: string) => void): Promise<Step> {
  const { a, b } = ctx;
  const rssA0 = rssMb(a.proc.pid);
  const rssB0 = rssMb(b.proc.pid);
  // k calls are this process's phones (the heard figure); SIPp itself plays the other n - k.
  const k = Math.min(n, ctx.nodeCallers);
  const callers = new Callers(ctx.payloads);
  await callers.open(k);
  const rampMs = Math.ceil((n / ctx.rate) * 1000);
  // 10 s of margin: on a saturated machine (or with the bridge prioritized) SIPp places the
  // calls slower than the planned ramp, and the first ones must still be up at the window's end.
  const holdMs = rampMs + SETTLE_MS + ctx.windowSecs * 1000 + 10_000;
  const byPort = new Map(callers.calls.map((c) => [c.port, c]));
  // Both SIPp processes ramp over the same time (calls interleaved), each at its share of the rate.
  const sipps: CallerSipp[] = [];
  if (k > 0) {
    sipps.push(spawnCallerSipp({
      bin: ctx.sippBin, realtime: ctx.loadgenRealtime, remote: `${HOST}:${ctx.sipPort}`, number: NUMBER, media: 'bench',
      csv: callers.calls.map((c, i) => `+1555100${String(i).padStart(4, '0')};${c.port}`),
      calls: k, periodMs: rampMs / k, holdMs, timeoutMs: holdMs + 60_000,
    }));
  }
  if (n > k) {
    sipps.push(spawnCallerSipp({
      bin: ctx.sippBin, realtime: ctx.loadgenRealtime, remote: `${HOST}:${ctx.sipPort}`, number: NUMBER, media: Buffer.concat(ctx.payloads),
      csv: Array.from({ length: n - k }, (_, i) => `+1555200${String(i).padStart(4, '0')};0`),
      calls: n - k, periodMs: rampMs / (n - k), holdMs, timeoutMs: holdMs + 60_000,
    }));
  }
  const describe = () => sipps.map((s) => s.describe()).join('\n');
  try {
    // Point each of this process's callers at callbridge's answer as soon as SIPp logs it.
    const deadline = Date.now() + rampMs + 20_000;
    let established = 0;
    while (established < n) {
      established = 0;
      for (const s of sipps) {
        for (const { mediaPort, address, port } of s.answers()) {
          established++;
          const c = byPort.get(mediaPort);
          if (c && !c.remote) callers.start(c, { address, port });
        }
      }
      if (established >= n) break;
      if (!sipps.every((s) => s.running())) throw new Error(`step ${n}: SIPp ended with ${established} of ${n} calls established:\n${describe()}`);
      if (Date.now() > deadline) throw new Error(`step ${n}: only ${established} of ${n} calls established within ${rampMs + 20_000} ms:\n${describe()}\nbridge daemon:\n${a.output().slice(-3000)}`);
      await sleep(20);
    }
    log(`  ${n} calls established; settling ${SETTLE_MS} ms`);
    await sleep(SETTLE_MS);
    // The window.
    await bridgeStats(a); // resets A's histograms
    await daemonLoopDelay(b); // and B's
    const loop = monitorEventLoopDelay({ resolution: 5 });
    loop.enable();
    const cpuA0 = cpuSeconds(a.proc.pid);
    const mainA0 = mainThreadCpuSeconds(a.proc.pid);
    const cpuB0 = cpuSeconds(b.proc.pid);
    const cpuSelf0 = process.cpuUsage();
    const cpuSipp0 = sipps.map((x) => cpuSeconds(x.pid()));
    const threadsA0 = threadTimes(a.proc.pid);
    const threadsB0 = threadTimes(b.proc.pid);
    const m0 = machineJiffies();
    const t0 = performance.now();
    callers.window = { from: t0, to: t0 + ctx.windowSecs * 1000 };
    await sleep(ctx.windowSecs * 1000);
    const t1 = performance.now();
    const secs = (t1 - t0) / 1000;
    const cpuStalls = ctx.cpuStalls.between(t0, t1);
    // A stall that began just before the window still makes the window's first frames late.
    const stallSpans = ctx.cpuStalls.spans(t0 - 100, t1).flatMap((x) => [x.startMs, x.endMs]);
    const stats = await bridgeStats(a);
    const bLoopRaw = await daemonLoopDelay(b);
    // As A's: the delay beyond the monitor's own 5 ms period. B's stalls are what make the
    // agent's audio run dry (its pacer sends 200 ms ahead).
    const bLoop = { p50: Math.max(0, bLoopRaw.p50 - LOOP_RESOLUTION_MS), p99: Math.max(0, bLoopRaw.p99 - LOOP_RESOLUTION_MS), max: Math.max(0, bLoopRaw.max - LOOP_RESOLUTION_MS), ttsFirst: bLoopRaw.ttsFirst };
    const cpuA = cpuSeconds(a.proc.pid) - cpuA0;
    const mainA = mainThreadCpuSeconds(a.proc.pid) - mainA0;
    const cpuB = cpuSeconds(b.proc.pid) - cpuB0;
    const self = process.cpuUsage(cpuSelf0);
    const cpuSipp = sipps.reduce((sum, x, i) => sum + cpuSeconds(x.pid()) - cpuSipp0[i]!, 0);
    // A's and B's busy threads (>= 5 % of a core): CPU and time runnable but waiting for a CPU, % of the window.
    const busyThreads = (before: ReturnType<typeof threadTimes>, pid: number | undefined) =>
      [...threadTimes(pid)].flatMap(([tid, t1]) => {
        const t0 = before.get(tid);
        if (t0 === undefined) return [];
        const cpu = (100 * (t1.cpu - t0.cpu)) / secs;
        return cpu >= 5
          ? [
              {
                tid,
                name: t1.name,
                cpuPct: cpu,
                sysPct: (100 * (t1.sys - t0.sys)) / secs,
                waitPct: (100 * (t1.wait - t0.wait)) / secs,
                runsPerSec: (t1.runs - t0.runs) / secs,
                faultsPerSec: (t1.faults - t0.faults) / secs,
              },
            ]
          : [];
      });
    const aThreads = busyThreads(threadsA0, a.proc.pid);
    const bThreads = busyThreads(threadsB0, b.proc.pid);
    const m1 = machineJiffies();
    loop.disable();
    const rssA = rssMb(a.proc.pid);
    const rssB = rssMb(b.proc.pid);
    if (stats.active < n) throw new Error(`step ${n}: only ${stats.active} calls bridged in the daemon at the window's end (calls ended early):\n${a.output().slice(-3000)}`);

    // SIPp hangs up; every call must have succeeded.
    const done = await Promise.all(sipps.map((x) => x.done()));
    const res = { code: done.find((d) => d.code !== 0)?.code ?? 0, failed: done.reduce((sum, d) => sum + d.failed, 0) };
    const heard = analyse(callers.calls);
    if (heard.silentCalls > 0) throw new Error(`step ${n}: ${heard.silentCalls} calls heard nothing from callbridge in the window`);
    const sends = Float64Array.from(callers.lateness).sort();
    const late = Float64Array.from(heard.late).sort();
    const clientSendP99 = quantile(sends, 0.99);
    // The monitor records whole intervals of its 5 ms timer: the delay is the excess.
    const clientLoopP99 = Math.max(0, loop.percentile(99) / 1e6 - LOOP_RESOLUTION_MS);
    const machineBusyPct = (100 * (m1.busy - m0.busy)) / Math.max(1, m1.total - m0.total);
    const stealPct = (100 * (m1.steal - m0.steal)) / Math.max(1, m1.total - m0.total);
    const irqPct = (100 * (m1.irq - m0.irq)) / Math.max(1, m1.total - m0.total);
    const clientLimited = clientSendP99 > ON_TIME_MS || clientLoopP99 > ON_TIME_MS || machineBusyPct >= 97;
    const heardOnTimeShare = heard.frames > 0 ? heard.onTime / heard.frames : 0;
    if (stats.send === undefined || stats.send.frames === 0) throw new Error(`step ${n}: the bridge daemon timed no RTP send in the window (is RtpSession.prototype.send still the send path?):\n${a.output().slice(-3000)}`);
    const sentOnTimeShare = stats.send.onTime / stats.send.frames;
    const aMainPct = (100 * mainA) / secs;
    const step: Step = {
      n,
      established,
      aCpuMsPerCallSec: (cpuA * 1000) / secs / n,
      aMainPct,
      aCpuPct: (100 * cpuA) / secs,
      bCpuPct: (100 * cpuB) / secs,
      clientCpuPct: (100 * (self.user + self.system)) / 1e6 / secs,
      sippCpuPct: (100 * cpuSipp) / secs,
      aThreads,
      bThreads,
      nodeCallers: k,
      machineBusyPct,
      stealPct,
      irqPct,
      cpuStalls,
      lateInStalls: { frames: 0, skipped: 0 },
      heldOutsideStalls: false,
      bLoop,
      memPerCallMb: (rssA - rssA0) / n,
      bMemPerCallMb: (rssB - rssB0) / n,
      stats,
      // With media workers the caller's frame also crosses threads: handoffIn (tick start in the
      // worker to arrival on the main thread) is a third part.
      inP50: stats.rtpIn.p50 + stats.tickIn.p50 + (stats.handoffIn?.n ? stats.handoffIn.p50 : 0),
      inP99: stats.rtpIn.p99 + stats.tickIn.p99 + (stats.handoffIn?.n ? stats.handoffIn.p99 : 0),
      outP50: stats.msgOut.p50 + stats.sendOut.p50,
      outP99: stats.msgOut.p99 + stats.sendOut.p99,
      sentOnTimeShare,
      sendLateP50: stats.send.p50,
      sendLateP99: stats.send.p99,
      sendLateMax: stats.send.max,
      sentFrames: stats.send.frames,
      sendCalls: stats.send.calls,
      skipped: stats.send.skipped,
      aUnderruns: stats.underruns,
      heardOnTimeShare,
      heardLateP99: quantile(late, 0.99),
      heardFrames: heard.frames,
      missing: heard.missing,
      heardUnderruns: heard.underruns + heard.pauses,
      spurtsPerCall: heard.spurts / n,
      clientSendP99,
      clientSendOnTime: sends.length ? sends.filter((x) => x <= ON_TIME_MS).length / sends.length : 0,
      clientLoopP99,
      clientLimited,
      held: false,
      sippCode: res.code,
      failed: res.failed,
    };
    // The verdict is A's own: the callers' arrivals (heard) are reported beside it, not used.
    const holds = (onTime: number, skipped: number) => stats.active >= n && stats.send.calls >= n && onTime / stats.send.frames >= 0.999 && skipped === 0 && stats.underruns === 0 && aMainPct < 95;
    step.held = holds(stats.send.onTime, stats.send.skipped);
    // The same test with the frames that were late while a CPU stalled counted as on time, and
    // their skips forgiven: what the bridge itself kept, apart from what no thread of it could
    // (information beside the verdict, which stays the strict one). Skips the spans cannot place
    // (a tick jump, a refused send) stay counted.
    step.lateInStalls = lateOverlapping(stats.lateFile ? (JSON.parse(readFileSync(stats.lateFile, 'utf8')) as number[]) : [], stallSpans);
    step.heldOutsideStalls = holds(stats.send.onTime + step.lateInStalls.frames, stats.send.skipped - step.lateInStalls.skipped);
    if (res.code !== 0 || res.failed > 0) throw new Error(`step ${n}: SIPp exit ${res.code}, ${res.failed} failed calls:\n${describe()}`);
    return step;
  } finally {
    for (const x of sipps) await x.stop();
    await callers.close();
    // Let the daemon finish the BYEs and free the calls before the next step's idle RSS.
    const end = Date.now() + 10_000;
    while (Date.now() < end) {
      const s = await bridgeStats(a).catch(() => undefined);
      if (s === undefined || s.active === 0) break;
      await sleep(250);
    }
    await sleep(1500);
  }
}

// ---------------------------------------------------------------------------------------------
// The media-stream phase: N carrier stream calls (bench/lib/media-stream-callers.ts) against the
// same bridge daemon, after the SIP steps

interface StreamPhase {
  n: number;
  figures: StreamFigures;
  /** A's CPU per call-second over the window, ms. */
  aCpuMsPerCallSec: number;
  aCpuPct: number;
  aMainPct: number;
  bCpuPct: number;
  clientCpuPct: number;
  machineBusyPct: number;
  clientLoopP99: number;
  /** Calls A was bridging at the window's end. */
  activeAtEnd: number;
  placeMs: number;
}

async function runStreamPhase(n: number, ctx: { a: Child; b: Child; aUrl: string; accountSid: string; authToken: string; payloads: Buffer[]; windowSecs: number; rate: number }, log: (s: string) => void): Promise<StreamPhase> {
  const { a, b } = ctx;
  const callers = new MediaStreamCallers({ webhookUrl: `${ctx.aUrl}/v1/telco/twilio/voice`, accountSid: ctx.accountSid, authToken: ctx.authToken, to: STREAM_NUMBER, payloads: ctx.payloads });
  try {
    const rampMs = Math.ceil((n / ctx.rate) * 1000);
    const p0 = performance.now();
    await callers.place(n, rampMs);
    const placeMs = performance.now() - p0;
    log(`  ${n} streams started in ${(placeMs / 1000).toFixed(1)} s (${callers.open} open); settling ${SETTLE_MS} ms`);
    await sleep(SETTLE_MS);
    if (callers.open < n) throw new Error(`stream phase: only ${callers.open} of ${n} streams open after the settle time:\n${a.output().slice(-3000)}`);
    await bridgeStats(a); // resets A's histograms (not used: streams send no RTP)
    const loop = monitorEventLoopDelay({ resolution: 5 });
    loop.enable();
    const cpuA0 = cpuSeconds(a.proc.pid);
    const mainA0 = mainThreadCpuSeconds(a.proc.pid);
    const cpuB0 = cpuSeconds(b.proc.pid);
    const cpuSelf0 = process.cpuUsage();
    const m0 = machineJiffies();
    const t0 = performance.now();
    callers.window = { from: t0, to: t0 + ctx.windowSecs * 1000 };
    await sleep(ctx.windowSecs * 1000);
    const t1 = performance.now();
    const secs = (t1 - t0) / 1000;
    const cpuA = cpuSeconds(a.proc.pid) - cpuA0;
    const mainA = mainThreadCpuSeconds(a.proc.pid) - mainA0;
    const cpuB = cpuSeconds(b.proc.pid) - cpuB0;
    const self = process.cpuUsage(cpuSelf0);
    const m1 = machineJiffies();
    loop.disable();
    const stats = await bridgeStats(a);
    await callers.stopAll();
    const figures = callers.analyse(n);
    return {
      n,
      figures,
      aCpuMsPerCallSec: (cpuA * 1000) / secs / n,
      aCpuPct: (100 * cpuA) / secs,
      aMainPct: (100 * mainA) / secs,
      bCpuPct: (100 * cpuB) / secs,
      clientCpuPct: (100 * (self.user + self.system)) / 1e6 / secs,
      machineBusyPct: (100 * (m1.busy - m0.busy)) / Math.max(1, m1.total - m0.total),
      clientLoopP99: Math.max(0, loop.percentile(99) / 1e6 - LOOP_RESOLUTION_MS),
      activeAtEnd: stats.active,
      placeMs,
    };
  } finally {
    callers.close();
    const end = Date.now() + 10_000;
    while (Date.now() < end) {
      const s = await bridgeStats(a).catch(() => undefined);
      if (s === undefined || s.active === 0) break;
      await sleep(250);
    }
  }
}

// ---------------------------------------------------------------------------------------------

export async function run(): Promise<void> {
  const sipp = sippAvailable();
  if (!sipp.ok) throw new Error(`bench/bridge needs SIPp: ${sipp.reason}`);
  const steps = envIntegerList('BENCH_BRIDGE_STEPS', '50,100,150,200');
  const windowSecs = envNumber('BENCH_BRIDGE_SECS', 20);
  const rate = envNumber('BENCH_BRIDGE_RATE', 25);
  const nodeCallers = envNumber('BENCH_BRIDGE_NODE_CALLERS', 20);
  // BENCH_BRIDGE_STREAMS: carrier media-stream calls of the phase after the SIP steps (0 skips it).
  const streamsRaw = process.env.BENCH_BRIDGE_STREAMS ?? '';
  const streams = streamsRaw === '' ? 100 : Number(streamsRaw);
  if (!Number.isInteger(streams) || streams < 0) throw new RangeError(`BENCH_BRIDGE_STREAMS must be a whole number (0 skips the media-stream phase), got "${streamsRaw}"`);
  const log = (s: string) => process.stdout.write(s + '\n');
  log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? '?'}, node ${process.version}, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  log(`steps ${steps.join(', ')} calls; window ${windowSecs} s after ${SETTLE_MS} ms settle; calls placed at ${rate}/s; ${sipp.version}`);
  log(`media streams: ${streams > 0 ? `${streams} carrier stream calls after the SIP steps, the same window` : 'phase skipped'} (BENCH_BRIDGE_STREAMS)`);
  log(`callers: ${nodeCallers} calls per step are this process's phones (the heard figures), SIPp plays the RTP of the rest (rtp_stream) (BENCH_BRIDGE_NODE_CALLERS)`);
  const threads = process.env.BENCH_BRIDGE_MEDIA_THREADS;
  const nice = process.env.BENCH_BRIDGE_MEDIA_NICE;
  const youngGenMb = process.env.BENCH_BRIDGE_MEDIA_YOUNG_GEN_MB;
  // BENCH_BRIDGE_REALTIME=1: the real-time deployment of docs/media-workers.md (media threads
  // SCHED_RR 10, main threads 5 (B's is where the sessions run)).
  const preset = process.env.BENCH_BRIDGE_REALTIME === '1';
  const realtime = process.env.BENCH_BRIDGE_MEDIA_REALTIME || (preset ? '10' : '');
  const mainRealtime = process.env.BENCH_BRIDGE_MAIN_REALTIME || (preset ? '5' : '');
  // BENCH_BRIDGE_TTS_REALTIME (4 with the preset, below B's main thread): the fake TTS under
  // SCHED_RR. It stands in for a remote vendor that answers at once; at normal priority on the
  // machine the real-time threads keep busy at 200 calls, it answered in up to 0.4-2.2 s, and the
  // agent's second sentence came late (agent underruns). It takes ~1 % of a CPU.
  const ttsRealtime = Number(process.env.BENCH_BRIDGE_TTS_REALTIME || (preset ? '4' : '0'));
  // BENCH_BRIDGE_LOADGEN_REALTIME (diagnostic, default 0): SIPp and this process under SCHED_RR
  // too. Tried as the preset's default and not kept: the machine's own normal tasks (kworkers,
  // kdamond) then starve and take their CPU in bursts no real-time thread can pre-empt, and the
  // per-CPU stall probe saw 17-27 stalls over 4 ms per window at 200 calls instead of 2
  // (docs/benchmarks.md).
  const loadgenRealtime = Number(process.env.BENCH_BRIDGE_LOADGEN_REALTIME || '0');
  // A and B start as npm start and the Docker image start the daemon: node --single-threaded-gc.
  // BENCH_BRIDGE_CONCURRENT_GC=1 (diagnostic) leaves the flag out: V8's GC helper threads then
  // compete with the media threads (docs/benchmarks.md).
  const concurrentGc = process.env.BENCH_BRIDGE_CONCURRENT_GC === '1';
  const nodeArgs = (name: string) => [...(process.env[name] ?? '').split(' ').filter(Boolean), ...(concurrentGc ? [] : ['--single-threaded-gc'])];
  log(
    `bridge media: ${threads ? `rtp.media_threads ${threads}` : 'rtp.media_threads as the daemon defaults'}${nice ? `, rtp.media_thread_nice ${nice}` : ''}${realtime ? `, rtp.media_thread_realtime ${realtime}` : ''}${youngGenMb ? `, rtp.media_thread_young_gen_mb ${youngGenMb}` : ''}${mainRealtime ? `; A's and B's rtp.main_thread_realtime ${mainRealtime}` : ''}; both ${concurrentGc ? 'with V8\'s concurrent GC (BENCH_BRIDGE_CONCURRENT_GC=1)' : 'with --single-threaded-gc, as npm start runs the daemon'} (BENCH_BRIDGE_REALTIME=1, or BENCH_BRIDGE_MEDIA_THREADS / _NICE / _REALTIME, BENCH_BRIDGE_MAIN_REALTIME)`,
  );

  log('floor: bench/media in a child process ...');
  const floor = await mediaFloor();
  log(`floor: media_path_us_per_frame ${floor.pathUs} us, media_latency p50 ${floor.p50} ms p99 ${floor.p99} ms`);

  const probe = await startCpuStallProbe();
  log(`CPU stalls: a sleeper thread per CPU${probe.pinned ? ', pinned to it,' : ' (not pinned: no taskset)'} ${probe.realtime ? 'under SCHED_RR 99' : 'at normal priority (no privilege for SCHED_RR: its gaps include CPU waits)'} records every wake-up > ${STALL_MS} ms late: the vCPU not running, non-preemptible kernel work, or RT throttling`);
  log(`kernel: ${rtThrottling()}`);
  // The platform's own stalls, before anything of the bench runs: on a quiet VM the probe sees
  // next to none, on an oversubscribed host the vCPUs stop for tens of ms while idle too.
  const idleSecs = envNumber('BENCH_BRIDGE_IDLE_SECS', 15);
  if (idleSecs > 0) {
    const from = performance.now();
    await sleep(idleSecs * 1000);
    const idle = probe.spans(from, performance.now());
    const longest = Math.max(0, ...idle.map((x) => x.endMs - x.startMs - 1));
    const together = idle.filter((x) => idle.some((y) => y.cpu !== x.cpu && y.startMs < x.endMs && y.endMs > x.startMs)).length;
    log(`platform alone (nothing of the bench running, ${idleSecs} s; BENCH_BRIDGE_IDLE_SECS): ${idle.length} CPU stalls > ${STALL_MS} ms, longest ${longest.toFixed(1)} ms, ${together} of them overlapping a stall of another CPU`);
  }
  const dirA = mkdtempSync(join(tmpdir(), 'callbridge-bench-bridge-a-'));
  const dirB = mkdtempSync(join(tmpdir(), 'callbridge-bench-bridge-b-'));
  const children: Child[] = [];
  const results: Step[] = [];
  // As deployed (docs/media-workers.md "Memory"); `default`: glibc's own limit, for the A/B.
  const arenaSetting = process.env.BENCH_BRIDGE_MALLOC_ARENA_MAX || '2';
  const mallocArenaMax = arenaSetting === 'default' ? undefined : arenaSetting;
  log(`A and B run with MALLOC_ARENA_MAX=${mallocArenaMax ?? 'unset (glibc default: 8 per core)'} (BENCH_BRIDGE_MALLOC_ARENA_MAX)`);
  let streamPhase: StreamPhase | undefined;
  try {
    const tts = startChild('fake TTS', ['--import', 'tsx', join(ROOT, 'bench', 'session-tts-server.ts')], {});
    children.push(tts);
    if (ttsRealtime > 0) {
      roundRobinProcess(tts.proc.pid!, ttsRealtime);
      log(`fake TTS under SCHED_RR ${ttsRealtime} (BENCH_BRIDGE_TTS_REALTIME; 0: normal policy)`);
    }
    const ttsUrl = `http://${HOST}:${await waitForLine(tts, /LISTENING (\d+)/, 30_000)}`;
    const b = startChild('voice server (B)', [...nodeArgs('BENCH_BRIDGE_B_NODE_ARGS'), '--import', 'tsx', join(ROOT, 'bench', 'session-server.ts')], {
      MALLOC_ARENA_MAX: mallocArenaMax,
      BENCH_SESSION_DATA_DIR: dirB,
      BENCH_SESSION_TTS_URL: `${ttsUrl}/v1`,
      BENCH_SESSION_MAIN_REALTIME: mainRealtime,
    });
    children.push(b);
    const bUrl = await waitForLine(b, /LISTENING (\S+)/, 60_000);
    const bKey = readFileSync(join(dirB, 'initial-api-key'), 'utf8').trim();
    const created = await api(bUrl, bKey, 'POST', '/v1/agents', {
      name: 'bench bridge echo',
      first_message: 'Hi.',
      vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 0 },
      // tone-800: 1.6 s of audio per 3 s cycle, as in every earlier run of this bench (a voice
      // of bench/session-server.ts's catalog).
      voice_settings: { id: 'tone-800', provider: 'provider_1' },
    });
    const agent = await api(bUrl, bKey, 'GET', `/v1/agents/${created.id}`);
    // The bridge daemon's store before it starts: its organization and key, and the agent with
    // the upstream's id (deployments keep agents in sync by id: docs/bridge.md).
    // For the media-stream phase: a carrier number imported under an account (its auth token
    // signs the voice webhook) and assigned to the agent, written as the import route writes it
    // (no carrier lookup: the carrier is the load generator here).
    const storeA = await openStore(dirA, '');
    const { org, key: aKey } = await storeA.organizations.createKey('bench');
    const { id, name, status, phone_number_id: _p, created_at, updated_at: _u, ...settings } = agent as Record<string, any>;
    const carrier = { accountSid: 'AC' + randomBytes(16).toString('hex'), authToken: randomBytes(16).toString('hex'), numberId: randomUUID() };
    await storeA.telcoNumbers.insert({ id: carrier.numberId, org_id: org.id, phone_number: STREAM_NUMBER, phone_sid: 'PN' + randomBytes(16).toString('hex'), label: 'bench bridge streams', account_sid: carrier.accountSid, auth_token: carrier.authToken, created_at });
    await storeA.agents.insert({ id, org_id: org.id, name, status, phone_number_id: carrier.numberId, settings: settings as any, created_at });
    await storeA.close();
    writeFileSync(join(dirA, 'initial-api-key'), aKey + '\n', { mode: 0o600 });
    const rtpMin = 30000 + 2 * Math.floor(Math.random() * 5000);
    const a = startChild('bridge daemon (A)', [...nodeArgs('BENCH_BRIDGE_NODE_ARGS'), '--import', 'tsx', join(ROOT, 'bench', 'bridge-server.ts')], {
      MALLOC_ARENA_MAX: mallocArenaMax,
      BENCH_BRIDGE_MEDIA_REALTIME: realtime,
      BENCH_BRIDGE_MAIN_REALTIME: mainRealtime,
      BENCH_BRIDGE_DATA_DIR: dirA,
      BENCH_BRIDGE_UPSTREAM: bUrl,
      BENCH_BRIDGE_UPSTREAM_KEY: bKey,
      BENCH_BRIDGE_RTP_MIN: String(rtpMin),
    });
    children.push(a);
    // BENCH_BRIDGE_A_NICE (e.g. -10, root only): the bridge's scheduling priority, as telephony
    // servers run their media (Asterisk -p, FreeSWITCH -rp); everything else stays at 0.
    const aNice = process.env.BENCH_BRIDGE_A_NICE;
    if (aNice !== undefined && aNice !== '') {
      setPriority(a.proc.pid!, Number(aNice));
      log(`bridge daemon (A) runs at nice ${aNice}`);
    }
    const [aUrl, sipPortText] = (await waitForLine(a, /LISTENING (\S+ \d+)/, 60_000)).split(' ');
    const trunk = await api(aUrl!, aKey, 'POST', '/v1/sip-trunks', { pbx: 'generic', name: 'bench acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] });
    await api(aUrl!, aKey, 'POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: id, alternate_number: NUMBER });
    const payloads = cyclePayloads();
    const ctx = { a, b, sippBin: sipp.bin, sipPort: Number(sipPortText), payloads, windowSecs, rate, nodeCallers, cpuStalls: probe, loadgenRealtime };

    if (loadgenRealtime > 0) {
      // This process's main thread plays the K callers; its helper threads (V8's GC helpers) go
      // along, or the main thread's GC waits for them and they run from the fair server (perf:
      // one for 6 ms on a CPU a media thread was woken on). The stall probe stays at 99;
      // --reset-on-fork: SIPp is set on its own.
      for (const tid of normalPolicyThreads()) setRoundRobin(tid, loadgenRealtime);
      log(`load generator: SIPp and this process under SCHED_RR ${loadgenRealtime} (BENCH_BRIDGE_LOADGEN_REALTIME)`);
    }

    // Warm-up, not measured (JIT, pools, the fake TTS's tone cache): every media thread compiles
    // its own code, and with 10 calls for 3 s the first step still ran half-optimized code (tick
    // sections up to 14 ms). A daemon's steady state is what the steps measure.
    const warmCalls = envNumber('BENCH_BRIDGE_WARMUP_CALLS', 40);
    log(`warm-up: ${warmCalls} calls for 8 s ...`);
    await runStep(warmCalls, { ...ctx, windowSecs: 8 }, () => {});
    for (const n of steps) {
      log(`step ${n} calls ...`);
      for (const c of children) if (!running(c)) throw new Error(`${c.name} exited:\n${c.output()}`);
      const s = await runStep(n, ctx, log);
      results.push(s);
      log(
        `  A ${s.aCpuPct.toFixed(1)} % CPU (event loop ${s.aMainPct.toFixed(1)} %), ${s.aCpuMsPerCallSec.toFixed(3)} ms/s per call, +${s.memPerCallMb.toFixed(3)} MB per call; B ${s.bCpuPct.toFixed(1)} %; load generator ${s.clientCpuPct.toFixed(1)} % (${s.nodeCallers} calls), SIPp ${s.sippCpuPct.toFixed(1)} % (signaling, RTP of ${s.n - s.nodeCallers} calls); machine ${s.machineBusyPct.toFixed(0)} % busy (steal ${s.stealPct.toFixed(1)} %, irq+softirq ${s.irqPct.toFixed(1)} %)` +
          `\n  in ${s.inP50.toFixed(3)}/${s.inP99.toFixed(3)} ms, out ${s.outP50.toFixed(3)}/${s.outP99.toFixed(3)} ms (p50/p99); A loop delay p99 ${s.stats.loop.p99.toFixed(2)} ms; B loop delay p99/max ${s.bLoop.p99.toFixed(2)}/${s.bLoop.max.toFixed(2)} ms${s.bLoop.ttsFirst ? `; B's TTS first audio p50/p99/max ${s.bLoop.ttsFirst.p50}/${s.bLoop.ttsFirst.p99}/${s.bLoop.ttsFirst.max} ms (${s.bLoop.ttsFirst.n} requests)` : ''}` +
          `\n  A sent on time ${(100 * s.sentOnTimeShare).toFixed(3)} % of ${s.sentFrames} frames on ${s.sendCalls} calls, send late p50/p99/max ${s.sendLateP50.toFixed(3)}/${s.sendLateP99.toFixed(3)}/${s.sendLateMax.toFixed(2)} ms, skipped ${s.skipped}, A underruns ${s.aUnderruns}` +
          `\n  heard on time ${(100 * s.heardOnTimeShare).toFixed(3)} % of ${s.heardFrames} frames, heard late p99 ${s.heardLateP99.toFixed(2)} ms, missing ${s.missing}, heard underruns ${s.heardUnderruns}; client send p99 ${s.clientSendP99.toFixed(2)} ms, client loop p99 ${s.clientLoopP99.toFixed(2)} ms${s.clientLimited ? ' (client-limited: heard figures not trustworthy to 5 ms)' : ''}` +
          `\n  ${s.held ? 'HELD' : 'not held'}${s.cpuStalls.count > 0 ? `; a CPU stalled (no real-time thread could run: see the header) ${s.cpuStalls.count} times in the window, longest ${s.cpuStalls.maxMs.toFixed(1)} ms; ${s.lateInStalls.frames} of A's ${s.stats.send.frames - s.stats.send.onTime} late frames and ${s.lateInStalls.skipped} of its ${s.skipped} skipped were during one${s.held ? '' : s.heldOutsideStalls ? ' (held outside them)' : ' (not held outside them either)'}` : ''}`,
      );
    }
    if (streams > 0) {
      log(`media-stream phase: ${streams} carrier stream calls (signed voice webhook, then the stream WebSocket) ...`);
      for (const c of children) if (!running(c)) throw new Error(`${c.name} exited:\n${c.output()}`);
      const p = await runStreamPhase(streams, { a, b, aUrl: aUrl!, accountSid: carrier.accountSid, authToken: carrier.authToken, payloads, windowSecs, rate }, log);
      streamPhase = p;
      const f = p.figures;
      log(
        `  A ${p.aCpuPct.toFixed(1)} % CPU (event loop ${p.aMainPct.toFixed(1)} %), ${p.aCpuMsPerCallSec.toFixed(3)} ms/s per call; B ${p.bCpuPct.toFixed(1)} %; load generator ${p.clientCpuPct.toFixed(1)} %, loop p99 ${p.clientLoopP99.toFixed(2)} ms, its media sends p99 ${f.sendLateP99.toFixed(2)} ms late (${(100 * f.sendOnTime).toFixed(2)} % within 5 ms); machine ${p.machineBusyPct.toFixed(0)} % busy; A bridging ${p.activeAtEnd} at the window's end` +
          `\n  held ${f.held} of ${f.placed} (closed early ${f.closedEarly}, no agent audio in the window ${f.silent}); agent media in the window ${f.frames} messages in ${f.spurts} spurts, ${f.offSlot} (${f.frames ? ((100 * f.offSlot) / f.frames).toFixed(2) : '-'} %) > 5 ms off their slot, late p99 ${f.lateP99.toFixed(2)} ms, pauses ${f.pauses}; marks echoed ${f.marksEchoed}, clears ${f.clears}`,
      );
    }
  } finally {
    await probe.stop();
    for (const c of children.reverse()) await stopChild(c);
    rmSync(dirA, { recursive: true, force: true });
    rmSync(dirB, { recursive: true, force: true });
  }

  const rows = [['calls', 'A cpu%', 'loop%', 'ms/s/call', 'MB/call', 'B cpu%', 'client%', 'sipp%', 'busy%', 'in p50', 'in p99', 'out p50', 'out p99', 'sent on time%', 'send late p99', 'skipped', 'A underruns', 'heard on time%', 'heard late p99', 'missing', 'heard underruns', 'send p99', 'verdict']];
  for (const s of results) {
    rows.push([
      String(s.n), s.aCpuPct.toFixed(1), s.aMainPct.toFixed(1), s.aCpuMsPerCallSec.toFixed(3), s.memPerCallMb.toFixed(3), s.bCpuPct.toFixed(1), s.clientCpuPct.toFixed(1), s.sippCpuPct.toFixed(1), s.machineBusyPct.toFixed(0),
      s.inP50.toFixed(3), s.inP99.toFixed(3), s.outP50.toFixed(3), s.outP99.toFixed(3),
      (100 * s.sentOnTimeShare).toFixed(3), s.sendLateP99.toFixed(3), String(s.skipped), String(s.aUnderruns),
      (100 * s.heardOnTimeShare).toFixed(3), s.heardLateP99.toFixed(2), String(s.missing), String(s.heardUnderruns), s.clientSendP99.toFixed(2),
      `${s.held ? 'held' : 'not held'}${s.clientLimited ? ' (heard: client-limited)' : ''}${s.cpuStalls.count > 0 ? ` (CPU stalled ${s.cpuStalls.maxMs.toFixed(0)} ms${!s.held && s.heldOutsideStalls ? '; held outside stalls' : ''})` : ''}`,
    ]);
  }
  log(`\nper step (latency = bridge processing per frame, ms; parts: rtpIn+tickIn, msgOut+sendOut; sent = timed inside A, the verdict's; heard = at the callers' arrival, secondary; send p99 = the load generator's own pacing)\n${table(rows)}`);
  for (const s of results) {
    const p = (x: { p50: number; p99: number; max: number; n: number }) => `${x.p50}/${x.p99}/${x.max} (${x.n})`;
    log(`  ${s.n}: rtpIn ${p(s.stats.rtpIn)}  tickIn ${p(s.stats.tickIn)}  msgOut ${p(s.stats.msgOut)}  sendOut ${p(s.stats.sendOut)}  send late ${s.stats.send.p50}/${s.stats.send.p99}/${s.stats.send.max} (${s.stats.send.frames})  A loop delay p50/p99/max ${s.stats.loop.p50}/${s.stats.loop.p99}/${s.stats.loop.max} ms, GC ${s.stats.gc.count} pauses ${s.stats.gc.totalMs} ms (max ${s.stats.gc.maxMs}${s.stats.gc.maxKind ? ` ${s.stats.gc.maxKind}` : ''}); client loop p99 ${s.clientLoopP99.toFixed(2)} ms`);
    const threads = (list: Step['aThreads']) =>
      list.map((t) => `${t.name}:${t.tid} ${t.cpuPct.toFixed(1)} (sys ${t.sysPct.toFixed(1)})/${t.waitPct.toFixed(1)} (${(t.runsPerSec / 1000).toFixed(1)}k runs/s, ${Math.round(t.faultsPerSec)} faults/s)`).join(', ');
    log(`  ${s.n}: CPU stalls (a sleeper per CPU${probe.realtime ? ' at SCHED_RR 99' : ' at normal priority, so CPU waits count too,'} woke > ${STALL_MS} ms late): ${s.cpuStalls.count}, longest ${s.cpuStalls.maxMs.toFixed(1)} ms, ${s.cpuStalls.totalMs.toFixed(1)} ms in all`);
    log(`  ${s.n}: busy threads, CPU (of it in the kernel) / runnable but waiting for a CPU (% of the window): A ${threads(s.aThreads)}; B ${threads(s.bThreads)}`);
    if (s.stats.handoffIn?.n) log(`  ${s.n}: handoffIn ${p(s.stats.handoffIn)}`);
    for (const t of s.stats.mediaThreads ?? []) log(`  ${s.n}: media thread ${t.index}: loop delay p50/p99/max ${t.loop.p50}/${t.loop.p99}/${t.loop.max} ms, GC ${t.gc.count} pauses ${t.gc.totalMs} ms (max ${t.gc.maxMs}${t.gc.maxKind ? ` ${t.gc.maxKind}` : ''}); late frames ${t.gc.lateFrames ?? '?'}, ${t.gc.duringGc ?? '?'} of them during a GC pause of this thread, ${t.duringMainGc ?? '?'} during one of the main thread`);
  }
  const held = results.filter((s) => s.held).reduce((m, s) => Math.max(m, s.n), 0);
  const heldOutsideStalls = results.filter((s) => s.held || s.heldOutsideStalls).reduce((m, s) => Math.max(m, s.n), 0);
  // The reported step: the highest run. Every figure but the heard one is measured inside A, which
  // the load generator's pacing does not distort, so a client-limited step is not disqualified.
  const top = results.reduce((m, s) => (s.n > m.n ? s : m));
  const floorCpu = (floor.pathUs * 50) / 1000;
  const figures: Figure[] = [
    { name: 'bridge_calls_held', value: held, unit: 'calls', baseline: TARGET_CALLS, note: 'highest step held (A: >= 99.9 % sent on time, no skipped frame, no underrun, loop < 95 %); baseline: the target' },
    { name: 'bridge_calls_held_outside_stalls', value: heldOutsideStalls, unit: 'calls', baseline: TARGET_CALLS, note: 'the same with the frames late during a CPU stall the per-CPU probe saw counted on time (information: what the bridge kept apart from what no thread of it could)' },
    { name: 'bridge_cpu_per_call', value: top.aCpuMsPerCallSec, unit: 'ms/s', baseline: floorCpu, note: `CPU of the bridge daemon per second of call at ${top.n}; baseline: bench/media path per call` },
    { name: 'bridge_mem_per_call', value: top.memPerCallMb, unit: 'MB', baseline: top.bMemPerCallMb, note: `RSS delta / calls at ${top.n}; baseline: the voice server per session` },
    { name: 'bridge_in_latency_p50', value: top.inP50, unit: 'ms', baseline: floor.p50, note: `RTP in -> input_audio out, processing, at ${top.n}; baseline: media floor` },
    { name: 'bridge_in_latency_p99', value: top.inP99, unit: 'ms', baseline: floor.p99, note: 'target < 5 ms' },
    { name: 'bridge_out_latency_p50', value: top.outP50, unit: 'ms', baseline: floor.p50, note: `response_audio in -> RTP out, processing, at ${top.n}` },
    { name: 'bridge_out_latency_p99', value: top.outP99, unit: 'ms', baseline: floor.p99, note: 'target < 5 ms' },
    { name: 'bridge_on_time_share', value: top.sentOnTimeShare, unit: 'share', baseline: top.clientSendOnTime, note: `frames A sent within 5 ms of due at ${top.n}; baseline: the load generator's own sends` },
    { name: 'bridge_heard_on_time_share', value: top.heardOnTimeShare, unit: 'share', baseline: top.clientSendOnTime, note: `frames the callers heard within 5 ms of due at ${top.n}${top.clientLimited ? ' (client-limited)' : ''}; baseline: the load generator's own sends` },
  ];
  if (streamPhase !== undefined) {
    const p = streamPhase;
    const f = p.figures;
    figures.push(
      { name: 'bridge_streams_held', value: f.held, unit: 'streams', baseline: f.placed, note: `carrier media streams up through the window with the agent's audio back, >= ${100 * PACED_SHARE} % of it on its 20 ms slot at the load generator; baseline: streams placed` },
      { name: 'bridge_stream_cpu_per_call', value: p.aCpuMsPerCallSec, unit: 'ms/s', baseline: top.aCpuMsPerCallSec, note: `CPU of the bridge daemon per second of stream call at ${p.n}; baseline: bridge_cpu_per_call (SIP, ${top.n} calls) of this run` },
      { name: 'bridge_stream_off_slot_share', value: f.frames > 0 ? f.offSlot / f.frames : Number.NaN, unit: 'share', baseline: 1 - f.sendOnTime, note: `agent media messages received > 5 ms off their 20 ms slot at ${p.n} streams (a figure, not a target); baseline: the load generator's own media sends > 5 ms late` },
    );
  }
  printFigures(`bench/bridge (PCMU, SIPp + RTP through the bridge to local/echo on an upstream voice server${streamPhase ? '; then carrier media streams to the same bridge' : ''})`, figures);
  const met = held >= TARGET_CALLS && results.every((s) => s.n > TARGET_CALLS || (s.inP99 < 5 && s.outP99 < 5));
  log(`targets: ${TARGET_CALLS} calls held: ${held >= TARGET_CALLS ? 'met' : 'NOT MET'} (${held}); added latency p99 < 5 ms per direction up to ${TARGET_CALLS}: ${met || results.every((s) => s.inP99 < 5 && s.outP99 < 5) ? 'met' : 'NOT MET'}`);
  if (results.some((s) => s.cpuStalls.count > 0)) log(`note: CPU stalls: in the steps marked so, a CPU ran no real-time thread for > ${STALL_MS} ms (no thread of the bridge can make a SCHED_RR 99 sleeper that late: the vCPU not running, kernel work that this kernel does not preempt, or RT throttling while it is on); a miss there is not evidence against the bridge's code, but the verdict still counts it`);
  if (results.some((s) => s.clientLimited)) log('note: client-limited steps: the load generator (SIPp + the RTP callers in this process) could not keep its own 5 ms pacing; their heard misses are not evidence against the bridge (the verdict uses A\'s sent-on-time figures only)');
}

/** This process's threads under the normal policy (field 41 of /proc/self/task/<tid>/stat is 0). */
function normalPolicyThreads(): number[] {
  return readdirSync('/proc/self/task')
    .map(Number)
    .filter((tid) => {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[41 - 3] === '0';
    });
}

/** The kernel's real-time throttling (sched_rt_runtime_us of sched_rt_period_us), for the header. */
function rtThrottling(): string {
  const t = kernelRtThrottling();
  if (t === null) return 'real-time throttling unknown (no /proc/sys/kernel/sched_rt_*)';
  return t.runtimeUs < 0
    ? 'real-time throttling off (sched_rt_runtime_us -1)'
    : `real-time threads throttled beyond ${((100 * t.runtimeUs) / t.periodUs).toFixed(0)} % of a CPU per ${t.periodUs / 1000} ms (sched_rt_runtime_us ${t.runtimeUs}); the stall probe counts those stops too (-1 rules them out)`;
}
