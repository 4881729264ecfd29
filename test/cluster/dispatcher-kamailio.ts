/**
 * Kamailio (Debian `kamailio`) running the SHIPPED cluster front, deploy/kamailio/kamailio.cfg,
 * not a copy: what differs in a test (listen address and port, the dispatcher list, the control
 * socket, probe interval, tm timers, workers) is passed as `-A` defines, which the config takes
 * through its `#!trydef` defaults. The dispatcher list is written into the run's own temporary
 * directory; the lifecycle (kamailio -c, a process group of its own, stopped by PID) is
 * test/interop/kamailio.ts's runKamailio().
 *
 *   const front = await startDispatcherFront({ nodes: [n1.sipUri, n2.sipUri], pingIntervalSecs: 1, frTimerMs: 1000 });
 *   await front.setNodes([n1.sipUri, n2.sipUri, n3.sipUri]);   // rewrite the list, kamcmd dispatcher.reload
 *   front.dispatchedTo(callId)        // every node Kamailio sent this INVITE to, in order (failover)
 *   await front.waitForLog(/node sip:127\.0\.0\.1:5071 down/, 5000)
 *
 * What the config logs and this reads (xlog, L_INFO/L_WARN, on stderr):
 *   dispatch INVITE <call-id> to sip:127.0.0.1:<port>[ (failover: <uri> answered <code>)]
 *   in-dialog BYE <call-id> to <uri>
 *   dispatcher: node <uri> down | up
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { peerMissing, requirePeer, type PeerAvailability } from '../helpers/peer-availability.ts';
import { kamailioAvailable, runKamailio, type Kamailio } from '../interop/kamailio.ts';
import { freeSipPort } from '../interop/sipp.ts';

export const SHIPPED_CFG = fileURLToPath(new URL('../../deploy/kamailio/kamailio.cfg', import.meta.url));
export const KAMCMD_BIN = process.env.KAMCMD_BIN ?? '/usr/sbin/kamcmd';
/** The modules kamailio.cfg loads. */
const MODULES = ['tm.so', 'tmx.so', 'sl.so', 'rr.so', 'pv.so', 'maxfwd.so', 'textops.so', 'siputils.so', 'xlog.so', 'sanity.so', 'ctl.so', 'kex.so', 'corex.so', 'dispatcher.so'];

/** Kamailio with the modules kamailio.cfg loads, and kamcmd: skipped outside CI when missing, failed in CI. */
export function dispatcherFrontAvailable(): PeerAvailability {
  const k = kamailioAvailable(MODULES);
  if (!k.ok) return k;
  if (!existsSync(KAMCMD_BIN)) return peerMissing(`${KAMCMD_BIN} not found (apt-get install kamailio, which ships it)`);
  return { ok: true, skip: false };
}

export interface DispatcherFrontOptions {
  /** Destinations of dispatcher set 1, e.g. sip:127.0.0.1:5071. */
  nodes: readonly string[];
  /** DS_PING_INTERVAL: seconds between OPTIONS probes; 0 = no probing. */
  pingIntervalSecs: number;
  /** FR_TIMER_MS: no reply within this = a dead node (probe failed, INVITE fails over). */
  frTimerMs: number;
  /** More defines, e.g. { DS_PROBING_THRESHOLD: 2 }. */
  defines?: Record<string, string | number>;
}

export interface DispatcherFront extends Kamailio {
  listFile: string;
  ctlSocket: string;
  /** Rewrites the dispatcher list and makes Kamailio reload it (kamcmd dispatcher.reload), as an operator adds a node. */
  setNodes(nodes: readonly string[]): void;
  /** `kamcmd -s <ctl> <args>`: its stdout; throws with stderr when it fails. */
  rpc(...args: string[]): string;
  /** The destinations Kamailio dispatched this initial request to, in order (more than one: failover). */
  dispatchedTo(callId: string): string[];
  /** Where Kamailio relayed the in-dialog requests of a method for this Call-ID. */
  inDialogTo(method: string, callId: string): string[];
  /** Resolves with the time (epoch ms) the log first matched `pattern` (polled every 20 ms); throws after timeoutMs. */
  waitForLog(pattern: RegExp, timeoutMs: number): Promise<number>;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function listText(nodes: readonly string[]): string {
  return ['# written by test/cluster/dispatcher-kamailio.ts (format: deploy/kamailio/dispatcher.list)', ...nodes.map((uri, i) => `1 ${uri} 0 0 duid=node${i + 1}`), ''].join('\n');
}

export async function startDispatcherFront(o: DispatcherFrontOptions): Promise<DispatcherFront> {
  requirePeer(dispatcherFrontAvailable());
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-front-'));
  const port = await freeSipPort();
  const listFile = join(dir, 'dispatcher.list');
  const ctlSocket = `unix:${join(dir, 'kamailio_ctl')}`;
  writeFileSync(listFile, listText(o.nodes));
  const k = await runKamailio({
    cfg: SHIPPED_CFG,
    dir,
    port,
    defines: {
      LISTEN_ADDR: '127.0.0.1',
      SIP_PORT: port,
      DISPATCHER_LIST: `"${listFile}"`,
      CTL_SOCKET: `"${ctlSocket}"`,
      DS_PING_INTERVAL: o.pingIntervalSecs,
      FR_TIMER_MS: o.frTimerMs,
      CHILDREN: 2,
      ...o.defines,
    },
  });
  const rpc = (...args: string[]): string => {
    const r = spawnSync(KAMCMD_BIN, ['-s', ctlSocket, ...args], { encoding: 'utf8', timeout: 5000 });
    if (r.status !== 0) throw new Error(`kamcmd ${args.join(' ')} failed (${r.status ?? r.signal}): ${r.stderr}${r.stdout}`);
    return r.stdout;
  };
  const lines = (re: RegExp) => [...k.log().matchAll(re)].map((m) => m[1]!);
  return {
    ...k,
    listFile,
    ctlSocket,
    setNodes(nodes) {
      writeFileSync(listFile, listText(nodes));
      rpc('dispatcher.reload');
    },
    rpc,
    dispatchedTo: (callId) => lines(new RegExp(`dispatch INVITE ${escape(callId)} to (\\S+)`, 'g')),
    inDialogTo: (method, callId) => lines(new RegExp(`in-dialog ${escape(method)} ${escape(callId)} to (\\S+)`, 'g')),
    async waitForLog(pattern, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if (pattern.test(k.log())) return Date.now();
        if (Date.now() > deadline) throw new Error(`Kamailio did not log ${pattern} within ${timeoutMs} ms; its log ends:\n${k.log().slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}
