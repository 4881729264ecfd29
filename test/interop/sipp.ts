/**
 * Harness for the SIPp interop scenarios in `test/interop/scenarios/` (README.md beside this file
 * explains each scenario). Everything binds to 127.0.0.1 on ports chosen here at run time.
 *
 *   const uas = startSipp({ scenario: 'uas-challenge-407', rtpEcho: true });
 *   await uas.ready;                        // its SIP port is bound
 *   ... make callbridge dial 127.0.0.1:<uas.localPort> ...
 *   const r = await uas.result;             // exit code, logs, parsed message trace
 *   expect(r.code, r.describe()).toBe(0);
 *
 * Each run gets a fresh working directory holding SIPp's logs and `audio.ulaw` (what the UAC
 * scenarios stream as RTP); it is deleted after the run unless SIPP_KEEP_LOGS=1.
 *
 * SIPp 3.6.1 facts the scenarios and this harness rely on (checked against the Debian build):
 * - `[authentication]` takes its credentials from -au/-ap only (keywords do not nest inside it),
 *   and its digest `uri` is `sip:<remote_ip>:<remote_port>` unless -auth_uri is given: the harness
 *   passes -auth_uri <service>@<remote> so the uri is exactly the Request-URI, as real PBXs send.
 * - `rtp_stream="file,loops,pt"` takes a literal path (no keywords), relative to the working
 *   directory: hence `audio.ulaw` there. The file is raw 8 kHz mu-law, no header.
 * - `<verifyauth>` reads only `Authorization:`, never `Proxy-Authorization:`; verifyDigest() below
 *   checks digest responses from the message trace instead.
 * - A `-key` that the scenario uses but the command line does not give fails at load
 *   ("Unsupported keyword").
 * - Exit codes: 0 all calls succeeded, 1 at least one failed, 97 internal exit command, 99 no call
 *   processed, 255 fatal error (also -timeout_error firing), 254 socket bind failure.
 */
import { spawn, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import dgram from 'node:dgram';
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import alawmulaw from 'alawmulaw';
import { peerMissing, requirePeer } from '../helpers/peer-availability.ts';

const { mulaw } = alawmulaw;

export const SCENARIO_DIR = fileURLToPath(new URL('./scenarios/', import.meta.url));
const LOOPBACK = '127.0.0.1';

// ---------------------------------------------------------------------------------------------
// Locating SIPp

/** The SIPp binary: $SIPP_BIN, else /usr/bin/sipp, else `sipp` on PATH. */
export function sippBin(): string {
  if (process.env.SIPP_BIN) return process.env.SIPP_BIN;
  if (existsSync('/usr/bin/sipp')) return '/usr/bin/sipp';
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, 'sipp'))) return join(dir, 'sipp');
  }
  return '/usr/bin/sipp';
}

export interface SippAvailability {
  ok: boolean;
  /** Skip the tests: SIPp is unusable here and CI is not set (in CI they fail instead). */
  skip: boolean;
  bin: string;
  /** e.g. "SIPp v3.6.1-SCTP-PCAP-RTPSTREAM" */
  version?: string;
  /** Why SIPp cannot run (naming the Debian package), when ok is false. */
  reason?: string;
}

let availability: SippAvailability | undefined;

/**
 * Whether SIPp can run here, and with the features the scenarios use (RTPSTREAM for rtp_stream).
 * When it cannot, tests skip with `reason` on a developer's machine and fail in CI (CI set), which
 * must install it (Debian package sip-tester).
 */
export function sippAvailable(): SippAvailability {
  if (availability) return availability;
  const bin = sippBin();
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    availability = { ...peerMissing(`SIPp not found at ${bin} (apt-get install sip-tester, or set SIPP_BIN)`), bin };
    return availability;
  }
  let out: string;
  try {
    // `sipp -v` prints the version and exits 0 (older builds exit 1: accept any exit, read the text).
    out = execFileSync(bin, ['-v'], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err: any) {
    out = `${err?.stdout ?? ''}${err?.stderr ?? ''}`;
  }
  const version = /SIPp v[0-9][\w.-]*\w/.exec(out)?.[0];
  if (!version) {
    availability = { ...peerMissing(`${bin} -v did not print a SIPp version (apt-get install sip-tester, or set SIPP_BIN)`), bin };
  } else if (!version.includes('RTPSTREAM')) {
    availability = { ...peerMissing(`${version} lacks RTPSTREAM support (the scenarios stream RTP with rtp_stream; Debian's sip-tester has it)`), bin, version };
  } else {
    availability = { ok: true, skip: false, bin, version };
  }
  return availability;
}

// ---------------------------------------------------------------------------------------------
// Ports

function udpPortFree(port: number, host = LOOPBACK): Promise<boolean> {
  return new Promise((done) => {
    const s = dgram.createSocket('udp4');
    s.once('error', () => {
      s.close();
      done(false);
    });
    s.bind(port, host, () => s.close(() => done(true)));
  });
}

function tcpPortFree(port: number, host = LOOPBACK): Promise<boolean> {
  return new Promise((done) => {
    const srv = net.createServer();
    srv.once('error', () => done(false));
    srv.listen(port, host, () => srv.close(() => done(true)));
  });
}

/** A UDP port on 127.0.0.1 that the OS just handed out and that is free again. */
export function freeUdpPort(): Promise<number> {
  return new Promise((done, fail) => {
    const s = dgram.createSocket('udp4');
    s.once('error', fail);
    s.bind(0, LOOPBACK, () => {
      const { port } = s.address();
      s.close(() => done(port));
    });
  });
}

/** A port free for both UDP and TCP on 127.0.0.1 (SIP listens on both). */
export async function freeSipPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = await freeUdpPort();
    if (await tcpPortFree(port)) return port;
  }
  throw new Error('no port free for both UDP and TCP on 127.0.0.1');
}

/**
 * An even UDP port P with P..P+3 free: SIPp binds P (audio) and P+2 (video) for its media/echo
 * sockets, RTP convention keeps P+1/P+3 for RTCP.
 */
export async function freeMediaPort(avoid: readonly number[] = []): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const base = (await freeUdpPort()) & ~1;
    if (base < 1024 || base > 65530) continue;
    // A port picked for this SIPp but not bound yet (its SIP port) is free too: keep clear of it.
    if (avoid.some((p) => p >= base && p < base + 4)) continue;
    let ok = true;
    for (let p = base; p < base + 4 && ok; p++) ok = await udpPortFree(p);
    if (ok) return base;
  }
  throw new Error('no 4 consecutive free UDP ports on 127.0.0.1');
}

/**
 * Whether some socket is bound to `port` on this host, read from /proc/net (Linux) so that the
 * check itself never occupies the port SIPp is about to bind. null when /proc is unavailable.
 */
function portBound(port: number, transport: 'udp' | 'tcp'): boolean | null {
  const files = transport === 'udp' ? ['/proc/net/udp', '/proc/net/udp6'] : ['/proc/net/tcp', '/proc/net/tcp6'];
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  let seen = false;
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    seen = true;
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // local_address is column 1; TCP must be LISTEN (state 0A).
      if (cols[1]?.endsWith(hex) && (transport === 'udp' || cols[3] === '0A')) return true;
    }
  }
  return seen ? false : null;
}

// ---------------------------------------------------------------------------------------------
// Audio for rtp_stream

/**
 * A raw 8 kHz mu-law tone (default 1 s of 440 Hz at about -12 dBFS): the default `audio.ulaw`.
 */
export function ulawTone(seconds = 1, hz = 440, amplitude = 8000): Buffer {
  const n = Math.round(seconds * 8000);
  const pcm = new Int16Array(n);
  for (let i = 0; i < n; i++) pcm[i] = Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / 8000));
  return Buffer.from(mulaw.encode(pcm));
}

/**
 * Raw mu-law bytes for `audio.ulaw` from a file: a WAV (PCM16 or mu-law, 8 kHz mono; e.g.
 * espeak-ng output resampled to 8 kHz) is converted, anything else is taken as raw mu-law.
 * @throws Error for a WAV in another format.
 */
export function toUlaw(input: string | Buffer): Buffer {
  const buf = typeof input === 'string' ? readFileSync(input) : input;
  if (buf.length < 12 || buf.toString('latin1', 0, 4) !== 'RIFF' || buf.toString('latin1', 8, 12) !== 'WAVE') return buf;
  let fmt: { format: number; channels: number; rate: number; bits: number } | undefined;
  let off = 12;
  while (off + 8 <= buf.length) {
    const id = buf.toString('latin1', off, off + 4);
    const size = buf.readUInt32LE(off + 4);
    const body = off + 8;
    if (id === 'fmt ') {
      fmt = { format: buf.readUInt16LE(body), channels: buf.readUInt16LE(body + 2), rate: buf.readUInt32LE(body + 4), bits: buf.readUInt16LE(body + 14) };
    } else if (id === 'data') {
      if (!fmt) throw new Error('WAV: data chunk before fmt chunk');
      const data = buf.subarray(body, Math.min(body + size, buf.length));
      if (fmt.channels !== 1 || fmt.rate !== 8000) throw new Error(`WAV must be mono 8000 Hz for rtp_stream, got ${fmt.channels} ch ${fmt.rate} Hz`);
      if (fmt.format === 7 && fmt.bits === 8) return Buffer.from(data);
      if (fmt.format === 1 && fmt.bits === 16) {
        const pcm = new Int16Array(data.length >> 1);
        for (let i = 0; i < pcm.length; i++) pcm[i] = data.readInt16LE(i * 2);
        return Buffer.from(mulaw.encode(pcm));
      }
      throw new Error(`WAV format ${fmt.format}/${fmt.bits} bit not supported (PCM16 or mu-law)`);
    }
    off = body + size + (size & 1);
  }
  throw new Error('WAV without a data chunk');
}

// ---------------------------------------------------------------------------------------------
// Running SIPp

export interface SippOptions {
  /** A scenario name in test/interop/scenarios ("inbound-digest", ".xml" optional) or a path. */
  scenario: string;
  /** host:port to call (UAC scenarios); omit for UAS scenarios. Must be loopback in tests. */
  remote?: string;
  /** SIP port SIPp binds on 127.0.0.1; default: a free one. */
  localPort?: number;
  /** SIPp's media port (-mp): even, with +1..+3 free; default: a free one. */
  mediaPort?: number;
  /** -s: the Request-URI user, i.e. the number dialled. */
  service?: string;
  /** -key name value: the [name] keywords of the scenario (e.g. caller, rtp_port). */
  keys?: Record<string, string | number>;
  /** -set name value: global variables [$name]. */
  vars?: Record<string, string | number>;
  /**
   * Digest credentials for [authentication] (-au/-ap). `uri` is the digest uri without "sip:"
   * (-auth_uri); default `<service>@<remote>`, i.e. the Request-URI. false: SIPp's own default
   * (sip:<remote_ip>:<remote_port>), which a strict server rejects.
   */
  auth?: { username: string; password: string; uri?: string | false };
  /** -inf: a CSV file (path, relative to the scenario directory when not absolute) or, when it
   * contains a newline, the CSV text itself. */
  injectCsv?: string | string[];
  /** -m: calls to make or answer before exiting; default 1. */
  calls?: number;
  /** -d: the length of each <pause/> without milliseconds (how long calls stay up). */
  durationMs?: number;
  /** -rtp_echo: echo RTP arriving on the media port (UAS scenarios that answer with [media_port]). */
  rtpEcho?: boolean;
  /** What audio.ulaw holds: raw mu-law, or a WAV path/buffer (converted); default ulawTone(). */
  audio?: string | Buffer;
  /** -t u1 (default) or t1. */
  transport?: 'udp' | 'tcp';
  /** Kill SIPp (by PID) after this long; SIPp's own -timeout fires 1 s earlier. Default 30 s. */
  timeoutMs?: number;
  /** Appended last, e.g. ['-r', '50', '-l', '200'] for load. */
  extraArgs?: string[];
}

export interface SipMessage {
  direction: 'sent' | 'received';
  transport: string;
  /** The start line, e.g. "INVITE sip:1000@127.0.0.1:5060 SIP/2.0" or "SIP/2.0 401 Unauthorized". */
  startLine: string;
  /** Request method, for requests. */
  method?: string;
  /** Request-URI, for requests. */
  requestUri?: string;
  /** Status code, for responses. */
  status?: number;
  /** The CSeq method (responses name the request they answer this way). */
  cseqMethod?: string;
  headers: Array<[string, string]>;
  body: string;
  raw: string;
  /** First value of a header (case-insensitive; compact forms not expanded). */
  header(name: string): string | undefined;
  /** The branch parameter of the top Via. */
  branch(): string | undefined;
}

export interface SippResult {
  /** Exit code; null when killed by a signal. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when the harness signalled SIPp (its watchdog or kill()): SIPp can exit 0 on SIGTERM,
   * so a killed run proves nothing even with code 0. */
  killed: boolean;
  /** What the exit code means, in words. */
  meaning: string;
  stdout: string;
  stderr: string;
  /** -trace_err: unexpected messages, failed checks, aborted calls. */
  errors: string;
  /** -trace_logs: <log> actions of the scenario. */
  logs: string;
  /** -trace_msg, raw. */
  messageLog: string;
  /** -trace_msg, parsed, in order. Retransmissions appear each time. */
  messages: SipMessage[];
  /** From the final statistics screen. */
  successfulCalls?: number;
  failedCalls?: number;
  args: string[];
  durationMs: number;
  /** Kept only with SIPP_KEEP_LOGS=1. */
  workDir?: string;
  /** Exit code, meaning, error log and stderr tails and the message flow: for assertion messages. */
  describe(): string;
  /** Status codes received (or sent, for a UAS), optionally for one CSeq method. */
  statuses(direction?: 'sent' | 'received', cseqMethod?: string): number[];
  /** Requests of a method in a direction, in order. */
  requests(method: string, direction?: 'sent' | 'received'): SipMessage[];
}

export interface SippProcess {
  pid: number | undefined;
  localPort: number;
  mediaPort: number;
  args: string[];
  /** Resolves once the SIP port is bound (rejects if SIPp exits first). */
  ready: Promise<void>;
  result: Promise<SippResult>;
  /** SIGTERM, then SIGKILL after 2 s; only this process, by PID. */
  kill(): void;
}

export function exitMeaning(code: number | null, signal: NodeJS.Signals | null = null): string {
  if (code === null) return `killed by ${signal ?? 'a signal'}`;
  switch (code) {
    case 0: return 'all calls succeeded';
    case 1: return 'at least one call failed';
    case 97: return 'exit on internal command';
    case 99: return 'normal exit without calls processed';
    case 254: return 'fatal error binding a socket';
    case 255: return 'fatal error (scenario, arguments, or -timeout_error)';
    default: return `unexpected exit code ${code}`;
  }
}

export function resolveScenario(scenario: string): string {
  if (isAbsolute(scenario) || scenario.includes('/')) return resolve(scenario);
  return join(SCENARIO_DIR, scenario.endsWith('.xml') ? scenario : `${scenario}.xml`);
}

/**
 * Starts SIPp in the foreground (-nostdin), bound to 127.0.0.1 only (SIP, media and its control
 * socket). Use for UAS scenarios that must listen before the peer calls; runSipp() for the rest.
 */
export async function startSipp(opts: SippOptions): Promise<SippProcess> {
  const avail = sippAvailable();
  requirePeer(avail);
  const scenarioPath = resolveScenario(opts.scenario);
  if (!existsSync(scenarioPath)) throw new Error(`scenario not found: ${scenarioPath}`);
  const transport = opts.transport ?? 'udp';
  const localPort = opts.localPort ?? (await freeSipPort());
  // SIPp binds all three only once it starts: each pick keeps clear of the others (a media base
  // at SIP port - 2 once made SIPp fail binding its video socket on the SIP port).
  const mediaPort = opts.mediaPort ?? (await freeMediaPort([localPort]));
  let controlPort = await freeUdpPort();
  while (controlPort === localPort || (controlPort >= mediaPort && controlPort < mediaPort + 4)) controlPort = await freeUdpPort();
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const workDir = mkdtempSync(join(tmpdir(), 'callbridge-sipp-'));
  writeFileSync(join(workDir, 'audio.ulaw'), opts.audio === undefined ? ulawTone() : toUlaw(opts.audio));
  const file = (name: string) => join(workDir, name);

  const args: string[] = [];
  if (opts.remote) args.push(opts.remote);
  args.push('-sf', scenarioPath);
  args.push('-t', transport === 'tcp' ? 't1' : 'u1');
  args.push('-i', LOOPBACK, '-p', String(localPort), '-bind_local');
  args.push('-mi', LOOPBACK, '-mp', String(mediaPort));
  args.push('-ci', LOOPBACK, '-cp', String(controlPort));
  args.push('-m', String(opts.calls ?? 1), '-nostdin');
  args.push('-trace_msg', '-message_file', file('messages.log'));
  args.push('-trace_err', '-error_file', file('errors.log'));
  args.push('-trace_logs', '-log_file', file('actions.log'));
  args.push('-timeout', `${Math.max(1, Math.ceil(timeoutMs / 1000) - 1)}s`, '-timeout_error');
  if (opts.service !== undefined) args.push('-s', opts.service);
  for (const [k, v] of Object.entries(opts.keys ?? {})) args.push('-key', k, String(v));
  for (const [k, v] of Object.entries(opts.vars ?? {})) args.push('-set', k, String(v));
  if (opts.auth) {
    args.push('-au', opts.auth.username, '-ap', opts.auth.password);
    const uri = opts.auth.uri ?? (opts.service !== undefined && opts.remote ? `${opts.service}@${opts.remote}` : false);
    if (uri) args.push('-auth_uri', uri);
  }
  const csvs = opts.injectCsv === undefined ? [] : Array.isArray(opts.injectCsv) ? opts.injectCsv : [opts.injectCsv];
  csvs.forEach((csv, i) => {
    if (csv.includes('\n')) {
      writeFileSync(file(`inject-${i}.csv`), csv);
      args.push('-inf', file(`inject-${i}.csv`));
    } else {
      args.push('-inf', isAbsolute(csv) ? csv : join(SCENARIO_DIR, csv));
    }
  });
  if (opts.durationMs !== undefined) args.push('-d', String(opts.durationMs));
  if (opts.rtpEcho) args.push('-rtp_echo');
  args.push(...(opts.extraArgs ?? []));

  const started = Date.now();
  const child = spawn(avail.bin, args, { cwd: workDir, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });

  let exited = false;
  let killed = false;
  let killTimer: NodeJS.Timeout | undefined;
  const kill = () => {
    if (exited || child.pid === undefined) return;
    killed = true; // by the watchdog or a kill() call: SIPp may exit 0 on SIGTERM, so say so
    child.kill('SIGTERM');
    killTimer = setTimeout(() => {
      if (!exited) child.kill('SIGKILL');
    }, 2000);
    killTimer.unref();
  };
  const watchdog = setTimeout(kill, timeoutMs);
  watchdog.unref();

  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => {
    child.once('error', (err) => {
      stderr += `\nspawn error: ${err.message}`;
      exited = true;
      done({ code: null, signal: null });
    });
    child.once('close', (code, signal) => {
      exited = true;
      done({ code, signal });
    });
  });

  const result = exit.then(({ code, signal }): SippResult => {
    clearTimeout(watchdog);
    if (killTimer) clearTimeout(killTimer);
    const read = (name: string) => (existsSync(file(name)) ? readFileSync(file(name), 'latin1') : '');
    const messageLog = read('messages.log');
    const messages = parseMessageLog(messageLog);
    const errors = read('errors.log');
    const logs = read('actions.log');
    const keep = process.env.SIPP_KEEP_LOGS === '1';
    if (!keep) rmSync(workDir, { recursive: true, force: true });
    const stat = (label: string) => {
      // "  Successful call        |        0                  |        1": the cumulative (last)
      // column of the last statistics screen.
      const all = [...stdout.matchAll(new RegExp(`^\\s*${label}\\s*\\|[^|]*\\|\\s*(\\d+)`, 'gm'))];
      const m = all[all.length - 1];
      return m ? Number(m[1]) : undefined;
    };
    const res: SippResult = {
      code,
      signal,
      killed,
      meaning: exitMeaning(code, signal),
      stdout,
      stderr,
      errors,
      logs,
      messageLog,
      messages,
      successfulCalls: stat('Successful call'),
      failedCalls: stat('Failed call'),
      args,
      durationMs: Date.now() - started,
      workDir: keep ? workDir : undefined,
      describe: () => describeRun(res, scenarioPath),
      statuses: (direction = opts.remote ? 'received' : 'sent', cseqMethod) =>
        messages
          .filter((m) => m.direction === direction && m.status !== undefined && (!cseqMethod || m.cseqMethod === cseqMethod))
          .map((m) => m.status as number),
      requests: (method, direction = opts.remote ? 'sent' : 'received') =>
        messages.filter((m) => m.direction === direction && m.method === method),
    };
    return res;
  });

  const ready = (async () => {
    const deadline = Date.now() + 10_000;
    while (!exited && Date.now() < deadline) {
      const bound = portBound(localPort, transport);
      if (bound === null) {
        // No /proc: give SIPp a moment to parse the scenario and bind.
        await new Promise((r) => setTimeout(r, 300));
        break;
      }
      if (bound) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    if (exited) {
      const r = await result;
      throw new Error(`SIPp exited before listening on ${localPort}: ${r.describe()}`);
    }
  })();
  // Not awaited by runSipp(): keep a rejection from surfacing as unhandled.
  ready.catch(() => {});

  return { pid: child.pid, localPort, mediaPort, args, ready, result, kill };
}

/** Runs SIPp to completion. */
export async function runSipp(opts: SippOptions): Promise<SippResult> {
  const p = await startSipp(opts);
  return p.result;
}

function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

function describeRun(r: SippResult, scenario: string): string {
  const flow = r.messages
    .map((m) => `  ${m.direction === 'sent' ? '->' : '<-'} ${m.startLine}${m.status !== undefined && m.cseqMethod ? ` (${m.cseqMethod})` : ''}`)
    .join('\n');
  return [
    `sipp ${scenario.replace(SCENARIO_DIR, '')}: exit ${r.code ?? r.signal} (${r.meaning})${r.killed ? ', after a signal from the harness (timeout or kill())' : ''}`,
    `args: ${r.args.join(' ')}`,
    `messages:\n${flow || '  (none)'}`,
    r.errors.trim() ? `error log (tail):\n${tail(r.errors, 25)}` : '',
    r.stderr.trim() ? `stderr (tail):\n${tail(r.stderr, 10)}` : '',
    r.code !== 0 && !r.errors.trim() ? `stdout (tail):\n${tail(r.stdout, 15)}` : '',
  ]
    .filter(Boolean)
    .join('\n');
}

// ---------------------------------------------------------------------------------------------
// Message trace

/**
 * Parses SIPp's -trace_msg file: blocks separated by dashed lines, each "<T> message sent (n
 * bytes):" or "<T> message received [n] bytes :", a blank line, then the message. SIPp's
 * "Unexpected ... message received:" blocks repeat an already logged message and are skipped.
 */
export function parseMessageLog(text: string): SipMessage[] {
  const out: SipMessage[] = [];
  const blocks = text.split(/^-{20,}.*$/m);
  for (const block of blocks) {
    const m = /^\s*(UDP|TCP|TLS|SCTP|WS) message (sent|received)[^\n]*\n\n?/.exec(block);
    if (!m) continue;
    const raw = block.slice(m[0].length).replace(/\s+$/, '').replace(/\r\n/g, '\n');
    if (!raw) continue;
    out.push(parseSipMessage(raw, m[2] as 'sent' | 'received', m[1] as string));
  }
  return out;
}

export function parseSipMessage(raw: string, direction: 'sent' | 'received' = 'received', transport = 'UDP'): SipMessage {
  const text = raw.replace(/\r\n/g, '\n');
  const split = text.indexOf('\n\n');
  const head = split < 0 ? text : text.slice(0, split);
  const body = split < 0 ? '' : text.slice(split + 2);
  const lines = head.split('\n');
  const startLine = (lines.shift() ?? '').trim();
  const headers: Array<[string, string]> = [];
  for (const line of lines) {
    if (/^[ \t]/.test(line) && headers.length) {
      const last = headers[headers.length - 1] as [string, string];
      last[1] += ` ${line.trim()}`;
      continue;
    }
    const i = line.indexOf(':');
    if (i > 0) headers.push([line.slice(0, i).trim(), line.slice(i + 1).trim()]);
  }
  const header = (name: string) => headers.find(([n]) => n.toLowerCase() === name.toLowerCase())?.[1];
  const msg: SipMessage = {
    direction,
    transport,
    startLine,
    headers,
    body,
    raw,
    header,
    branch: () => /;\s*branch=([^;,\s]+)/i.exec(header('Via') ?? header('v') ?? '')?.[1],
  };
  const status = /^SIP\/2\.0\s+(\d{3})/.exec(startLine);
  if (status) {
    msg.status = Number(status[1]);
  } else {
    const req = /^([A-Z]+)\s+(\S+)\s+SIP\/2\.0$/.exec(startLine);
    if (req) {
      msg.method = req[1];
      msg.requestUri = req[2];
    }
  }
  msg.cseqMethod = /^\d+\s+(\S+)/.exec(header('CSeq') ?? '')?.[1];
  return msg;
}

// ---------------------------------------------------------------------------------------------
// Digest verification (independent of src/sip/digest/index.ts: an oracle must not share the code it
// checks)

export interface DigestCheck {
  ok: boolean;
  /** Why not, when ok is false. */
  reason?: string;
  username?: string;
  realm?: string;
  uri?: string;
  /** Whether the digest uri is exactly the message's Request-URI. */
  uriIsRequestUri?: boolean;
  algorithm?: string;
}

/** Parses `Digest a="b", c=d` parameters. */
export function parseDigestParams(value: string): Map<string, string> {
  const params = new Map<string, string>();
  const rest = value.replace(/^\s*Digest\s+/i, '');
  const re = /([A-Za-z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]+))/g;
  for (let m = re.exec(rest); m; m = re.exec(rest)) {
    params.set((m[1] as string).toLowerCase(), m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : (m[3] as string));
  }
  return params;
}

/**
 * Verifies the digest credentials of a request (RFC 2617 / RFC 8760: MD5, SHA-256, their -sess
 * forms; qop auth or none) against a password, from a traced message. Uses Proxy-Authorization
 * when present, else Authorization.
 */
export function verifyDigest(request: SipMessage, password: string, opts: { method?: string } = {}): DigestCheck {
  const value = request.header('Proxy-Authorization') ?? request.header('Authorization');
  if (!value) return { ok: false, reason: 'no Authorization or Proxy-Authorization header' };
  if (!/^\s*Digest\s/i.test(value)) return { ok: false, reason: `not a Digest credential: ${value}` };
  const p = parseDigestParams(value);
  const username = p.get('username');
  const realm = p.get('realm');
  const nonce = p.get('nonce');
  const uri = p.get('uri');
  const response = p.get('response');
  const algorithm = p.get('algorithm') ?? 'MD5';
  const base = { username, realm, uri, algorithm, uriIsRequestUri: uri !== undefined && uri === request.requestUri };
  if (username === undefined || realm === undefined || nonce === undefined || uri === undefined || !response) {
    return { ok: false, reason: `missing digest parameter in ${value}`, ...base };
  }
  const hashName = /^SHA-256/i.test(algorithm) ? 'sha256' : /^MD5/i.test(algorithm) ? 'md5' : undefined;
  if (!hashName) return { ok: false, reason: `unsupported algorithm ${algorithm}`, ...base };
  const H = (s: string) => createHash(hashName).update(s).digest('hex');
  const qop = p.get('qop');
  const nc = p.get('nc');
  const cnonce = p.get('cnonce');
  let ha1 = H(`${username}:${realm}:${password}`);
  if (/-sess$/i.test(algorithm)) ha1 = H(`${ha1}:${nonce}:${cnonce ?? ''}`);
  const method = opts.method ?? request.method ?? '';
  const ha2 = H(`${method}:${uri}`);
  if (qop && qop !== 'auth') return { ok: false, reason: `unsupported qop ${qop}`, ...base };
  const expected = qop ? H(`${ha1}:${nonce}:${nc ?? ''}:${cnonce ?? ''}:${qop}:${ha2}`) : H(`${ha1}:${nonce}:${ha2}`);
  if (expected !== response.toLowerCase()) return { ok: false, reason: 'response does not match the password', ...base };
  return { ok: true, ...base };
}

// ---------------------------------------------------------------------------------------------
// RTP probe: a media endpoint in the test process

export interface RtpProbe {
  readonly port: number;
  /** RTP packets received (RTCP not counted). */
  readonly received: number;
  readonly payloadTypes: ReadonlySet<number>;
  /** Packets echoed back to their sender (echo mode). */
  readonly echoed: number;
  /** Packets sent by send(). */
  readonly sent: number;
  /** Where the last RTP packet came from. */
  readonly lastSender: { address: string; port: number } | undefined;
  /** Sends `count` PCMU packets (20 ms, 160 bytes of a tone) paced at 20 ms. */
  send(to: { host?: string; port: number }, count: number, opts?: { payloadType?: number; intervalMs?: number }): Promise<void>;
  close(): Promise<void>;
}

/**
 * A UDP socket on 127.0.0.1 that counts the RTP it receives and, with `echo`, sends every packet
 * back to its sender (as SIPp's -rtp_echo does). Stands in for callbridge's media in the
 * self-checks, where a fake scenario advertises its port (-key rtp_port).
 */
export async function startRtpProbe(opts: { echo?: boolean } = {}): Promise<RtpProbe> {
  const sock = dgram.createSocket('udp4');
  const state = { received: 0, echoed: 0, sent: 0, lastSender: undefined as { address: string; port: number } | undefined };
  const pts = new Set<number>();
  sock.on('message', (msg, rinfo) => {
    if (msg.length < 12 || msg[0]! >> 6 !== 2) return;
    const pt = msg[1]! & 0x7f;
    if (pt >= 72 && pt <= 76) return; // RTCP SR/RR/SDES/BYE/APP (RFC 5761 section 4)
    state.received++;
    pts.add(pt);
    state.lastSender = { address: rinfo.address, port: rinfo.port };
    if (opts.echo) {
      sock.send(msg, rinfo.port, rinfo.address, (err) => {
        if (!err) state.echoed++;
      });
    }
  });
  await new Promise<void>((done, fail) => {
    sock.once('error', fail);
    sock.bind(0, LOOPBACK, () => done());
  });
  const port = sock.address().port;
  const tone = ulawTone(0.02, 1000);
  let closed = false;
  return {
    port,
    get received() {
      return state.received;
    },
    get payloadTypes() {
      return pts;
    },
    get echoed() {
      return state.echoed;
    },
    get sent() {
      return state.sent;
    },
    get lastSender() {
      return state.lastSender;
    },
    async send(to, count, o = {}) {
      const pt = o.payloadType ?? 0;
      const interval = o.intervalMs ?? 20;
      const ssrc = (Math.random() * 0xffffffff) >>> 0;
      for (let i = 0; i < count && !closed; i++) {
        const pkt = Buffer.alloc(12 + tone.length);
        pkt[0] = 0x80;
        pkt[1] = (i === 0 ? 0x80 : 0) | pt;
        pkt.writeUInt16BE(i & 0xffff, 2);
        pkt.writeUInt32BE((i * 160) >>> 0, 4);
        pkt.writeUInt32BE(ssrc, 8);
        tone.copy(pkt, 12);
        await new Promise<void>((done) => sock.send(pkt, to.port, to.host ?? LOOPBACK, () => done()));
        state.sent++;
        await new Promise((r) => setTimeout(r, interval));
      }
    },
    close() {
      if (closed) return Promise.resolve();
      closed = true;
      return new Promise<void>((done) => sock.close(() => done()));
    },
  };
}
