/**
 * A real daemon (test/helpers/daemon.ts's, media on the main thread) whose pino output the test
 * reads: every line at info and above, parsed, in `lines`. For tests that assert what is logged, and how often.
 */
import type { Daemon } from '../../src/main.ts';
import { startTestDaemon } from './daemon.ts';

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface LoggedDaemon {
  daemon: Daemon;
  url: string;
  dataDir: string;
  key: string;
  /** Every log line so far, parsed. */
  lines: LogLine[];
  /** The SIP port (UDP and TCP). */
  sipPort: number;
  api<T = any>(method: string, path: string, body?: unknown, key?: string): Promise<{ status: number; body: T; text: string }>;
  /** The /metrics text. */
  metrics(): Promise<string>;
  /** Stops the daemon, keeping the data directory. */
  stop(): Promise<void>;
  /** Stops and deletes the data directory. */
  close(): Promise<void>;
}

export const WARN = 40;

export async function startLoggedDaemon(overrides: Record<string, unknown> = {}, o: { dataDir?: string } = {}): Promise<LoggedDaemon> {
  const lines: LogLine[] = [];
  const { rtp, ...rest } = overrides as { rtp?: Record<string, unknown> };
  const td = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 0, ...rtp }, ...rest }, o.dataDir, {}, {
    push: (line: string) => lines.push(JSON.parse(line) as LogLine),
  });
  return {
    daemon: td.daemon,
    url: td.url,
    dataDir: td.dataDir,
    key: td.key,
    lines,
    sipPort: td.daemon.sip?.port ?? 0,
    api: (method, path, body, key) => td.api(method, path, body, key === undefined ? {} : { key }),
    metrics: () => fetch(`${td.url}/metrics`).then((r) => r.text()),
    stop: () => td.stop(),
    close: () => td.close(),
  };
}
