/**
 * bench/sip: how many call setups per second callbridge sustains with zero failed calls, and its
 * INVITE->200 OK time, beside a minimal SIP UAS measured the same way in the same run. The
 * target: at least 200 call setups per second with no failures.
 *
 *   SIPp UAC (bench/scenarios/sip-load-uac.xml) --UDP 127.0.0.1--> target
 *     baseline:   SIPp UAS (bench/scenarios/sip-baseline-uas.xml), answers 200 at once
 *     callbridge: the daemon in this process (startDaemon, SIP on 127.0.0.1, an ACL trunk for
 *                 127.0.0.1/32 with an assignment for the number dialled); an onInboundCall
 *                 handler answers every routed call at once (signaling only: no voice session,
 *                 no RTP sent or received)
 *
 * One call: INVITE with an SDP offer -> (100, 180) -> 200 with the SDP answer -> ACK -> hold
 * BENCH_SIP_HOLD_MS -> BYE -> 200. SIPp places calls at a fixed rate (-r R -rp 1000) for
 * BENCH_SIP_SECS seconds (-m R*secs) with at most max(50, R) calls up at once (-l). After a
 * warm-up of each, the two targets take turns at each rate of BENCH_SIP_RATES (so a busy
 * neighbour weighs on both alike); a target stops at its first step with a failed call or fewer
 * than 95% of the setups per second asked. Its figure is the step before.
 *
 * Measurements, per step:
 *   - setups/s: 200 OKs to INVITEs per second, first to last, and INVITE->200 per call (first
 *     transmission of the INVITE to the first 200 for it), from SIPp's message trace
 *     (-trace_shortmsg, microsecond timestamps). SIPp's own response times (rtd, -trace_rtt) read
 *     CLOCK_MONOTONIC_COARSE, which moves in 4 ms steps on this kernel: too coarse for loopback,
 *     printed only as a cross-check.
 *   - failed calls: SIPp's final statistics (-trace_stat, failures by cause); for every step with
 *     failures, the final responses other than 200, INVITEs left without an answer, BYEs left
 *     without a 200 and the tail of SIPp's error log (-trace_err).
 *   - UDP datagrams the kernel dropped on the target's SIP socket (receive buffer full:
 *     /proc/net/udp "drops"), CPU per call (callbridge: this whole process; baseline: the SIPp UAS
 *     process), callbridge's event-loop delay, and calls or RTP ports still held after the step.
 *
 * Environment: BENCH_SIP_RATES (100,200,300,400,500,600,700,800,1000,1200 calls/s), BENCH_SIP_SECS
 * (4 s per step), BENCH_SIP_HOLD_MS (100), BENCH_SIP_KEEP_LOGS=1 keeps SIPp's working directories
 * (paths printed). SIPp: /usr/bin/sipp or $SIPP_BIN (Debian sip-tester). Binds 127.0.0.1 only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon, INITIAL_KEY_FILE, type Daemon } from '../src/main.ts';
import { exitMeaning, freeMediaPort, freeSipPort, freeUdpPort, sippAvailable } from '../test/interop/sipp.ts';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';
import { envIntegerList, envNumber } from './lib/env.ts';
import { inviteTo200Ms, parseShortMessages, spanRate } from './lib/sipp-trace.ts';

const HOST = '127.0.0.1';
const SCENARIOS = fileURLToPath(new URL('./scenarios/', import.meta.url));
const UAC_SCENARIO = 'sip-load-uac.xml';
const UAS_SCENARIO = 'sip-baseline-uas.xml';
/** The number SIPp dials: the ACL trunk's assignment in callbridge (the baseline answers anything). */
const NUMBER = '+15550002000';
/** A step is sustained when it completes at least this share of the setups per second asked. */
const KEEP_UP = 0.95;
/** A call whose expected message does not come within this fails (SIPp -recv_timeout). */
const RECV_TIMEOUT_MS = 5000;
/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ). */
const USER_HZ = 100;
const BASELINE = 'baseline (SIPp UAS)';
const CALLBRIDGE = 'callbridge';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Nearest-rank percentile of ascending samples. */
function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

/** User + system CPU seconds a process has used so far, from /proc; NaN when not available. */
function procCpuSeconds(pid: number | undefined): number {
  if (pid === undefined || !existsSync(`/proc/${pid}/stat`)) return Number.NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / USER_HZ;
  } catch {
    return Number.NaN;
  }
}

/**
 * The UDP sockets bound to `port` on this host (Linux /proc/net/udp): whether any is, and the
 * datagrams the kernel dropped on them because their receive buffer was full (last column).
 * undefined without /proc.
 */
function udpSocket(port: number): { bound: boolean; drops: number } | undefined {
  let text: string;
  try {
    text = readFileSync('/proc/net/udp', 'utf8');
  } catch {
    return undefined;
  }
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  let bound = false;
  let drops = 0;
  for (const line of text.split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    if (!cols[1]?.endsWith(hex)) continue;
    bound = true;
    drops += Number(cols[cols.length - 1]) || 0;
  }
  return { bound, drops };
}

// ---------------------------------------------------------------------------------------------
// SIPp processes

interface Sipp {
  proc: ChildProcess;
  workDir: string;
  args: string[];
  /** Resolves with the exit code (null: killed by a signal) once the process has closed. */
  exited: Promise<number | null>;
  stdout(): string;
  stderr(): string;
  /** SIGTERM to this process (by its PID), SIGKILL 2 s later if it is still there. */
  stop(): Promise<number | null>;
}

/**
 * Starts SIPp on a copy of `scenario` in a fresh working directory (SIPp names its trace files
 * after the scenario, in its working directory), killed after `timeoutMs` at the latest.
 */
function spawnSipp(bin: string, scenario: string, remote: string | undefined, args: string[], timeoutMs: number): Sipp {
  const workDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-sipp-'));
  copyFileSync(join(SCENARIOS, scenario), join(workDir, scenario));
  const fullArgs = [...(remote === undefined ? [] : [remote]), '-sf', scenario, ...args];
  const proc = spawn(bin, fullArgs, { cwd: workDir, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout?.setEncoding('utf8').on('data', (d: string) => {
    out = (out + d).slice(-200_000);
  });
  proc.stderr?.setEncoding('utf8').on('data', (d: string) => {
    err = (err + d).slice(-20_000);
  });
  const exited = new Promise<number | null>((resolve) => {
    proc.once('error', (e) => {
      err += `\nspawn failed: ${e.message}`;
      resolve(null);
    });
    proc.once('close', (code) => resolve(code));
  });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null && proc.pid !== undefined) {
      proc.kill('SIGTERM');
      const t = setTimeout(() => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      }, 2000);
      const code = await exited;
      clearTimeout(t);
      return code;
    }
    return exited;
  };
  const watchdog = setTimeout(() => void stop(), timeoutMs);
  watchdog.unref();
  void exited.then(() => clearTimeout(watchdog));
  return { proc, workDir, args: fullArgs, exited, stdout: () => out, stderr: () => err, stop };
}

/** Common arguments: UDP, one socket, everything on 127.0.0.1. */
async function commonArgs(sipPort: number): Promise<string[]> {
  return ['-t', 'u1', '-i', HOST, '-p', String(sipPort), '-bind_local', '-mi', HOST, '-mp', String(await freeMediaPort()), '-ci', HOST, '-cp', String(await freeUdpPort()), '-nostdin'];
}

/**
 * The baseline UAS, listening. No -m: it answers until stopped, so that its CPU time and socket
 * drops can be read after the UAC's last call (a UAS with -m exits at its last BYE).
 */
async function startBaselineUas(bin: string, timeoutMs: number): Promise<{ sipp: Sipp; port: number }> {
  const port = await freeSipPort();
  const sipp = spawnSipp(bin, UAS_SCENARIO, undefined, [...(await commonArgs(port)), '-trace_err', '-error_file', 'errors.log'], timeoutMs);
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (sipp.proc.exitCode !== null || sipp.proc.signalCode !== null) {
      throw new Error(`baseline SIPp UAS exited (${exitMeaning(sipp.proc.exitCode, sipp.proc.signalCode)}) before listening:\n${sipp.stderr()}${sipp.stdout().slice(-2000)}`);
    }
    const sock = udpSocket(port);
    if (sock === undefined) {
      await sleep(500);
      break;
    }
    if (sock.bound) break;
    if (Date.now() > deadline) throw new Error(`baseline SIPp UAS not listening on ${port} after 10 s`);
    await sleep(20);
  }
  return { sipp, port };
}

// ---------------------------------------------------------------------------------------------
// What a step measured

interface StepResult {
  target: string;
  rate: number;
  callsAsked: number;
  exitCode: number | null;
  successful: number;
  failed: number;
  /** INVITEs per second as SIPp sent them (first transmissions, first to last). */
  offeredRate: number;
  /** 200 OKs to INVITEs per second, first to last. */
  setupsPerSec: number;
  /** Ascending INVITE->200 times, ms. */
  inviteTo200: Float64Array;
  /** SIPp's own rtd values (4 ms clock steps), ascending, ms. */
  sippRtd: Float64Array;
  /** Final responses to INVITEs other than 200, by status. */
  otherFinals: Map<number, number>;
  /** INVITEs without any final response in the trace. */
  noFinal: number;
  /** BYEs sent that got no 200 in the trace. */
  byeUnanswered: number;
  inviteRetrans: number;
  byeRetrans: number;
  /** 200 OKs to INVITE received again: the target retransmitted its 200 (it missed our ACK). */
  okRetrans: number;
  /** Nonzero failure causes and anomaly counters of -trace_stat's last line. */
  causes: Map<string, number>;
  /** Tail of SIPp's error log(s). */
  errorLog: string;
  /** CPU of the target per successful call, microseconds (callbridge: this whole process). */
  targetCpuUsPerCall: number;
  /** CPU of the SIPp UAC per successful call, microseconds. */
  uacCpuUsPerCall: number;
  /** Datagrams the kernel dropped on the target's SIP socket during the step (receive buffer full). */
  targetDrops: number;
  /** The same on the UAC's socket (last sample before it exited). */
  uacDrops: number;
  /** callbridge only: calls handed to onInboundCall, leftovers after the step, event-loop delay. */
  answered?: number;
  callsLeft?: number;
  rtpPortsLeft?: number;
  loopDelayP99Ms?: number;
  loopDelayMaxMs?: number;
  workDir?: string;
}

/** -trace_stat's CSV: the last line's cumulative counters by name. */
function parseStatCsv(text: string): Map<string, string> {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  const out = new Map<string, string>();
  if (lines.length < 2) return out;
  const header = lines[0]?.split(';') ?? [];
  const last = lines[lines.length - 1]?.split(';') ?? [];
  header.forEach((h, i) => out.set(h.trim(), (last[i] ?? '').trim()));
  return out;
}

/** "  Successful call | 0 | 12" on the last statistics screen of stdout: the cumulative column. */
function screenStat(stdout: string, label: string): number | undefined {
  const all = [...stdout.matchAll(new RegExp(`^\\s*${label}\\s*\\|[^|]*\\|\\s*(\\d+)`, 'gm'))];
  const m = all[all.length - 1];
  return m ? Number(m[1]) : undefined;
}

function readIn(dir: string, match: (name: string) => boolean): string {
  const name = readdirSync(dir).find(match);
  return name ? readFileSync(join(dir, name), 'latin1') : '';
}

/** What a target adds to a step, read once the UAC has finished. */
type TargetExtra = Partial<Pick<StepResult, 'answered' | 'callsLeft' | 'rtpPortsLeft' | 'loopDelayP99Ms' | 'loopDelayMaxMs'>> & {
  targetDrops: number;
  /** CPU seconds of the target during the step. */
  cpuSecs: number;
  errorLog?: string;
};

interface Target {
  name: string;
  /** Gets the far end ready for a step; returns where to send the calls and how to finish. */
  prepare(timeoutMs: number): Promise<{ remote: string; finish(): Promise<TargetExtra> }>;
}

async function runStep(bin: string, target: Target, rate: number, secs: number, holdMs: number, keepLogs: boolean): Promise<StepResult> {
  const calls = Math.max(2, Math.round(rate * secs));
  const timeoutMs = secs * 1000 + RECV_TIMEOUT_MS * 3 + 20_000;
  const far = await target.prepare(timeoutMs);
  const uacPort = await freeSipPort();
  const uacArgs = [
    ...(await commonArgs(uacPort)),
    '-s', NUMBER,
    '-r', String(rate), '-rp', '1000',
    '-m', String(calls),
    '-l', String(Math.max(50, rate)),
    '-d', String(holdMs),
    '-recv_timeout', String(RECV_TIMEOUT_MS),
    '-trace_shortmsg', '-shortmessage_file', 'short.log',
    '-trace_err', '-error_file', 'errors.log',
    '-trace_stat', '-stf', 'stat.csv', '-fd', '1',
    '-trace_rtt', '-rtt_freq', '1',
  ];
  const uac = spawnSipp(bin, UAC_SCENARIO, far.remote, uacArgs, timeoutMs);
  // The UAC's CPU and socket drops: sampled while it runs (its /proc entries go when it exits).
  // Reading /proc/net/udp costs this process (callbridge's) CPU: only every 500 ms.
  let uacCpu = 0;
  let uacDrops = 0;
  let ticks = 0;
  const sampler = setInterval(() => {
    const v = procCpuSeconds(uac.proc.pid);
    if (Number.isFinite(v)) uacCpu = v;
    if (ticks++ % 5 === 0) uacDrops = udpSocket(uacPort)?.drops ?? uacDrops;
  }, 100);
  const exitCode = await uac.exited;
  clearInterval(sampler);
  const { errorLog: farErrors, cpuSecs, ...extra } = await far.finish();

  const dir = uac.workDir;
  const trace = parseShortMessages(readIn(dir, (n) => n === 'short.log'));
  const stat = parseStatCsv(readIn(dir, (n) => n === 'stat.csv'));
  const statNum = (k: string) => (stat.has(k) ? Number(stat.get(k)) : undefined);
  const successful = statNum('SuccessfulCall(C)') ?? screenStat(uac.stdout(), 'Successful call') ?? 0;
  const failed = statNum('FailedCall(C)') ?? screenStat(uac.stdout(), 'Failed call') ?? calls - successful;
  const causes = new Map<string, number>();
  for (const [k, v] of stat) {
    if (!k.endsWith('(C)') || k === 'FailedCall(C)') continue;
    if (!/^(Failed|Retransmissions|DeadCallMsgs|OutOfCallMsgs|Warnings|FatalErrors)/.test(k)) continue;
    const n = Number(v);
    if (Number.isFinite(n) && n > 0) causes.set(k.replace('(C)', ''), n);
  }
  const otherFinals = new Map<number, number>();
  let noFinal = 0;
  let byeUnanswered = 0;
  let inviteRetrans = 0;
  let byeRetrans = 0;
  let okRetrans = 0;
  for (const c of trace.values()) {
    if (c.final === undefined && c.invites > 0) noFinal++;
    if (c.final !== undefined && c.final !== 200) otherFinals.set(c.final, (otherFinals.get(c.final) ?? 0) + 1);
    if (c.byes > 0 && !c.byeOk) byeUnanswered++;
    inviteRetrans += Math.max(0, c.invites - 1);
    byeRetrans += Math.max(0, c.byes - 1);
    okRetrans += Math.max(0, c.oks - 1);
  }
  const rtt = readIn(dir, (n) => n.endsWith('_rtt.csv'))
    .split('\n')
    .slice(1)
    .map((l) => Number(l.split(';')[1]))
    .filter((v) => Number.isFinite(v));
  const values = [...trace.values()];
  const errLog = readIn(dir, (n) => n === 'errors.log').trim();
  const result: StepResult = {
    target: target.name,
    rate,
    callsAsked: calls,
    exitCode,
    successful,
    failed,
    offeredRate: spanRate(values.flatMap((c) => (c.inviteAt === undefined ? [] : [c.inviteAt]))),
    setupsPerSec: spanRate(values.flatMap((c) => (c.okAt === undefined ? [] : [c.okAt]))),
    inviteTo200: inviteTo200Ms(trace),
    sippRtd: Float64Array.from(rtt).sort(),
    otherFinals,
    noFinal,
    byeUnanswered,
    inviteRetrans,
    byeRetrans,
    okRetrans,
    causes,
    errorLog: [errLog.split('\n').slice(-30).join('\n'), uac.stderr().trim() ? `stderr: ${uac.stderr().trim().slice(-2000)}` : '', farErrors ?? ''].filter(Boolean).join('\n'),
    targetCpuUsPerCall: (cpuSecs * 1e6) / Math.max(1, successful),
    uacCpuUsPerCall: (uacCpu * 1e6) / Math.max(1, successful),
    uacDrops,
    ...extra,
  };
  // A run SIPp did not finish on its own (killed, fatal error) is never sustained.
  if (exitCode !== 0 && exitCode !== 1) result.failed = Math.max(result.failed, calls - successful, 1);
  if (keepLogs) result.workDir = dir;
  else rmSync(dir, { recursive: true, force: true });
  return result;
}

function sustained(r: StepResult): boolean {
  return r.exitCode === 0 && r.failed === 0 && r.successful === r.callsAsked && r.setupsPerSec >= r.rate * KEEP_UP;
}

function describeFailures(r: StepResult): string {
  const lines = [`    ${r.target} @ ${r.rate} calls/s: ${r.successful} successful, ${r.failed} failed of ${r.callsAsked}; SIPp exit ${r.exitCode ?? 'signal'} (${exitMeaning(r.exitCode)})`];
  if (r.setupsPerSec < r.rate * KEEP_UP) lines.push(`      fell behind: ${formatValue(r.setupsPerSec)} setups/s completed of ${r.rate} asked (INVITEs first sent at ${formatValue(r.offeredRate)}/s)`);
  lines.push(`      INVITE->200 p50 ${formatValue(percentile(r.inviteTo200, 0.5))} ms, p99 ${formatValue(percentile(r.inviteTo200, 0.99))} ms, max ${formatValue(r.inviteTo200[r.inviteTo200.length - 1] ?? Number.NaN)} ms`);
  if (r.otherFinals.size > 0) lines.push(`      final responses to INVITE other than 200: ${[...r.otherFinals].map(([s, n]) => `${s} x${n}`).join(', ')}`);
  if (r.noFinal > 0) lines.push(`      INVITEs that never got a final response: ${r.noFinal}`);
  if (r.byeUnanswered > 0) lines.push(`      BYEs that never got a 200: ${r.byeUnanswered}`);
  lines.push(`      retransmissions: INVITE ${r.inviteRetrans}, BYE ${r.byeRetrans}; 200 OK to INVITE received again ${r.okRetrans}; datagrams dropped by the kernel on the target's SIP socket ${r.targetDrops}, on SIPp's ${r.uacDrops}`);
  if (r.loopDelayMaxMs !== undefined) lines.push(`      callbridge event-loop delay p99 ${formatValue(r.loopDelayP99Ms ?? Number.NaN)} ms, max ${formatValue(r.loopDelayMaxMs)} ms; calls still up after the step ${r.callsLeft ?? 0}, RTP ports held ${r.rtpPortsLeft ?? 0}`);
  if (r.causes.size > 0) lines.push(`      SIPp counters: ${[...r.causes].map(([k, v]) => `${k}=${v}`).join(', ')}`);
  if (r.errorLog) {
    // The error log repeats whole messages; keep its event lines (what happened to which call).
    const events = r.errorLog.split('\n').filter((l) => /^'?\d{4}-\d\d-\d\d\t|^stderr:|^baseline|Aborting|timeout|[Uu]nexpected|Dead call/.test(l));
    lines.push(`      SIPp error log, ${events.length} event lines; the last ones:\n${events.slice(-8).map((l) => `        ${l.replace(/^'/, '').slice(0, 220)}`).join('\n')}`);
  }
  if (r.workDir) lines.push(`      logs kept in ${r.workDir}`);
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------

async function startCallbridge(): Promise<{ daemon: Daemon; dataDir: string; counters: { answered: number } }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-sip-'));
  const config = loadConfig(
    {
      data_dir: dataDir,
      http: { host: HOST, port: 0 },
      sip: { host: HOST, port: 0 },
      rtp: { address: HOST },
      drain: { deadline_secs: 1 },
      log_level: 'silent',
    },
    {},
  );
  const daemon = await startDaemon(config, createLogger('silent'), () => {});
  const counters = { answered: 0 };
  try {
    if (!daemon.sip) throw new Error('the daemon started without SIP');
    daemon.sip.ua.onInboundCall((call) => {
      counters.answered++;
      call.answer();
    });
    const key = readFileSync(join(dataDir, INITIAL_KEY_FILE), 'utf8').trim();
    const api = async (path: string, body: unknown): Promise<{ id: string }> => {
      const res = await fetch(daemon.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const text = await res.text();
      if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${text}`);
      return JSON.parse(text) as { id: string };
    };
    const agent = await api('/v1/agents', { name: 'bench-sip' });
    const trunk = await api('/v1/sip-trunks', { pbx: 'generic', name: 'bench sipp', inbound_auth_type: 'acl', inbound_acl: [`${HOST}/32`] });
    await api(`/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER });
  } catch (err) {
    await daemon.close().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  return { daemon, dataDir, counters };
}

export async function run(): Promise<void> {
  const avail = sippAvailable();
  if (!avail.ok) throw new Error(`bench/sip needs SIPp: ${avail.reason ?? 'not available'}`);
  const rates = envIntegerList('BENCH_SIP_RATES', '100,200,300,400,500,600,700,800,1000,1200');
  const secs = envNumber('BENCH_SIP_SECS', 4);
  const holdMs = Math.round(envNumber('BENCH_SIP_HOLD_MS', 100));
  const keepLogs = process.env.BENCH_SIP_KEEP_LOGS === '1';
  const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');
  process.stdout.write(
    `machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, ${avail.version ?? 'SIPp'}, load average ${load()}\n` +
      `load: SIPp UAC over UDP on ${HOST}, steps ${rates.join(', ')} calls/s, ${secs} s each (-m rate*${secs}, -l max(50, rate)), ` +
      `calls held ${holdMs} ms between ACK and BYE, no RTP; a step is sustained with 0 failed calls and >= ${KEEP_UP * 100}% of its rate completed\n` +
      `callbridge runs in this process and answers every routed call at once (onInboundCall -> answer(): no voice session, the call bridge is not measured here); ` +
      `baseline: a SIPp UAS answering 200 at once (callbridge also sends 100 and 180)\n`,
  );

  const { daemon, dataDir, counters } = await startCallbridge();
  const sip = daemon.sip!;
  const sipPort = sip.port;
  const uases = new Set<Sipp>();
  const targets: Target[] = [
    {
      name: BASELINE,
      async prepare(timeoutMs) {
        const { sipp, port } = await startBaselineUas(avail.bin, timeoutMs);
        uases.add(sipp);
        const cpu0 = procCpuSeconds(sipp.proc.pid);
        return {
          remote: `${HOST}:${port}`,
          async finish() {
            const exited = sipp.proc.exitCode !== null || sipp.proc.signalCode !== null;
            const cpuSecs = procCpuSeconds(sipp.proc.pid) - cpu0;
            const targetDrops = udpSocket(port)?.drops ?? Number.NaN;
            await sipp.stop();
            uases.delete(sipp);
            const errors = existsSync(join(sipp.workDir, 'errors.log')) ? readFileSync(join(sipp.workDir, 'errors.log'), 'latin1').trim() : '';
            rmSync(sipp.workDir, { recursive: true, force: true });
            // The UAS runs until stopped: having exited before means it failed.
            const errorLog = [exited ? `baseline UAS exited early: ${sipp.stderr()}` : '', errors ? `baseline UAS error log:\n${errors.split('\n').slice(-20).join('\n')}` : ''].filter(Boolean).join('\n');
            return { cpuSecs, targetDrops, ...(errorLog ? { errorLog } : {}) };
          },
        };
      },
    },
    {
      name: CALLBRIDGE,
      async prepare() {
        const answered0 = counters.answered;
        const drops0 = udpSocket(sipPort)?.drops ?? Number.NaN;
        const cpu0 = process.cpuUsage();
        const loop = monitorEventLoopDelay({ resolution: 1 });
        loop.enable();
        return {
          remote: `${HOST}:${sipPort}`,
          async finish() {
            const cpu = process.cpuUsage(cpu0);
            loop.disable();
            // Calls end with the BYE's 200; give stragglers a moment before counting leftovers.
            for (let i = 0; i < 20 && (sip.ua.calls.length > 0 || sip.ports.inUse > 0); i++) await sleep(50);
            return {
              cpuSecs: (cpu.user + cpu.system) / 1e6,
              targetDrops: (udpSocket(sipPort)?.drops ?? Number.NaN) - drops0,
              answered: counters.answered - answered0,
              callsLeft: sip.ua.calls.length,
              rtpPortsLeft: sip.ports.inUse,
              loopDelayP99Ms: loop.percentile(99) / 1e6,
              loopDelayMaxMs: loop.max / 1e6,
            };
          },
        };
      },
    },
  ];

  const results = new Map<string, StepResult[]>(targets.map((t) => [t.name, []]));
  const stopped = new Set<string>();
  try {
    process.stdout.write(`callbridge SIP on ${HOST}:${sipPort} (UDP), RTP ports ${sip.ports.min}-${sip.ports.max} on ${HOST}\n`);
    for (const target of targets) {
      const warm = await runStep(avail.bin, target, 50, 1, holdMs, keepLogs);
      process.stdout.write(`  warm-up ${target.name}: ${warm.successful}/${warm.callsAsked} calls at 50 calls/s${warm.failed > 0 ? ` (${warm.failed} FAILED)` : ''}\n`);
      if (warm.failed > 0) process.stdout.write(describeFailures(warm) + '\n');
    }
    for (const rate of rates) {
      for (const target of targets) {
        if (stopped.has(target.name)) continue;
        process.stdout.write(`  ${target.name} at ${rate} calls/s for ${secs} s...`);
        const r = await runStep(avail.bin, target, rate, secs, holdMs, keepLogs);
        results.get(target.name)!.push(r);
        const ok = sustained(r);
        process.stdout.write(
          ` ${r.successful} ok, ${r.failed} failed, ${formatValue(r.setupsPerSec)} setups/s, INVITE->200 p50 ${formatValue(percentile(r.inviteTo200, 0.5))} ms p99 ${formatValue(percentile(r.inviteTo200, 0.99))} ms${ok ? '' : ' -- NOT SUSTAINED'}\n`,
        );
        if (!ok) {
          stopped.add(target.name);
          process.stdout.write(describeFailures(r) + '\n');
        }
      }
      if (stopped.size === targets.length) break;
    }
  } finally {
    for (const u of uases) await u.stop().catch(() => undefined);
    await daemon.close().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  }

  const baseList = results.get(BASELINE) ?? [];
  const cbList = results.get(CALLBRIDGE) ?? [];
  const rows = [['target', 'asked/s', 'INVITE/s', 'setups/s', 'ok', 'failed', 'p50 ms', 'p99 ms', 'max ms', 'SIPp rtd p99', 'retrans INV/BYE/200', 'UDP drops', 'CPU us/call', 'UAC CPU us/call', 'loop p99/max ms', 'left calls/ports']];
  for (const r of [...baseList, ...cbList]) {
    rows.push([
      r.target,
      String(r.rate),
      formatValue(r.offeredRate),
      formatValue(r.setupsPerSec),
      String(r.successful),
      String(r.failed),
      formatValue(percentile(r.inviteTo200, 0.5)),
      formatValue(percentile(r.inviteTo200, 0.99)),
      formatValue(r.inviteTo200[r.inviteTo200.length - 1] ?? Number.NaN),
      formatValue(percentile(r.sippRtd, 0.99)),
      `${r.inviteRetrans}/${r.byeRetrans}/${r.okRetrans}`,
      String(r.targetDrops),
      formatValue(r.targetCpuUsPerCall),
      formatValue(r.uacCpuUsPerCall),
      r.loopDelayMaxMs === undefined ? '' : `${formatValue(r.loopDelayP99Ms ?? Number.NaN)}/${formatValue(r.loopDelayMaxMs)}`,
      r.callsLeft === undefined ? '' : `${r.callsLeft}/${r.rtpPortsLeft ?? 0}`,
    ]);
  }
  process.stdout.write(`\n${table(rows)}\n`);
  process.stdout.write(
    `  p50/p99/max: INVITE sent -> 200 OK received, from SIPp's microsecond message trace; SIPp rtd p99: SIPp's own figure (4 ms clock steps), a cross-check\n` +
      `  UDP drops: datagrams the kernel dropped on the target's SIP socket (receive buffer full); CPU: the SIPp UAS process for the baseline, this whole process for callbridge\n` +
      `  loop: callbridge's event-loop delay; left: calls still up / RTP port pairs held 1 s after the step\n`,
  );

  const best = (list: StepResult[]): StepResult | undefined => list.filter(sustained).pop();
  const base = best(baseList);
  const cb = best(cbList);
  const maxRate = rates[rates.length - 1] ?? 0;
  process.stdout.write(`\nfailed calls per step: ${[...baseList, ...cbList].map((r) => `${r.target === BASELINE ? 'baseline' : 'callbridge'} @${r.rate}: ${r.failed}`).join(', ')}\n`);
  if (!base) throw new Error(`the baseline SIPp UAS sustained no step (lowest ${rates[0]} calls/s): the machine or SIPp is not fit for this benchmark`);

  // Latency compared at the same rate: callbridge's highest sustained step, the baseline's run of it.
  const atRate = cb?.rate ?? base.rate;
  const baseAt = baseList.find((r) => r.rate === atRate && sustained(r)) ?? base;
  const p = (r: StepResult | undefined, q: number) => (r ? percentile(r.inviteTo200, q) : Number.NaN);
  const figures: Figure[] = [
    {
      name: 'sip_setups_per_sec',
      value: cb?.setupsPerSec ?? 0,
      unit: 'calls/s',
      baseline: base.setupsPerSec,
      note: `highest step with 0 failed calls: callbridge ${cb?.rate ?? 'none'}, baseline ${base.rate}${base.rate === maxRate ? ' (the top step)' : ''}`,
    },
    { name: 'sip_invite_to_200_p50', value: p(cb, 0.5), unit: 'ms', baseline: p(baseAt, 0.5), note: `at ${atRate} calls/s, both` },
    { name: 'sip_invite_to_200_p99', value: p(cb, 0.99), unit: 'ms', baseline: p(baseAt, 0.99), note: `at ${atRate} calls/s, both` },
  ];
  const cbAt200 = cbList.find((r) => r.rate === 200 && sustained(r));
  const baseAt200 = baseList.find((r) => r.rate === 200 && sustained(r));
  if (cbAt200 && baseAt200 && atRate !== 200) {
    figures.push({ name: 'sip_invite_to_200_p99_at_200cps', value: p(cbAt200, 0.99), unit: 'ms', baseline: p(baseAt200, 0.99), note: 'at the target rate, 200 calls/s' });
  }
  if (cb) figures.push({ name: 'sip_cpu_per_call', value: cb.targetCpuUsPerCall, unit: 'us', baseline: baseAt.targetCpuUsPerCall, note: `at ${atRate} calls/s; callbridge: whole process` });
  const measured = figures.filter((f) => Number.isFinite(f.value) && Number.isFinite(f.baseline));

  const cbFail = cbList.find((r) => !sustained(r));
  process.stdout.write(
    `targets:\n  >= 200 call setups/s with 0 failed calls: ${(cb?.rate ?? 0) >= 200 ? 'met' : 'NOT MET'} ` +
      `(callbridge sustained ${cb ? `${formatValue(cb.setupsPerSec)} setups/s at the ${cb.rate} calls/s step` : 'no step'}` +
      `${cbFail ? `; it failed at ${cbFail.rate} calls/s: ${cbFail.failed} failed calls, ${formatValue(cbFail.setupsPerSec)} setups/s` : cb?.rate === maxRate ? '; that is the top step, its limit may be higher: raise BENCH_SIP_RATES' : ''})\n` +
      `  baseline sustained ${formatValue(base.setupsPerSec)} setups/s at the ${base.rate} calls/s step${base.rate === maxRate ? ' (the top step: the baseline figure is a lower bound)' : ''}\n` +
      `  load average after the run: ${load()} (other processes on this machine skew the figures: compare runs on a quiet machine)\n`,
  );

  const rescued = [...baseList, ...cbList].filter((r) => sustained(r) && (r.inviteRetrans > 0 || r.byeRetrans > 0 || r.targetDrops > 0));
  for (const r of rescued) {
    process.stdout.write(
      `  note: ${r.target} @ ${r.rate} calls/s had no failed call, but only thanks to retransmissions: the kernel dropped ${r.targetDrops} datagrams on its SIP socket, ` +
        `SIPp retransmitted ${r.inviteRetrans} INVITEs and ${r.byeRetrans} BYEs (INVITE->200 max ${formatValue(r.inviteTo200[r.inviteTo200.length - 1] ?? Number.NaN)} ms)` +
        `${r.loopDelayMaxMs === undefined ? '' : `; event-loop delay max ${formatValue(r.loopDelayMaxMs)} ms`}\n`,
    );
  }

  printFigures('bench/sip figures (ratio = value / baseline; for latency lower is better)', measured);
  if (!cb) throw new Error(`callbridge sustained no step without failed calls (lowest ${rates[0]} calls/s): see the failures above`);
}
