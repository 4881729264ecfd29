/**
 * One callbridge node of a cluster test: the real `node bin/callbridge.js start` in a child
 * process (so it can be killed with SIGKILL or drained with SIGTERM like a production node), on
 * 127.0.0.1 with its own data directory, HTTP port, SIP port (UDP and TCP) and RTP port range,
 * configured through environment variables only, as in deploy/docker-compose.yml.
 *
 *   const node = await startCallbridgeNode({ name: 'node1', env: { CALLBRIDGE_SIP_DIGEST_SECRET: s } });
 *   await node.api('POST', '/v1/agents', { name: 'Desk' });
 *   // on a shared store (CALLBRIDGE_STORE_URL): the first node's key serves the others
 *   const node2 = await startCallbridgeNode({ name: 'node2', env, apiKey: node.key });
 *   await node.kill9();          // SIGKILL by PID: no drain, no goodbye
 *   await node.start();          // the same data directory and ports again
 *   const code = await node.terminate();   // SIGTERM: drains, resolves with the exit code
 *   await node.close();          // stops it if running, deletes its data directory
 *
 * Signals go to this node's PID only. The child's output (last 32 kB, or keepOutput) is kept
 * for failure messages and tests that read its log; API keys are redacted from it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freeSipPort } from '../interop/sipp.ts';

const BIN = fileURLToPath(new URL('../../bin/callbridge.js', import.meta.url));
const KEEP_OUTPUT = 32_000;

export interface ApiResponse {
  status: number;
  body: any;
  text: string;
}

export interface CallbridgeNodeOptions {
  name: string;
  /** RTP ports of this node: [min, max]. Default: a 200-port slice of 20000-29999 chosen at random. */
  rtpPorts?: [number, number];
  /** More CALLBRIDGE_* settings (they win over the defaults here). */
  env?: Record<string, string>;
  /** How long start() waits for /readyz. Default 30 s (the sources are compiled by tsx at start). */
  startTimeoutMs?: number;
  /**
   * The API key of this node's REST calls. Omitted: the `initial-api-key` its first start writes
   * into its data directory. A node joining a shared store whose organization and key another
   * node created writes no such file (the database has a key already): give it that node's key.
   */
  apiKey?: string;
  /** How much of the child's output is kept (its tail), in characters. Default 32 kB. */
  keepOutput?: number;
}

export interface CallbridgeNode {
  readonly name: string;
  readonly httpPort: number;
  readonly sipPort: number;
  readonly dataDir: string;
  /** The node's SIP address as a dispatcher destination: sip:127.0.0.1:<sipPort>. */
  readonly sipUri: string;
  /** The running child's PID; undefined when not running. */
  readonly pid: number | undefined;
  /** The API key of its REST calls: `apiKey`, or the initial one read from the data directory at the first start. */
  readonly key: string;
  running(): boolean;
  /** Resolves with the exit code (null when killed by a signal) of the current child. */
  exited(): Promise<number | null>;
  /** Starts the node (again) and waits until /readyz answers 200. */
  start(): Promise<void>;
  /** A REST call with the node's key. */
  api(method: string, path: string, body?: unknown): Promise<ApiResponse>;
  /** SIGKILL by PID; resolves once the child is gone. */
  kill9(): Promise<void>;
  /** SIGTERM by PID (the node drains); resolves with its exit code. */
  terminate(): Promise<number | null>;
  /** The child's output so far (its last 32 kB, or keepOutput), keys redacted. */
  output(): string;
  /** Stops it (SIGTERM, SIGKILL after 5 s) if running and deletes its data directory. */
  close(): Promise<void>;
}

function freeTcpPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

const redact = (text: string): string => text.replace(/cbk_[A-Za-z0-9_-]+/g, 'cbk_<redacted>');

export async function startCallbridgeNode(o: CallbridgeNodeOptions): Promise<CallbridgeNode> {
  const dataDir = mkdtempSync(join(tmpdir(), `callbridge-${o.name}-`));
  const httpPort = await freeTcpPort();
  const sipPort = await freeSipPort();
  const rtpMin = o.rtpPorts?.[0] ?? 20000 + 200 * Math.floor(Math.random() * 50);
  const rtpMax = o.rtpPorts?.[1] ?? rtpMin + 199;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    CALLBRIDGE_DATA_DIR: dataDir,
    CALLBRIDGE_HTTP_HOST: '127.0.0.1',
    CALLBRIDGE_HTTP_PORT: String(httpPort),
    CALLBRIDGE_SIP_HOST: '127.0.0.1',
    CALLBRIDGE_SIP_PORT: String(sipPort),
    CALLBRIDGE_RTP_ADDRESS: '127.0.0.1',
    CALLBRIDGE_RTP_PORT_MIN: String(rtpMin),
    CALLBRIDGE_RTP_PORT_MAX: String(rtpMax),
    CALLBRIDGE_LOG_LEVEL: 'info',
    ...o.env,
  };
  let child: ChildProcess | undefined;
  let exit: Promise<number | null> = Promise.resolve(null);
  let out = '';
  let key = o.apiKey ?? '';
  const keep = (b: Buffer) => {
    out = (out + b.toString('utf8')).slice(-(o.keepOutput ?? KEEP_OUTPUT));
  };
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const api = async (method: string, path: string, body?: unknown): Promise<ApiResponse> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`http://127.0.0.1:${httpPort}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    const parsed = text && (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : undefined;
    return { status: res.status, body: parsed, text };
  };
  const signal = async (sig: NodeJS.Signals): Promise<number | null> => {
    if (running() && child?.pid !== undefined) process.kill(child.pid, sig);
    return exit;
  };

  const node: CallbridgeNode = {
    name: o.name,
    httpPort,
    sipPort,
    dataDir,
    sipUri: `sip:127.0.0.1:${sipPort}`,
    get pid() {
      return running() ? child?.pid : undefined;
    },
    get key() {
      return key;
    },
    running,
    exited: () => exit,
    async start() {
      if (running()) throw new Error(`${o.name} is running already`);
      out += `\n--- ${o.name} start ${new Date().toISOString()}\n`;
      // --single-threaded-gc as npm start and the Docker image run it (docs/media-workers.md).
      const c = spawn(process.execPath, ['--single-threaded-gc', BIN, 'start'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      child = c;
      c.stdout!.on('data', keep);
      c.stderr!.on('data', keep);
      exit = new Promise<number | null>((resolve) => c.once('exit', (code) => resolve(code)));
      const deadline = Date.now() + (o.startTimeoutMs ?? 30_000);
      for (;;) {
        if (!running()) throw new Error(`${o.name} exited (${c.exitCode ?? c.signalCode}) before it was ready:\n${redact(out)}`);
        const ready = await fetch(`http://127.0.0.1:${httpPort}/readyz`).then((r) => r.ok, () => false);
        if (ready) break;
        if (Date.now() > deadline) {
          c.kill('SIGKILL');
          throw new Error(`${o.name} not ready within ${o.startTimeoutMs ?? 30_000} ms:\n${redact(out)}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      if (!key) {
        const file = join(dataDir, 'initial-api-key');
        if (!existsSync(file)) throw new Error(`${o.name} wrote no ${file} (the store had a key already?): pass apiKey`);
        key = readFileSync(file, 'utf8').trim();
      }
    },
    api,
    async kill9() {
      await signal('SIGKILL');
    },
    terminate: () => signal('SIGTERM'),
    output: () => redact(out),
    async close() {
      if (running() && child?.pid !== undefined) {
        const pid = child.pid;
        process.kill(pid, 'SIGTERM');
        const timer = setTimeout(() => {
          if (running()) process.kill(pid, 'SIGKILL');
        }, 5000);
        await exit;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  try {
    await node.start();
  } catch (err) {
    await node.close();
    throw err;
  }
  return node;
}
