/**
 * Starts a real daemon for a test: HTTP on 127.0.0.1 with an OS-chosen port, SQLite in a fresh
 * temporary data directory, or the PostgreSQL database of `overrides.store.url` (with
 * security.encryption_key and token_secret set). `api()` sends JSON requests with the daemon's
 * initial API key.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import { startDaemon, INITIAL_KEY_FILE, type Daemon, type DaemonOptions } from '../../src/main.ts';

export interface ApiResponse<T = any> {
  status: number;
  body: T;
  text: string;
  headers: Headers;
}

export interface TestDaemon {
  daemon: Daemon;
  url: string;
  dataDir: string;
  /** The initial API key of the daemon's first organization ('' when the store had a key already: another node's). */
  key: string;
  api<T = any>(method: string, path: string, body?: unknown, opts?: { key?: string | null; headers?: Record<string, string>; rawBody?: string }): Promise<ApiResponse<T>>;
  /** A second organization with its own key (for isolation tests). */
  newOrgKey(name: string): Promise<string>;
  /** Stops the daemon, keeping the data directory (for restart tests). */
  stop(): Promise<void>;
  /** Starts a new daemon on the same data directory. */
  restart(): Promise<TestDaemon>;
  /** Stops and deletes the data directory. */
  close(): Promise<void>;
}

/** `options` injects what startDaemon takes besides config (a voice runtime factory, tuning). */
/** `logLines`, when given, receives every log line (JSON) at info level and above, for tests that read them. */
export async function startTestDaemon(overrides: Record<string, unknown> = {}, dataDir?: string, options: DaemonOptions = {}, logLines?: Pick<string[], 'push'>): Promise<TestDaemon> {
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'callbridge-test-'));
  const { sip, drain, cluster, ...rest } = overrides as { sip?: Record<string, unknown>; drain?: Record<string, unknown>; cluster?: Record<string, unknown>; rtp?: Record<string, unknown> };
  // CALLBRIDGE_TEST_MEDIA_THREADS=N runs every test daemon's media on N worker threads (unless the test sets it).
  const threads = process.env.CALLBRIDGE_TEST_MEDIA_THREADS;
  if (threads !== undefined && threads !== '') rest.rtp = { media_threads: Number(threads), ...rest.rtp };
  const config = loadConfig(
    {
      data_dir: dir,
      // A node id per data directory: daemons sharing a PostgreSQL store are distinct nodes, and a
      // daemon restarted on its directory is the same node again (the host name would make every
      // test daemon one node, each taking the others' lease).
      cluster: { node_id: basename(dir), ...cluster },
      http: { host: '127.0.0.1', port: 0 },
      // SIP on loopback, UDP and TCP on one OS-chosen port; short drain so close() is quick.
      sip: { host: '127.0.0.1', port: 0, ...sip },
      drain: { deadline_secs: 2, ...drain },
      log_level: 'silent',
      ...rest,
    },
    {},
  );
  const logger = logLines ? createLogger('info', { write: (line: string) => void logLines.push(line) }) : createLogger('silent');
  const daemon = await startDaemon(config, logger, () => {}, options);
  // No key file when the store already had a key at start (a second node on a shared PostgreSQL store).
  const keyFile = join(dir, INITIAL_KEY_FILE);
  const key = existsSync(keyFile) ? readFileSync(keyFile, 'utf8').trim() : '';
  const td: TestDaemon = {
    daemon,
    url: daemon.url,
    dataDir: dir,
    key,
    async api(method, path, body, opts = {}) {
      const headers: Record<string, string> = { ...(opts.headers ?? {}) };
      const k = opts.key === undefined ? key : opts.key;
      if (k !== null) headers.authorization = `Bearer ${k}`;
      let payload: string | undefined = opts.rawBody;
      if (body !== undefined) payload = JSON.stringify(body);
      if (payload !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
      const res = await fetch(daemon.url + path, { method, headers, body: payload });
      const text = await res.text();
      let parsed: unknown = undefined;
      if (text && (res.headers.get('content-type') ?? '').includes('json')) parsed = JSON.parse(text);
      return { status: res.status, body: parsed as any, text, headers: res.headers };
    },
    async newOrgKey(name) {
      return (await daemon.store.organizations.createKey(name)).key;
    },
    stop: () => daemon.close(),
    async restart() {
      await daemon.close();
      return startTestDaemon(overrides, dir, options, logLines);
    },
    async close() {
      await daemon.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return td;
}
