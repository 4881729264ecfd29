/**
 * A real daemon (as test/helpers/daemon.ts starts it: HTTP and SIP on 127.0.0.1, OS-chosen ports,
 * a fresh data directory) whose pino output the test reads: every line at `level` and above,
 * parsed, in `lines`. For tests that assert what is logged, and how often.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import { INITIAL_KEY_FILE, startDaemon, type Daemon } from '../../src/main.ts';

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

export async function startLoggedDaemon(overrides: Record<string, unknown> = {}, o: { dataDir?: string; level?: string } = {}): Promise<LoggedDaemon> {
  const dir = o.dataDir ?? mkdtempSync(join(tmpdir(), 'callbridge-logged-'));
  const { sip, drain, rtp, ...rest } = overrides as { sip?: Record<string, unknown>; drain?: Record<string, unknown>; rtp?: Record<string, unknown> };
  const level = o.level ?? 'info';
  const config = loadConfig(
    {
      data_dir: dir,
      http: { host: '127.0.0.1', port: 0 },
      sip: { host: '127.0.0.1', port: 0, ...sip },
      rtp: { address: '127.0.0.1', media_threads: 0, ...rtp },
      drain: { deadline_secs: 1, ...drain },
      log_level: level,
      ...rest,
    },
    {},
  );
  const lines: LogLine[] = [];
  const logger = createLogger(level, { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) });
  const daemon = await startDaemon(config, logger, () => {});
  const key = readFileSync(join(dir, INITIAL_KEY_FILE), 'utf8').trim();
  return {
    daemon,
    url: daemon.url,
    dataDir: dir,
    key,
    lines,
    sipPort: daemon.sip?.port ?? 0,
    async api(method, path, body, k = key) {
      const headers: Record<string, string> = { authorization: `Bearer ${k}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      const res = await fetch(daemon.url + path, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
      const text = await res.text();
      return { status: res.status, body: text && (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : undefined, text };
    },
    metrics: () => fetch(`${daemon.url}/metrics`).then((r) => r.text()),
    stop: () => daemon.close(),
    async close() {
      await daemon.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
