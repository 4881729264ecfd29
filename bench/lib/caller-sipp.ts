/**
 * SIPp placing the call benchmarks' calls with RTP (bench/bridge, bench/cluster): a UAC from
 * bench/lib/sipp-uac-scenario.ts, one call every periodMs, each held holdMs, the callers from a
 * -inf CSV. Either this process is the phone of the calls (media 'bench': the offer names the
 * bench's RTP port from the CSV's second field) or SIPp plays a PCMU payload looped on its own
 * RTP socket. When a call's 200 OK arrives the scenario logs "sdp-answer <offered port>
 * <ip>:<port>" (-trace_logs), which answers() reads. traceMessages adds SIPp's message trace
 * (-trace_shortmsg, microsecond timestamps) for INVITE->200 times (bench/lib/sipp-trace.ts).
 * 127.0.0.1 only; stopped by PID.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exitMeaning, freeMediaPort, freeSipPort, freeUdpPort } from '../../test/interop/sipp.ts';
import { roundRobinProcess } from './child.ts';
import { uacScenario } from './sipp-uac-scenario.ts';

function bridgeScenario(media: 'bench' | 'sipp'): string {
  // bench: the SDP offers this process's socket for the call (field1); sipp: SIPp's own RTP
  // socket for the call, and SIPp plays the caller's audio (caller.ulaw, looped) once answered.
  const mediaLine = media === 'bench' ? 'm=audio [field1] RTP/AVP 0 101' : 'm=audio [rtpstream_audio_port] RTP/AVP 0 101';
  const play = media === 'bench' ? '' : '  <nop><action><exec rtp_stream="caller.ulaw,-1,0"/></action></nop>\n';
  return uacScenario({
    name: 'callbridge bench bridge UAC',
    sdpSessionId: 3001,
    mediaLine,
    onAnswer: `    <action>
      <ereg regexp="c=IN IP4 ([0-9.]+)" search_in="body" check_it="true" assign_to="_,answer_ip"/>
      <ereg regexp="m=audio ([0-9]+) " search_in="body" check_it="true" assign_to="_,answer_port"/>
      <log message="sdp-answer [field1] [$answer_ip]:[$answer_port]"/>
    </action>`,
    duringCall: `${play}  <pause/>`,
  });
}

export interface CallerSippOptions {
  bin: string;
  /** SCHED_RR priority for all its threads (0: the normal policy). */
  realtime: number;
  remote: string;
  number: string;
  /** 'bench': this process is the phone (csv's rtpPort); else the PCMU payload SIPp plays, looped. */
  media: 'bench' | Buffer;
  /** One line per call: "caller;rtpPort". */
  csv: string[];
  calls: number;
  /** One call placed every periodMs. */
  periodMs: number;
  holdMs: number;
  timeoutMs: number;
  /** Also write SIPp's message trace (-trace_shortmsg), read by messages(). */
  traceMessages?: boolean;
}

export interface CallerSipp {
  /** The answers logged so far: the offered (bench) port and callbridge's address for it. */
  answers(): Array<{ mediaPort: number; address: string; port: number }>;
  running(): boolean;
  pid(): number | undefined;
  /** Waits for SIPp to exit; failed calls from its final screen. */
  done(): Promise<{ code: number | null; failed: number }>;
  /** SIGTERM (SIGKILL 2 s later) by PID, if still running; removes the working directory. */
  stop(): Promise<void>;
  describe(): string;
  /** SIPp's message trace so far (traceMessages), else ''. */
  messages(): string;
}

export function spawnCallerSipp(o: CallerSippOptions): CallerSipp {
  const workDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-bridge-sipp-'));
  writeFileSync(join(workDir, 'bridge-uac.xml'), bridgeScenario(o.media === 'bench' ? 'bench' : 'sipp'));
  if (o.media !== 'bench') writeFileSync(join(workDir, 'caller.ulaw'), o.media);
  writeFileSync(join(workDir, 'calls.csv'), `SEQUENTIAL\n${o.csv.join('\n')}\n`);
  let proc: ReturnType<typeof spawn> | undefined;
  let out = '';
  let code: number | null | undefined;
  let exitedResolve: (c: number | null) => void = () => {};
  const exited = new Promise<number | null>((r) => (exitedResolve = r));
  const start = async () => {
    const args = [
      o.remote, '-sf', 'bridge-uac.xml', '-inf', 'calls.csv', '-s', o.number,
      '-t', 'u1', '-i', '127.0.0.1', '-p', String(await freeSipPort()), '-bind_local',
      '-ci', '127.0.0.1', '-cp', String(await freeUdpPort()),
      // SIPp's RTP sockets (rtp_stream) from -mp: below the ephemeral range and the bridge's ports.
      '-mi', '127.0.0.1', '-mp', String(o.media === 'bench' ? await freeMediaPort() : 20000 + 2 * Math.floor(Math.random() * 2000)),
      '-m', String(o.calls), '-l', String(o.calls), '-r', '1', '-rp', String(Math.max(1, Math.round(o.periodMs))), '-d', String(o.holdMs),
      '-nostdin', '-recv_timeout', '20000', '-timeout', `${Math.ceil(o.timeoutMs / 1000)}s`, '-timeout_error',
      '-trace_logs', '-log_file', 'actions.log', '-trace_err', '-error_file', 'errors.log',
      ...(o.traceMessages ? ['-trace_shortmsg'] : []),
    ];
    proc = spawn(o.bin, args, { cwd: workDir, stdio: ['ignore', 'pipe', 'pipe'] });
    if (o.realtime > 0 && proc.pid !== undefined) roundRobinProcess(proc.pid, o.realtime);
    proc.stdout?.setEncoding('utf8').on('data', (d: string) => (out = (out + d).slice(-20_000)));
    proc.stderr?.setEncoding('utf8').on('data', (d: string) => (out = (out + d).slice(-20_000)));
    proc.once('close', (c) => {
      code = c;
      exitedResolve(c);
    });
    proc.once('error', (e) => {
      out += `\nspawn failed: ${e.message}`;
      code = null;
      exitedResolve(null);
    });
  };
  const starting = start();
  let seen = 0;
  const parsed: Array<{ mediaPort: number; address: string; port: number }> = [];
  const read = (name: string) => (existsSync(join(workDir, name)) ? readFileSync(join(workDir, name), 'latin1') : '');
  return {
    answers() {
      const text = read('actions.log');
      if (text.length > seen) {
        const re = /sdp-answer (\d+) ([0-9.]+):(\d+)/g;
        re.lastIndex = 0;
        const chunk = text.slice(seen, text.lastIndexOf('\n') + 1);
        for (let m = re.exec(chunk); m; m = re.exec(chunk)) parsed.push({ mediaPort: Number(m[1]), address: m[2]!, port: Number(m[3]) });
        seen += chunk.length;
      }
      return parsed;
    },
    running: () => code === undefined,
    pid: () => proc?.pid,
    async done() {
      await starting;
      const c = await exited;
      const all = [...out.matchAll(/^\s*Failed call\s*\|[^|]*\|\s*(\d+)/gm)];
      return { code: c, failed: all.length ? Number(all[all.length - 1]![1]) : c === 0 ? 0 : o.calls };
    },
    async stop() {
      await starting;
      if (code === undefined && proc?.pid !== undefined) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => {
          if (code === undefined) proc?.kill('SIGKILL');
        }, 2000);
        await exited;
        clearTimeout(t);
      }
      if (process.env.BENCH_BRIDGE_KEEP_LOGS !== '1') rmSync(workDir, { recursive: true, force: true });
    },
    // SIPp names the trace after the scenario: bridge-uac_<pid>_shortmessages.log.
    messages: () => (o.traceMessages ? readShortMessages(workDir) : ''),
    describe() {
      return `SIPp ${code === undefined ? 'running' : exitMeaning(code ?? null)} in ${workDir}\n${read('errors.log').slice(-3000)}\n${out.slice(-3000)}`;
    },
  };
}

function readShortMessages(dir: string): string {
  const name = existsSync(dir) ? readdirSync(dir).find((f) => f.endsWith('_shortmessages.log')) : undefined;
  return name ? readFileSync(join(dir, name), 'latin1') : '';
}
