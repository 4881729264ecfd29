/**
 * dnsmasq (Debian `dnsmasq`) as an authoritative DNS server on loopback for the RFC 3263 tests:
 * started by the test on a free UDP port, in the foreground, with no config file, no
 * /etc/hosts and no upstream servers, so it answers only the records given here. `--local`
 * makes it answer NXDOMAIN for any other name under the test's domains (without it, a name it
 * does not know would be REFUSED: "no upstream servers"), which is what a real zone does.
 * Stopped by PID (SIGTERM, SIGKILL after 3 s); its temporary directory is deleted.
 *
 *   const dns = await startDnsmasq({
 *     local: ['example.test'],
 *     hosts: [['a.example.test', '127.0.0.1']],
 *     srv: [{ name: '_sip._udp.example.test', target: 'a.example.test', port: 5070, priority: 10, weight: 5 }],
 *     naptr: [{ name: 'example.test', order: 10, preference: 10, flags: 's', service: 'SIP+D2T', replacement: '_sip._tcp.example.test' }],
 *   });
 *   ... dns.server  ('127.0.0.1:<port>') ...
 *   await dns.stop();
 */
import { spawn, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { Resolver } from 'node:dns/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { peerMissing, requirePeer, type PeerAvailability } from '../helpers/peer-availability.ts';

export const DNSMASQ_BIN = process.env.DNSMASQ_BIN ?? '/usr/sbin/dnsmasq';

/** Whether dnsmasq is installed; when not, its tests skip on a developer's machine and fail in CI. */
export function dnsmasqAvailable(): PeerAvailability {
  if (!existsSync(DNSMASQ_BIN)) return peerMissing(`${DNSMASQ_BIN} not found (apt-get install dnsmasq, or set DNSMASQ_BIN)`);
  return { ok: true, skip: false };
}

export interface SrvRecord {
  name: string;
  target: string;
  port: number;
  priority: number;
  weight: number;
}

export interface NaptrRecord {
  name: string;
  order: number;
  preference: number;
  flags: string;
  service: string;
  regexp?: string;
  replacement: string;
}

export interface DnsmasqOptions {
  /** Domains answered from these records only (NXDOMAIN for the rest). */
  local: string[];
  /** A/AAAA records: [name, address]. */
  hosts?: [string, string][];
  srv?: SrvRecord[];
  naptr?: NaptrRecord[];
  /** TTL of the A/AAAA records (dnsmasq's --local-ttl). Default 60. */
  ttl?: number;
}

export interface Dnsmasq {
  port: number;
  /** "127.0.0.1:<port>", for sip.dns_servers. */
  server: string;
  pid: number;
  log(): string;
  stop(): Promise<void>;
}

/** A UDP port free on loopback right now. */
export async function freeUdpPort(): Promise<number> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
  const port = s.address().port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** A port free on loopback for both UDP and TCP right now (dnsmasq binds both). */
async function freeDnsPort(): Promise<number> {
  for (;;) {
    const port = await freeUdpPort();
    const tcpFree = await new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (tcpFree) return port;
  }
}

/**
 * Starts dnsmasq; a port taken between our check and its bind (tests run in parallel) is retried
 * on another port, up to 5 times.
 */
export async function startDnsmasq(o: DnsmasqOptions): Promise<Dnsmasq> {
  requirePeer(dnsmasqAvailable());
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(o, await freeDnsPort());
    } catch (err) {
      if (attempt >= 5 || !String(err instanceof Error ? err.message : err).includes('Address already in use')) throw err;
    }
  }
}

async function startOnce(o: DnsmasqOptions, port: number): Promise<Dnsmasq> {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-dnsmasq-'));
  const args = [
    '--keep-in-foreground',
    `--port=${port}`,
    '--listen-address=127.0.0.1',
    '--bind-interfaces',
    '--no-resolv',
    '--no-hosts',
    '--no-poll',
    '--conf-file=/dev/null',
    '--user=root',
    `--pid-file=${join(dir, 'dnsmasq.pid')}`,
    '--log-queries',
    '--log-facility=-',
    `--local-ttl=${o.ttl ?? 60}`,
    ...o.local.map((d) => `--local=/${d}/`),
    ...(o.hosts ?? []).map(([name, address]) => `--host-record=${name},${address}`),
    ...(o.srv ?? []).map((s) => `--srv-host=${s.name},${s.target},${s.port},${s.priority},${s.weight}`),
    // --naptr-record=<name>,<order>,<preference>,<flags>,<service>,<regexp>[,<replacement>]
    ...(o.naptr ?? []).map((n) => `--naptr-record=${n.name},${n.order},${n.preference},${n.flags},${n.service},${n.regexp ?? ''},${n.replacement}`),
  ];
  let output = '';
  const child: ChildProcess = spawn(DNSMASQ_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (b: Buffer) => (output += b.toString('utf8')));
  child.stderr!.on('data', (b: Buffer) => (output += b.toString('utf8')));
  let running = true;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => {
    running = false;
  });
  const stop = async (): Promise<void> => {
    if (running && child.pid !== undefined) {
      process.kill(child.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (running && child.pid !== undefined) process.kill(child.pid, 'SIGKILL');
      }, 3000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitForAnswer(port, o.local[0] ?? 'localhost', () => running);
  } catch (err) {
    await stop();
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${output}`, { cause: err });
  }
  return { port, server: `127.0.0.1:${port}`, pid: child.pid!, log: () => output, stop };
}

/** Polls with a query until dnsmasq answers (any answer, NXDOMAIN included). */
async function waitForAnswer(port: number, name: string, alive: () => boolean): Promise<void> {
  const r = new Resolver({ timeout: 200, tries: 1 });
  r.setServers([`127.0.0.1:${port}`]);
  for (let i = 0; i < 50; i++) {
    if (!alive()) throw new Error('dnsmasq exited at start');
    try {
      await r.resolve4(name);
      return;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === 'ENOTFOUND' || code === 'ENODATA') return;
    }
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error('dnsmasq did not answer within 5 s');
}
