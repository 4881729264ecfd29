/**
 * Child processes of a benchmark (servers it measures or talks to) and their CPU time.
 *
 * - startChild: `node <args>` in the project root, output kept (last 8 kB, API keys redacted)
 *   for the error message when the child fails; `waitForLine` finds a `LISTENING ...` line in
 *   what it printed so far or prints next. BENCH_CHILD_LOG_DIR=<dir>: all of each child's output
 *   also goes to <dir>/<name>.log (e.g. with --trace-gc in BENCH_BRIDGE_NODE_ARGS).
 * - stopChild: SIGTERM by PID, SIGKILL 5 s later. Idempotent. Never by name.
 * - cpuSeconds / threadCpuSeconds: user + system CPU seconds from /proc (Linux; NaN elsewhere).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface Child {
  name: string;
  proc: ChildProcess;
  /** Last output of the child, for the error message when it fails. API keys are redacted. */
  output(): string;
  exited: Promise<number | null>;
}

/** `env` is laid over this process's environment; an `undefined` value removes that variable. */
export function startChild(name: string, args: string[], env: Record<string, string | undefined>): Child {
  const proc = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let tail = '';
  const logDir = process.env.BENCH_CHILD_LOG_DIR;
  const file = logDir ? createWriteStream(join(logDir, `${name.replace(/[^\w-]+/g, '_')}.log`)) : undefined;
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-8000);
    file?.write(redact(chunk.toString('utf8')));
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  proc.once('error', (err) => keep(Buffer.from(`\nspawn failed: ${err.message}\n`)));
  return { name, proc, exited, output: () => redact(tail) };
}

/**
 * Every thread of process `pid` under SCHED_RR at `priority` (util-linux chrt --all-tasks); the
 * threads it starts later inherit it.
 * @throws Error when chrt is missing or the kernel refuses (no privilege).
 */
export function roundRobinProcess(pid: number, priority: number): void {
  execFileSync('chrt', ['--all-tasks', '--rr', '--pid', String(priority), String(pid)], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 5000 });
}

const redact = (text: string): string => text.replace(/cbk_[A-Za-z0-9_-]+/g, 'cbk_<redacted>');

/** Whether the child is still running. */
export function running(child: Child): boolean {
  return child.proc.exitCode === null && child.proc.signalCode === null;
}

/** SIGTERM by PID, SIGKILL after 5 s. Idempotent. */
export async function stopChild(child: Child): Promise<void> {
  const { proc } = child;
  if (!running(child) || proc.pid === undefined) return;
  process.kill(proc.pid, 'SIGTERM');
  const timer = setTimeout(() => {
    if (running(child) && proc.pid !== undefined) process.kill(proc.pid, 'SIGKILL');
  }, 5000);
  await child.exited;
  clearTimeout(timer);
}

/** Resolves with the first capture group of `pattern` in the child's stdout, e.g. /LISTENING (\S+)/. */
/** Polls `check` every 100 ms until it holds; throws when the child exits first or time runs out. */
export async function waitUntil(child: Child, what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.proc.exitCode !== null || child.proc.signalCode !== null) {
      throw new Error(`${child.name} exited (${child.proc.exitCode ?? child.proc.signalCode}) before ${what}:\n${child.output()}`);
    }
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${child.name}: no ${what} within ${timeoutMs} ms:\n${child.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function waitForLine(child: Child, pattern: RegExp, timeoutMs: number): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    // Output the child printed before this call counts too.
    let seen = child.output();
    const onData = (chunk: Buffer) => {
      seen += chunk.toString('utf8');
      const m = pattern.exec(seen);
      if (m) {
        done();
        resolve(m[1] ?? m[0]);
      }
    };
    const onExit = () => {
      done();
      reject(new Error(`${child.name} exited (${child.proc.exitCode ?? child.proc.signalCode}) before printing ${pattern}:\n${child.output()}`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`${child.name}: no ${pattern} within ${timeoutMs} ms:\n${child.output()}`));
    }, timeoutMs);
    const done = () => {
      clearTimeout(timer);
      child.proc.stdout?.off('data', onData);
      child.proc.off('exit', onExit);
    };
    child.proc.stdout?.on('data', onData);
    child.proc.once('exit', onExit);
    onData(Buffer.alloc(0));
  });
}

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ, 100 on Linux). */
export const USER_HZ = 100;

function statCpu(path: string): number {
  const { user, sys } = statCpuSplit(path);
  return user + sys;
}

/** User and kernel CPU seconds of a /proc/<pid>[/task/<tid>]/stat; NaN when unreadable. */
export function statCpuSplit(path: string): { user: number; sys: number; minorFaults: number } {
  try {
    const stat = readFileSync(path, 'utf8');
    // Fields after the parenthesised command name, which may contain spaces: minflt is field 10,
    // utime 14, stime 15 (indices 7, 11 and 12 after the name).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { user: Number(fields[11]) / USER_HZ, sys: Number(fields[12]) / USER_HZ, minorFaults: Number(fields[7]) };
  } catch {
    return { user: Number.NaN, sys: Number.NaN, minorFaults: Number.NaN };
  }
}

/** User + system CPU seconds a process (all its threads) has used so far; NaN without /proc. */
export function cpuSeconds(pid: number | undefined): number {
  return pid === undefined ? Number.NaN : statCpu(`/proc/${pid}/stat`);
}

/** The same for a process's main thread only (for Node: the event loop); NaN without /proc. */
export function mainThreadCpuSeconds(pid: number | undefined): number {
  return pid === undefined ? Number.NaN : statCpu(`/proc/${pid}/task/${pid}/stat`);
}

/** Event-loop delay, ms. */
export interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
  /** bench/session-server.ts only: each TTS request's wait for its first audio, ms. */
  ttsFirst?: { n: number; p50: number; p99: number; max: number };
}

/** A voice daemon's event-loop delay since the last call (bench/session-server.ts, SIGUSR2). */
export function daemonLoopDelay(child: Child, timeoutMs = 5000): Promise<LoopDelay> {
  return new Promise<LoopDelay>((resolve, reject) => {
    let seen = '';
    const onData = (chunk: Buffer) => {
      seen += chunk.toString('utf8');
      const m = /LOOPDELAY (\{[^\n]*\})/.exec(seen);
      if (m) {
        clearTimeout(timer);
        child.proc.stdout?.off('data', onData);
        resolve(JSON.parse(m[1] as string) as LoopDelay);
      }
    };
    const timer = setTimeout(() => {
      child.proc.stdout?.off('data', onData);
      reject(new Error(`daemon: no LOOPDELAY line within ${timeoutMs} ms`));
    }, timeoutMs);
    child.proc.stdout?.on('data', onData);
    if (child.proc.pid !== undefined) process.kill(child.proc.pid, 'SIGUSR2');
  });
}
