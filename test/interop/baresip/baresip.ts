/**
 * Runs baresip 1.0.0 (Debian package baresip) as a headless SIP phone for interop tests, from the
 * config and accounts templates beside this file. Loopback only; ports chosen at run time.
 *
 *   const r = await runBaresip({ dial: `sip:+15550001000@127.0.0.1:${sipPort}`,
 *     account: { user: 'trunk-user', password: 'secret', domain: `127.0.0.1:${sipPort}` } });
 *   expect(r.code, r.describe()).toBe(0);
 *   expect(r.established).toBe(true);
 *   readWavPcm16(r.received!)   // what baresip heard (decoded), 8 kHz mono
 *
 * The call lasts as long as the WAV baresip sends (aufile hangs up at its end); `maxSeconds`
 * (baresip -t) is the hard limit. See ../README.md, section "baresip".
 */
import { spawn, execFileSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import net from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freeMediaPort, freeSipPort } from '../sipp.ts';
import { peerMissing, requirePeer } from '../../helpers/peer-availability.ts';
import { wavHeader } from '../../../src/media/wav.ts';

const TEMPLATE_DIR = fileURLToPath(new URL('./', import.meta.url));

export interface BaresipAvailability {
  ok: boolean;
  /** Skip the tests: baresip is unusable here and CI is not set (in CI they fail instead). */
  skip: boolean;
  bin: string;
  version?: string;
  reason?: string;
}

let availability: BaresipAvailability | undefined;

/**
 * $BARESIP_BIN, else /usr/bin/baresip; ok when it runs and prints its version. When not, tests
 * skip on a developer's machine and fail in CI (CI set), which must install it (Debian baresip).
 */
export function baresipAvailable(): BaresipAvailability {
  if (availability) return availability;
  const bin = process.env.BARESIP_BIN ?? '/usr/bin/baresip';
  const moduleDir = process.env.BARESIP_MODULE_PATH ?? '/usr/lib/baresip/modules';
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    availability = { ...peerMissing(`baresip not found at ${bin} (apt-get install baresip, or set BARESIP_BIN)`), bin };
    return availability;
  }
  for (const mod of ['g711.so', 'aufile.so', 'sndfile.so', 'account.so', 'menu.so']) {
    if (!existsSync(join(moduleDir, mod))) {
      availability = { ...peerMissing(`baresip module ${mod} missing in ${moduleDir} (apt-get install baresip, or set BARESIP_MODULE_PATH)`), bin };
      return availability;
    }
  }
  let out: string;
  try {
    out = execFileSync(bin, ['-h'], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err: any) {
    // `baresip -h` exits non-zero after printing its usage.
    out = `${err?.stdout ?? ''}${err?.stderr ?? ''}`;
  }
  const version = /baresip v[0-9.]+/.exec(out)?.[0];
  availability = version
    ? { ok: true, skip: false, bin, version }
    : { ...peerMissing(`${bin} -h did not print a version (apt-get install baresip, or set BARESIP_BIN)`), bin };
  return availability;
}

export interface BaresipOptions {
  /** The URI to call at start (-e "/dial <uri>"); omit to only wait for calls (answermode=auto). */
  dial?: string;
  /** The account: From user, digest credentials, and its domain (host:port). */
  account: { user: string; password?: string; domain: string };
  /** WAV baresip sends (mono 8 kHz PCM16 is best; a Buffer is written to a file). Default: 2 s of
   * 440 Hz. The call is hung up when it ends. */
  audio?: string | Buffer;
  /** baresip -t: quit (hanging up) after this many seconds. Default 15. */
  maxSeconds?: number;
  sipPort?: number;
  /** Even base of 4 RTP ports; default a free one. */
  rtpPort?: number;
  /** Also enable ctrl_tcp (netstring JSON commands) on a free port; see ctrlPort in the result. */
  ctrlTcp?: boolean;
  /** Extra -e commands after the dial. */
  commands?: string[];
  /** Kill (by PID) after this long. Default (maxSeconds + 5) s. */
  timeoutMs?: number;
  /** Stop baresip (SIGTERM, by PID) shortly after its call ends instead of waiting for -t.
   * Default true when dialling. */
  quitAfterCall?: boolean;
  /** REGISTER with the account's domain every this many seconds (the account's regint; default
   * 0: never). baresip unregisters (Expires 0) when it quits. */
  registerSecs?: number;
  /**
   * SIP over TLS: baresip's own certificate and key in one PEM file (sip_certificate; it then
   * also listens for TLS on sipPort + 1) and the CA file it trusts (sip_cafile).
   */
  tls?: { certificateFile: string; caFile: string };
  /** The account's media encryption (mediaenc=...), e.g. 'srtp-mand' (loads srtp.so). */
  mediaenc?: string;
}

export interface BaresipResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  killed: boolean;
  stdout: string;
  stderr: string;
  /** "Call established" was printed. */
  established: boolean;
  /** The "terminated" line, e.g. "Call with sip:... terminated (duration: 3 secs)". */
  terminated?: string;
  /** The SIP failure baresip reported, e.g. "403 Forbidden", when the call failed. */
  failure?: string;
  /** sndfile's recordings: what baresip sent (enc) and received (dec), as WAV files. */
  sent?: Buffer;
  received?: Buffer;
  sipPort: number;
  rtpPort: number;
  ctrlPort?: number;
  durationMs: number;
  describe(): string;
}

/** A mono 8 kHz PCM16 WAV of a sine tone. */
export function toneWav(seconds = 2, hz = 440, amplitude = 8000): Buffer {
  const n = Math.round(seconds * 8000);
  const wav = Buffer.alloc(44 + n * 2);
  wavHeader(8000, 1, n * 2).copy(wav);
  for (let i = 0; i < n; i++) wav.writeInt16LE(Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / 8000)), 44 + i * 2);
  return wav;
}

/** PCM16 samples and rate of a WAV (as sndfile writes them). @throws Error if not PCM16. */
export function readWavPcm16(wav: Buffer): { rate: number; channels: number; samples: Int16Array } {
  if (wav.toString('latin1', 0, 4) !== 'RIFF' || wav.toString('latin1', 8, 12) !== 'WAVE') throw new Error('not a WAV');
  let off = 12;
  let rate = 0;
  let channels = 0;
  let bits = 0;
  while (off + 8 <= wav.length) {
    const id = wav.toString('latin1', off, off + 4);
    // sndfile leaves the data size 0 or short while the file is open: read to the end then.
    let size = wav.readUInt32LE(off + 4);
    if (id === 'fmt ') {
      channels = wav.readUInt16LE(off + 10);
      rate = wav.readUInt32LE(off + 12);
      bits = wav.readUInt16LE(off + 22);
    } else if (id === 'data') {
      if (bits !== 16) throw new Error(`WAV with ${bits}-bit samples, expected 16`);
      if (size === 0 || off + 8 + size > wav.length) size = wav.length - off - 8;
      const data = wav.subarray(off + 8, off + 8 + (size & ~1));
      const samples = new Int16Array(data.length / 2);
      for (let i = 0; i < samples.length; i++) samples[i] = data.readInt16LE(i * 2);
      return { rate, channels, samples };
    }
    off += 8 + size + (size & 1);
  }
  throw new Error('WAV without a data chunk');
}

/** Root mean square of samples, in dBFS (-Infinity for silence). */
export function rmsDbfs(samples: Int16Array): number {
  if (!samples.length) return -Infinity;
  let sum = 0;
  for (const s of samples) sum += s * s;
  return 20 * Math.log10(Math.sqrt(sum / samples.length) / 32768);
}

function fill(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{\{([A-Z_]+)\}\}/g, (m, name: string) => (name in values ? String(values[name]) : m));
}

export interface BaresipProcess {
  pid: number | undefined;
  sipPort: number;
  rtpPort: number;
  /** Set with ctrlTcp. */
  ctrlPort?: number;
  /** Resolves when baresip prints "baresip is ready." (rejects if it exits first). */
  ready: Promise<void>;
  /**
   * Sends a ctrl_tcp command (netstring JSON, e.g. command('hangup'), command('dial', uri)) and
   * resolves with its response. Needs ctrlTcp.
   */
  command(name: string, params?: string): Promise<{ ok: boolean; data: string }>;
  /** ctrl_tcp events received so far (CALL_RINGING, CALL_ESTABLISHED, CALL_CLOSED, ...). */
  events: Array<{ type: string; param?: string; [k: string]: unknown }>;
  result: Promise<BaresipResult>;
  /** SIGTERM (baresip hangs up and exits 0), SIGKILL 2 s later; this process only, by PID. */
  kill(): void;
}

/** Runs baresip until it exits (after its call when dialling, else after maxSeconds). */
export async function runBaresip(opts: BaresipOptions): Promise<BaresipResult> {
  return (await startBaresip(opts)).result;
}

export async function startBaresip(opts: BaresipOptions): Promise<BaresipProcess> {
  const avail = baresipAvailable();
  requirePeer(avail);
  // baresip listens on UDP+TCP sipPort and TLS on sipPort+1.
  let sipPort = opts.sipPort;
  while (sipPort === undefined) {
    const p = await freeSipPort();
    if (await freeTcp(p + 1)) sipPort = p;
  }
  const rtpPort = opts.rtpPort ?? (await freeMediaPort());
  const ctrlPort = opts.ctrlTcp ? await freeSipPort() : undefined;
  const maxSeconds = opts.maxSeconds ?? 15;
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-baresip-'));
  const recDir = join(dir, 'rec');
  mkdirSync(recDir);
  const audioFile = typeof opts.audio === 'string' ? opts.audio : join(dir, 'send.wav');
  if (typeof opts.audio !== 'string') writeFileSync(audioFile, opts.audio ?? toneWav());

  let config = fill(readFileSync(join(TEMPLATE_DIR, 'config'), 'utf8'), {
    SIP_PORT: sipPort,
    RTP_MIN: rtpPort,
    RTP_MAX: rtpPort + 3,
    AUDIO_FILE: audioFile,
    REC_DIR: recDir,
    MODULE_PATH: process.env.BARESIP_MODULE_PATH ?? '/usr/lib/baresip/modules',
    CTRL_PORT: ctrlPort ?? 0,
  });
  if (opts.ctrlTcp) config = config.replace(/^#(module_app\s+ctrl_tcp\.so|ctrl_tcp_listen.*)$/gm, '$1');
  if (opts.tls) config += `\nsip_certificate\t\t${opts.tls.certificateFile}\nsip_cafile\t\t${opts.tls.caFile}\n`;
  // Before account.so reads the accounts: an account's mediaenc must name a loaded module.
  if (opts.mediaenc) config = config.replace(/^(module\s+g711\.so)$/m, '$1\nmodule\t\t\tsrtp.so');
  writeFileSync(join(dir, 'config'), config);
  const accounts = fill(readFileSync(join(TEMPLATE_DIR, 'accounts'), 'utf8'), {
    USER: opts.account.user,
    PASSWORD: opts.account.password ?? '',
    DOMAIN: opts.account.domain,
  });
  let registering = opts.registerSecs === undefined ? accounts : accounts.replace(/;regint=0;/, `;regint=${opts.registerSecs};`);
  if (opts.mediaenc) registering = registering.replace(/;regint=/, `;mediaenc=${opts.mediaenc};regint=`);
  writeFileSync(join(dir, 'accounts'), opts.account.password === undefined ? registering.replace(/;auth_pass=[^;\n]*/, '') : registering);

  const args = ['-f', dir, '-t', String(maxSeconds)];
  if (opts.dial) args.push('-e', `/dial ${opts.dial}`);
  for (const c of opts.commands ?? []) args.push('-e', c);

  const started = Date.now();
  const child = spawn(avail.bin, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let killed = false;
  let exited = false;
  let quitting = false;
  const quitAfterCall = opts.quitAfterCall ?? opts.dial !== undefined;
  let onReady: (() => void) | undefined;
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    if (onReady && stdout.includes('baresip is ready.')) onReady();
    // The call is over (BYE sent or a final failure): give the last transaction a moment, then
    // stop baresip the way Ctrl-C would (it hangs up what is left and exits 0).
    if (quitAfterCall && !quitting && /terminated \(duration|session closed:/.test(stdout)) {
      quitting = true;
      setTimeout(() => {
        if (!exited) child.kill('SIGTERM');
      }, 500).unref();
    }
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  const kill = (sig: NodeJS.Signals = 'SIGTERM') => {
    if (exited) return;
    child.kill(sig);
    setTimeout(() => {
      if (!exited) child.kill('SIGKILL');
    }, 2000).unref();
  };
  const watchdog = setTimeout(() => {
    killed = true;
    kill();
  }, opts.timeoutMs ?? (maxSeconds + 5) * 1000);
  watchdog.unref();
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => {
    child.once('error', (err) => {
      stderr += `\nspawn error: ${err.message}`;
      exited = true;
      done({ code: null, signal: null });
    });
    child.once('close', (c, sig) => {
      exited = true;
      done({ code: c, signal: sig });
    });
  });

  // ctrl_tcp: netstring-framed JSON ("<len>:<json>,") both ways.
  const events: BaresipProcess['events'] = [];
  const waiting = new Map<string, (r: { ok: boolean; data: string }) => void>();
  let ctrl: Promise<net.Socket> | undefined;
  let seq = 0;
  const connectCtrl = () =>
    (ctrl ??= new Promise<net.Socket>((done, fail) => {
      if (ctrlPort === undefined) return fail(new Error('ctrl_tcp is not enabled (ctrlTcp: true)'));
      const sock = net.connect(ctrlPort, '127.0.0.1');
      let buf = '';
      sock.setEncoding('utf8');
      sock.on('data', (d: string) => {
        buf += d;
        for (let m = /^(\d+):/.exec(buf); m; m = /^(\d+):/.exec(buf)) {
          const len = Number(m[1]);
          const startAt = m[0].length;
          if (buf.length < startAt + len + 1) break;
          const msg = JSON.parse(buf.slice(startAt, startAt + len));
          buf = buf.slice(startAt + len + 1);
          if (msg.event) events.push(msg);
          else if (msg.response && typeof msg.token === 'string') waiting.get(msg.token)?.({ ok: !!msg.ok, data: String(msg.data ?? '') });
        }
      });
      sock.once('connect', () => done(sock));
      sock.once('error', fail);
    }));

  const ready = new Promise<void>((done, fail) => {
    onReady = () => {
      onReady = undefined;
      done();
    };
    if (stdout.includes('baresip is ready.')) onReady();
    void exit.then(() => fail(new Error(`baresip exited before it was ready:\n${stdout}${stderr}`)));
  });
  ready.catch(() => {});

  const result = exit.then(({ code, signal }): BaresipResult => {
    clearTimeout(watchdog);
    void ctrl?.then((s) => s.destroy(), () => {});
    const recs = existsSync(recDir) ? readdirSync(recDir) : [];
    const rec = (suffix: string) => {
      const f = recs.find((n) => n.endsWith(suffix));
      return f ? readFileSync(join(recDir, f)) : undefined;
    };
    const sent = rec('-enc.wav');
    const received = rec('-dec.wav');
    if (process.env.BARESIP_KEEP_LOGS !== '1') rmSync(dir, { recursive: true, force: true });
    // -e input is echoed character by character ("//d/di/dia..."); colours are ANSI escapes.
    const clean = stdout.replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g'), '');
    const res: BaresipResult = {
      code,
      signal,
      killed,
      stdout: clean,
      stderr,
      established: /Call established/.test(clean),
      terminated: /Call with .* terminated.*$/m.exec(clean)?.[0],
      failure: /session closed: (\d{3} [^\n]*)/.exec(clean)?.[1],
      sent,
      received,
      sipPort: sipPort as number,
      rtpPort,
      ctrlPort,
      durationMs: Date.now() - started,
      describe: () =>
        [
          `baresip ${args.join(' ')}: exit ${code ?? signal}${killed ? ' (killed by the harness after its timeout)' : ''}`,
          clean
            .split('\n')
            .filter((l) => !l.startsWith('/'))
            .slice(-30)
            .join('\n'),
          stderr.replace(/\[[0-9:]+\] audio=\S+ \(bit\/s\)\s*/g, '').trim(),
        ]
          .filter(Boolean)
          .join('\n'),
    };
    return res;
  });

  return {
    pid: child.pid,
    sipPort,
    rtpPort,
    ctrlPort,
    ready,
    events,
    result,
    kill: () => kill(),
    async command(name, params) {
      const sock = await connectCtrl();
      const token = `t${++seq}`;
      const json = JSON.stringify(params === undefined ? { command: name, token } : { command: name, params, token });
      return new Promise((done) => {
        waiting.set(token, done);
        sock.write(`${Buffer.byteLength(json)}:${json},`);
      });
    },
  };
}

function freeTcp(port: number): Promise<boolean> {
  return new Promise((done) => {
    const srv = net.createServer();
    srv.once('error', () => done(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => done(true)));
  });
}
