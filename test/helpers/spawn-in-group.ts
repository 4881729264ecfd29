/**
 * A peer program (Kamailio, HAProxy, ...) started by a test in a process group of its own, so
 * that a signal reaches it and every process it forked, and nothing else: signals go to the
 * group of this child's PID only, never by name.
 *
 *   const p = spawnInGroup('/usr/sbin/haproxy', ['-db', '-f', cfg], { stdout: true });
 *   p.output()                 // what it wrote so far (stdout and/or stderr, as asked)
 *   await p.stop(3000);        // SIGTERM to the group, SIGKILL after 3 s; then SIGKILL to stragglers
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface GroupProcess {
  readonly child: ChildProcess;
  readonly pid: number | undefined;
  running(): boolean;
  /** Resolves when the group's leader has exited. */
  readonly exited: Promise<void>;
  /** The signal to the whole group; a group that is gone already is not an error. */
  signal(signal: NodeJS.Signals): void;
  /** What the program wrote to the captured streams so far. */
  output(): string;
  /** SIGTERM to the group, SIGKILL after `graceMs` if the leader is still there; then SIGKILL to what outlived it. */
  stop(graceMs: number): Promise<void>;
}

export interface SpawnInGroupOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Capture stdout (default: ignored). */
  stdout?: boolean;
  /** Capture stderr (default: captured). */
  stderr?: boolean;
}

export function spawnInGroup(bin: string, args: readonly string[], o: SpawnInGroupOptions = {}): GroupProcess {
  const captureErr = o.stderr ?? true;
  const child = spawn(bin, args, {
    cwd: o.cwd,
    env: o.env,
    stdio: ['ignore', o.stdout ? 'pipe' : 'ignore', captureErr ? 'pipe' : 'ignore'],
    detached: true,
  });
  let out = '';
  const keep = (b: Buffer) => {
    out += b.toString('utf8');
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let running = child.pid !== undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.once('error', () => resolve());
  });
  void exited.then(() => {
    running = false;
  });
  const signal = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      // the group is gone already (ESRCH)
    }
  };
  return {
    child,
    pid: child.pid,
    running: () => running,
    exited,
    signal,
    output: () => out,
    async stop(graceMs) {
      if (running) {
        signal('SIGTERM');
        const timer = setTimeout(() => signal('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      // Processes that outlived the leader (it was killed, or it exited before them).
      signal('SIGKILL');
    },
  };
}
