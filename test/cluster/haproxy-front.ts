/**
 * HAProxy (Debian `haproxy`, 2.6) running the SHIPPED HTTP balancer config,
 * deploy/haproxy/haproxy.cfg, not a copy: the test's config is that file with only the listen
 * address, the node lines (between `# --- nodes ---` and `# --- end of nodes ---`) and the admin
 * socket's path replaced, written into the run's own temporary directory. It is checked with
 * `haproxy -c`, then run in the foreground (-db) in a process group of its own (spawnInGroup),
 * stopped by that PID's group.
 *
 *   const lb = await startHaproxyFront({ port, nodes: [{ name: 'node1', port: n1.httpPort }, ...] });
 *   const res = await fetch(`${lb.url}/readyz`);
 *   await lb.servedBy(res.headers.get('x-request-id')!)    // 'node1': the server HAProxy chose
 *   await lb.steer('node2')      // spacer requests until the NEXT request goes to node2 (round robin)
 *   await lb.stop()
 *
 * What is read: HAProxy's log on stdout (the shipped `log stdout` and `log-format`): one line per
 * request, `... <backend>/<server> ... <status> ... id=<X-Request-ID> <method> <path>`. The
 * config sets a request id on every request and returns it to the client (X-Request-ID, also on
 * a WebSocket's 101), so a request the test made is found in the log by its id. A WebSocket's
 * line is written when it closes.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnInGroup, type GroupProcess } from '../helpers/spawn-in-group.ts';

export const SHIPPED_HAPROXY_CFG = fileURLToPath(new URL('../../deploy/haproxy/haproxy.cfg', import.meta.url));
export const HAPROXY_BIN = process.env.HAPROXY_BIN ?? '/usr/sbin/haproxy';

/** As postgresAvailability(): skip without HAProxy on a developer's machine, fail in CI (CI set). */
export function haproxyAvailability(): { ok: boolean; skip: boolean; reason?: string } {
  if (existsSync(HAPROXY_BIN)) return { ok: true, skip: false };
  return { ok: false, skip: !process.env.CI, reason: `${HAPROXY_BIN} not found (apt-get install haproxy)` };
}

export interface BalancedNode {
  /** The server's name in the backend (the node id). */
  name: string;
  port: number;
  /** Default 127.0.0.1. */
  host?: string;
}

const NODES_BEGIN = '    # --- nodes ---\n';
const NODES_END = '    # --- end of nodes ---\n';
const BIND = '    bind :8080\n';
const ADMIN_SOCKET = '/var/lib/haproxy/admin.sock';

/** Replaces the one occurrence of `what` (throws when the shipped file has none, or several). */
function replaceOnce(text: string, what: string, by: string): string {
  const at = text.indexOf(what);
  if (at < 0 || text.indexOf(what, at + 1) >= 0) throw new Error(`deploy/haproxy/haproxy.cfg: expected exactly one ${JSON.stringify(what)}`);
  return text.slice(0, at) + by + text.slice(at + what.length);
}

/** The shipped config with the test's addresses: listen address, node lines, admin socket. Nothing else changes. */
export function renderHaproxyConfig(shipped: string, o: { bind: string; nodes: readonly BalancedNode[]; adminSocket: string }): string {
  let text = replaceOnce(shipped, BIND, `    bind ${o.bind}\n`);
  text = replaceOnce(text, ADMIN_SOCKET, o.adminSocket);
  const begin = text.indexOf(NODES_BEGIN);
  const end = text.indexOf(NODES_END);
  if (begin < 0 || end < begin) throw new Error('deploy/haproxy/haproxy.cfg: no node block (# --- nodes --- ... # --- end of nodes ---)');
  const lines = o.nodes.map((n) => `    server ${n.name} ${n.host ?? '127.0.0.1'}:${n.port}\n`).join('');
  return text.slice(0, begin + NODES_BEGIN.length) + lines + text.slice(end);
}

/** One line of HAProxy's log (the shipped log-format). */
export interface HaproxyLogLine {
  client: string;
  backend: string;
  /** The server chosen ('<NOSRV>' when none). */
  server: string;
  status: number;
  /** HAProxy's termination state, e.g. '----' (normal), 'CD--' (client aborted during data). */
  termination: string;
  requestId: string;
  method: string;
  path: string;
  line: string;
}

const LOG_LINE = /^(\S+) \[[^\]]+\] \S+ ([^/\s]+)\/(\S+) \S+ (-?\d+) \S+ (\S+) \S+ \S+ id=(\S+) (\S+) (\S+)$/;

export function parseHaproxyLog(text: string): HaproxyLogLine[] {
  const out: HaproxyLogLine[] = [];
  for (const line of text.split('\n')) {
    const m = LOG_LINE.exec(line.trim());
    if (m) out.push({ client: m[1]!, backend: m[2]!, server: m[3]!, status: Number(m[4]), termination: m[5]!, requestId: m[6]!, method: m[7]!, path: m[8]!, line: line.trim() });
  }
  return out;
}

export interface HaproxyFront {
  /** http://127.0.0.1:<port> */
  readonly url: string;
  readonly port: number;
  readonly pid: number | undefined;
  /** The rendered config it runs. */
  readonly config: string;
  /** Everything HAProxy wrote (log lines, notices). */
  log(): string;
  lines(): HaproxyLogLine[];
  /** The server that served the request with this X-Request-ID; waits for its log line (a WebSocket's comes when it closes). */
  servedBy(requestId: string, timeoutMs?: number): Promise<string>;
  /**
   * Sends spacer requests (GET /readyz) through the balancer until round robin's next choice is
   * `server`. Only right while nothing else goes through the balancer, and with two servers up.
   */
  steer(server: string): Promise<void>;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startHaproxyFront(o: { port: number; nodes: readonly BalancedNode[] }): Promise<HaproxyFront> {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-haproxy-'));
  const cfgFile = join(dir, 'haproxy.cfg');
  const config = renderHaproxyConfig(readFileSync(SHIPPED_HAPROXY_CFG, 'utf8'), { bind: `127.0.0.1:${o.port}`, nodes: o.nodes, adminSocket: join(dir, 'admin.sock') });
  writeFileSync(cfgFile, config);
  const check = spawnSync(HAPROXY_BIN, ['-c', '-f', cfgFile], { encoding: 'utf8' });
  if (check.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`haproxy -c refused the config:\n${check.stdout}${check.stderr}`);
  }
  const proc: GroupProcess = spawnInGroup(HAPROXY_BIN, ['-db', '-f', cfgFile], { cwd: dir, stdout: true, stderr: true });
  const url = `http://127.0.0.1:${o.port}`;
  const stop = async () => {
    await proc.stop(3000);
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready once it answers through to a node.
  for (const deadline = Date.now() + 10_000; ; await sleep(50)) {
    if (!proc.running()) {
      await stop();
      throw new Error(`haproxy exited at start:\n${proc.output()}`);
    }
    const ok = await fetch(`${url}/readyz`).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`haproxy did not pass a request to a node within 10 s:\n${proc.output()}`);
    }
  }
  const lines = () => parseHaproxyLog(proc.output());
  const servedBy = async (requestId: string, timeoutMs = 5000): Promise<string> => {
    for (const deadline = Date.now() + timeoutMs; ; await sleep(20)) {
      const found = lines().find((l) => l.requestId === requestId);
      if (found) return found.server;
      if (Date.now() > deadline) throw new Error(`no HAProxy log line for request ${requestId} within ${timeoutMs} ms; the log ends:\n${proc.output().slice(-2000)}`);
    }
  };
  return {
    url,
    port: o.port,
    pid: proc.pid,
    config,
    log: proc.output,
    lines,
    servedBy,
    async steer(server) {
      if (!o.nodes.some((n) => n.name === server)) throw new Error(`no server ${server}`);
      // With two servers, round robin alternates: once a spacer went to the other one, the next is `server`.
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${url}/readyz`);
        await res.body?.cancel();
        const id = res.headers.get('x-request-id');
        if (id === null) throw new Error('the balancer answered without X-Request-ID');
        if ((await servedBy(id)) !== server) return;
      }
      throw new Error(`could not steer round robin to ${server}: is only one server up?\n${proc.output().slice(-2000)}`);
    },
    stop,
  };
}
