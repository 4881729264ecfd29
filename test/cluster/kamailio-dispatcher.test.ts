/**
 * The cluster front of issue 25 on loopback: Kamailio (Debian `kamailio`) runs the SHIPPED
 * deploy/kamailio/kamailio.cfg (dispatcher-kamailio.ts passes the test's addresses and shorter
 * timers as `-A` defines) in front of three real callbridge daemons (callbridge-node.ts: `node
 * bin/callbridge.js start` children, each with its own data directory, ports and RTP range).
 * SIPp (scenarios/bridge-acl.xml) calls Kamailio; the test process is the caller's RTP side
 * (rtp-peer.ts) and hears the agent's first message from whichever node took the call.
 *
 * The three nodes share ONE store: a throwaway PostgreSQL (test/helpers/postgres.ts) named by
 * CALLBRIDGE_STORE_URL, with the same encryption key, token secret and digest secret on every
 * node (docs/store-postgres.md), each with its own data directory, ports, RTP range and cluster
 * node id. node1 starts first and creates the organization and its key; the other two find a key
 * in the database and use node1's. Provisioning is done once, through node1's REST API: an ACL
 * trunk admitting Kamailio's address (127.0.0.1/32; on loopback SIPp shares it, so the ACL does
 * not tell them apart here), an agent, a number, and a digest trunk.
 *
 * What is shown, with probes every PING_SECS and tm's fr_timer FR_MS:
 *   (a) a node added by the README's procedure (dispatcher.list + kamcmd dispatcher.reload);
 *       every call answered and bridged (the first message heard), spread over all three nodes;
 *       and a digest call: challenged by one node, its retry answered by the next (the nodes
 *       share sip.digest_secret, so a nonce validates on any of them);
 *   (d) for each call, the caller's BYE went through Kamailio to the node Kamailio dispatched the
 *       INVITE to, and the shared call history, read at once on ANOTHER node, has the call once,
 *       ended by the caller's hang-up (within 2 s of the BYE);
 *   (e) REST writes on node1 are read on node3 at once (an agent created, a trunk changed);
 *   (f) a session token minted on node1 opens a voice WebSocket on node2 once; opened again on
 *       node3 or node2 it is refused (401 "session token already used", before the upgrade);
 *   (b) kill -9 of the node carrying a call: Kamailio's probes mark it down within PING_SECS +
 *       FR_MS (+ margin); then new calls all land on the survivors, with no INVITE sent to the
 *       dead node and none failing; a survivor marks the dead node's call failed (termination
 *       reason node_lost) within the node timeout + a heartbeat (node leases); restarted, the node
 *       is marked up again and takes calls;
 *   (c) SIGTERM of a node with a call up: its OPTIONS answer turns 503 + Retry-After, Kamailio
 *       marks it down within a probe interval, new calls go to the others; its call goes on
 *       until the caller hangs up, then the node exits 0, and the history (read on another node)
 *       has the call ended by that BYE.
 *   Failover, in (b) and (c): a second Kamailio on the same config without probes
 *       (DS_PING_INTERVAL 0) gets three calls right after the kill -9 / the SIGTERM; round robin
 *       sends one to the bad node, which answers nothing (tm's 408 after fr_timer) / 503, and
 *       that call goes on to another node and is answered.
 *   The restart in (b) happens while a survivor carries a call: that call stays in progress (a
 *   restarting node ends its own previous run's sessions, never the live ones of other nodes).
 * Plus, without Kamailio: deploy/docker-compose.yml parses (YAML) and agrees with
 * deploy/kamailio/dispatcher.list (every node on the one PostgreSQL with the same secrets and its
 * own node id), and the shipped config checks out with its production defaults (kamailio -c).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresAvailability } from '../helpers/postgres.ts';
import { stopTestPostgres, TEST_ENCRYPTION_KEY, testPostgresDatabase } from '../helpers/store-backends.ts';
import { connect, rejected } from '../session/helpers.ts';
import { KAMAILIO_BIN } from '../interop/kamailio.ts';
import { isBye200, isByeFromCaller, isInvite200, placeBridgeCall, sipTime, type BridgeCall } from '../interop/bridge-harness.ts';
import { describeSpurts, type Spurt } from '../interop/rtp-peer.ts';
import { sippAvailable, type SippResult } from '../interop/sipp.ts';
import { startCallbridgeNode, type CallbridgeNode } from './callbridge-node.ts';
import { dispatcherFrontAvailable, SHIPPED_CFG, startDispatcherFront, type DispatcherFront } from './dispatcher-kamailio.ts';
import { composeServices, DEPLOY } from './deploy-files.ts';

const sipp = sippAvailable();
const front = dispatcherFrontAvailable();
const postgres = postgresAvailability();
// Without SIPp, Kamailio or PostgreSQL's server binaries the cluster part is skipped, except in CI
// (it fails there, naming the package to install).
const skipReason = sipp.skip ? sipp.reason : front.skip ? front.reason : postgres.skip ? postgres.reason : undefined;

/** DS_PING_INTERVAL and FR_TIMER_MS of this test's Kamailio. */
const PING_SECS = 1;
const FR_MS = 1000;
/** Scheduling margin on a busy 2-core machine (3 daemons, Kamailio, SIPp, the RTP peers). */
const MARGIN_MS = 1500;
const NUMBER = '+15550025000';
const FIRST_MESSAGE = 'Hello! How can I help you today?';
/** The caller hangs up this long after its ACK: room for the ~2 s first message. */
const CALL_MS = 4000;
const FIRST_MESSAGE_WITHIN_MS = 2500;
const RECORD_ENDED_WITHIN_MS = 2000;
const DRAIN_DEADLINE_SECS = 20;
const DIGEST_SECRET = 'cluster-test-digest-secret-0123456789';
/** A digest trunk's number (the ACL trunk does not route it, so an ACL source is challenged). */
const DIGEST_NUMBER = '+15550025001';
const DIGEST_USER = 'pbx-behind-kamailio';
const DIGEST_PASSWORD = 'cluster-digest-password';
/** Node leases (CALLBRIDGE_CLUSTER_*): a heartbeat every second, a node silent for 3 s is lost. */
const HEARTBEAT_SECS = 1;
const NODE_TIMEOUT_SECS = 3;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

let kam: DispatcherFront;
/** The same config without probes (DS_PING_INTERVAL 0): only failover keeps calls off a bad node. */
let blind: DispatcherFront;
const nodes: CallbridgeNode[] = [];
let callSeq = 0;
/** Provisioned in beforeAll (through node1): the agent every number routes to, and the ACL trunk. */
let agentId = '';
let aclTrunkId = '';
/** What the restart in (b) leaves for its own check: the call up on a survivor across it. */
let acrossRestart: { caller: string; atRestart: any; finished?: ClusterCall } | undefined;
/** What (b) leaves for the node-lost check: the killed node, when, and the record of the call it carried. */
let lost: { node: CallbridgeNode; killedAt: number; callId: string; caller: string } | undefined;

/** A finished call placed through Kamailio. */
interface ClusterCall {
  caller: string;
  callId: string;
  r: SippResult;
  spurts: Spurt[];
  answeredAt: number;
  byeAt: number;
  /** Every destination Kamailio dispatched the INVITE to (the last one took it). */
  dispatched: string[];
  /** The node the INVITE was dispatched to last. */
  node: CallbridgeNode | undefined;
}

/** Everything a failure message needs: Kamailio's log tail and each node's output tail. */
function context(): string {
  return [`--- kamailio log (tail)\n${kam?.log().slice(-4000) ?? ''}`, `--- probe-less kamailio log (tail)\n${blind?.log().slice(-1500) ?? ''}`, ...nodes.map((n) => `--- ${n.name} (${n.sipUri}) output (tail)\n${n.output().slice(-1500)}`)].join('\n');
}

const nodeByUri = (uri: string | undefined) => nodes.find((n) => uri !== undefined && (uri === n.sipUri || uri.startsWith(`${n.sipUri};`)));

/** Starts a call (resolves at the 200 OK, when the caller's RTP starts). */
async function startCall(hangupAfterMs: number, front = kam, digest = false): Promise<{ caller: string; call: BridgeCall; front: DispatcherFront }> {
  const caller = `+1555700${String(++callSeq).padStart(4, '0')}`;
  const how = digest
    ? ({ scenario: 'bridge-digest', service: DIGEST_NUMBER, auth: { username: DIGEST_USER, password: DIGEST_PASSWORD } } as const)
    : ({ scenario: 'bridge-acl', service: NUMBER } as const);
  const call = await placeBridgeCall({ ...how, remote: `127.0.0.1:${front.port}`, caller, hangupAfterMs, timeoutMs: hangupAfterMs + 15_000 }).catch((err: unknown) => {
    throw new Error(`call from ${caller} through Kamailio not answered: ${err instanceof Error ? err.message : String(err)}\n${context()}`, { cause: err });
  });
  return { caller, call, front };
}

/** Waits for a started call to end (the caller's BYE) and collects what is needed to judge it. */
async function finishCall(started: { caller: string; call: BridgeCall; front: DispatcherFront }): Promise<ClusterCall> {
  const { caller, call, front } = started;
  try {
    const r = await call.proc.result;
    const callId = r.requests('INVITE', 'sent')[0]?.header('Call-ID') ?? '';
    const dispatched = front.dispatchedTo(callId);
    return {
      caller,
      callId,
      r,
      // A 1 s hangover joins the message's sentences: eSpeak pauses ~350 ms after "Hello!", and
      // more when three nodes share two busy cores; what counts here is that it was heard.
      spurts: call.peer.spurts({ hangoverMs: 1000 }),
      answeredAt: sipTime(r, isInvite200) ?? Number.NaN,
      byeAt: sipTime(r, isByeFromCaller) ?? Number.NaN,
      dispatched,
      node: nodeByUri(dispatched.at(-1)),
    };
  } finally {
    await call.cleanup();
  }
}

async function placeCall(hangupAfterMs = CALL_MS, front = kam): Promise<ClusterCall> {
  return finishCall(await startCall(hangupAfterMs, front));
}

/** `count` calls at once (started 200 ms apart); all are awaited even when one fails. */
async function wave(count: number, hangupAfterMs = CALL_MS, front = kam): Promise<ClusterCall[]> {
  const settled = await Promise.allSettled(Array.from({ length: count }, (_, i) => sleep(i * 200).then(() => placeCall(hangupAfterMs, front))));
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return settled.map((s) => (s as PromiseFulfilledResult<ClusterCall>).value);
}

/** Answered (one 200), the caller's BYE answered 200, and the agent's first message heard as speech. */
function expectBridged(c: ClusterCall): void {
  const ctx = `${c.caller} (Call-ID ${c.callId}, dispatched to ${c.dispatched.join(', ') || 'nowhere'})\n${c.r.describe()}\nheard:\n${describeSpurts(c.spurts, c.answeredAt)}`;
  expect(c.r.code, ctx).toBe(0);
  expect(c.r.killed, ctx).toBe(false);
  expect(c.r.statuses('received', 'INVITE').filter((s) => s >= 200), ctx).toEqual([200]);
  expect(c.r.statuses('received', 'BYE').filter((s) => s >= 200), ctx).toEqual([200]);
  expect(sipTime(c.r, isBye200), ctx).toBeDefined();
  expect(c.node, `Kamailio's dispatch of ${c.callId} names no node\n${ctx}\n${context()}`).toBeDefined();
  const first = c.spurts[0];
  expect(first, `no first message heard\n${ctx}`).toBeDefined();
  expect(first!.start - c.answeredAt, `first message too late\n${ctx}`).toBeLessThanOrEqual(FIRST_MESSAGE_WITHIN_MS);
  expect(first!.start, `audio before the 200 OK\n${ctx}`).toBeGreaterThanOrEqual(c.answeredAt - 100);
  expect(first!.mediaMs, ctx).toBeGreaterThanOrEqual(1000);
  expect(first!.rmsDb, ctx).toBeGreaterThan(-35);
}

/** Answered (one 200) and the caller's BYE answered 200: the SIP side of a call. */
function expectAnswered(c: ClusterCall): void {
  const ctx = `${c.caller} (Call-ID ${c.callId}, dispatched to ${c.dispatched.join(', ') || 'nowhere'})\n${c.r.describe()}`;
  expect(c.r.code, ctx).toBe(0);
  expect(c.r.statuses('received', 'INVITE').filter((s) => s >= 200), ctx).toEqual([200]);
  expect(c.r.statuses('received', 'BYE').filter((s) => s >= 200), ctx).toEqual([200]);
}

/**
 * Calls through the probe-less front while `bad` is dead (no reply: tm's local 408 after
 * fr_timer) or draining (503): round robin sent exactly one of them to `bad` first, and that one
 * failed over to another node (marked in the log with what `bad` answered) and was answered all
 * the same; the others went straight to other nodes.
 */
function expectOneFailover(calls: ClusterCall[], bad: CallbridgeNode, code: 408 | 503): void {
  const story = `${calls.map((c) => `${c.caller} -> ${c.dispatched.join(' -> ')}`).join('\n')}\n${context()}`;
  for (const c of calls) expectAnswered(c);
  const detoured = calls.filter((c) => c.dispatched[0] === bad.sipUri);
  expect(detoured.length, story).toBe(1);
  const d = detoured[0]!;
  expect(d.dispatched.length, story).toBe(2);
  expect(d.node, story).toBeDefined();
  expect(d.node, story).not.toBe(bad);
  expect(blind.log(), story).toMatch(new RegExp(`dispatch INVITE ${escapeRe(d.callId)} to ${escapeRe(d.node!.sipUri)} \\(failover: ${escapeRe(bad.sipUri)} answered ${code}\\)`));
  if (code === 408) {
    // The dead node cost this caller fr_timer, no more.
    const inviteAt = sipTime(d.r, (m) => m.direction === 'sent' && m.method === 'INVITE')!;
    expect(d.answeredAt - inviteAt, story).toBeGreaterThanOrEqual(FR_MS - 100);
  }
  for (const c of calls.filter((x) => x !== d)) {
    expect(c.dispatched.length, story).toBe(1);
    expect(c.node, story).not.toBe(bad);
  }
}

/** Polls our own OPTIONS until the node answers 503 (its drain has begun). */
async function until503(node: CallbridgeNode, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await optionsTo(node.sipPort)).status !== 503) {
    if (Date.now() > deadline) throw new Error(`${node.name} did not answer OPTIONS 503 within ${timeoutMs} ms of SIGTERM`);
    await sleep(50);
  }
}

/** The (shared) call records from `caller`, read on `node` (polling until the first one has ended, or the deadline). */
async function recordsFrom(node: CallbridgeNode, caller: string, deadline = 0): Promise<any[]> {
  for (;;) {
    const res = await node.api('GET', '/v1/calls?outbound=false&source=sip&page_size=100');
    expect(res.status, res.text).toBe(200);
    const found = (res.body.calls as any[]).filter((c) => c.from === caller);
    if ((found[0] && found[0].ended_at) || Date.now() > deadline) return found;
    await sleep(100);
  }
}

/** A running node other than `owner` (and `skip`): where the shared history is read. */
function otherNode(owner: CallbridgeNode | undefined, skip?: CallbridgeNode): CallbridgeNode {
  const reader = nodes.find((n) => n !== owner && n !== skip && n.running());
  if (!reader) throw new Error(`no running node other than ${owner?.name ?? '?'}\n${context()}`);
  return reader;
}

/**
 * (d): the caller's BYE went through Kamailio to the node that took the INVITE, and the shared
 * history, read at once on another node (running, not `skip`), has the call once, ended by the BYE.
 */
async function expectEndedByCallerOnOwner(c: ClusterCall, skip?: CallbridgeNode): Promise<void> {
  const owner = c.node!;
  const byes = kam.inDialogTo('BYE', c.callId);
  expect(byes.length, `the caller's BYE of ${c.callId} did not pass Kamailio\n${context()}`).toBeGreaterThan(0);
  for (const to of byes) expect(to, `BYE of ${c.callId} relayed elsewhere than ${owner.name}`).toMatch(new RegExp(`@?127\\.0\\.0\\.1:${owner.sipPort}(;|>|$)`));
  const reader = otherNode(owner, skip);
  const [rec, ...more] = await recordsFrom(reader, c.caller, c.byeAt + RECORD_ENDED_WITHIN_MS + 500);
  const json = JSON.stringify(rec ?? null);
  expect(rec, `${reader.name} reads no call from ${c.caller} (carried by ${owner.name})\n${context()}`).toBeDefined();
  expect(more, json).toEqual([]);
  expect(rec.to, json).toBe(NUMBER);
  expect(rec.direction, json).toBe('inbound');
  expect(rec.status, json).toBe('ended');
  expect(rec.termination_reason, json).toBe('client_closed');
  expect(Date.parse(rec.ended_at) - c.byeAt, `not ended within ${RECORD_ENDED_WITHIN_MS} ms of the caller's BYE: ${json}`).toBeLessThanOrEqual(RECORD_ENDED_WITHIN_MS);
  expect(Date.parse(rec.ended_at), json).toBeGreaterThanOrEqual(c.byeAt - 100);
}

/** The node Kamailio dispatched the one INVITE it logged after `mark` to (one call placed since). */
function onlyDispatchSince(mark: number): { callId: string; node: CallbridgeNode } {
  const found = [...kam.log().slice(mark).matchAll(/dispatch INVITE (\S+) to (\S+)/g)];
  expect(found.length, `expected one INVITE dispatched since the mark\n${context()}`).toBe(1);
  const node = nodeByUri(found[0]![2]);
  expect(node, `dispatched to no node of ours\n${context()}`).toBeDefined();
  return { callId: found[0]![1]!, node: node! };
}

/** The dispatcher's state flags of a destination (kamcmd dispatcher.list), e.g. "AP" (active, probing) or "IP" (inactive). */
function dsFlags(uri: string): string | undefined {
  const text = kam.rpc('dispatcher.list');
  const m = new RegExp(`URI:\\s*${escapeRe(uri)}\\s*\\n\\s*FLAGS:\\s*(\\S+)`).exec(text);
  return m?.[1];
}

/** Our own OPTIONS to a node: its status and Retry-After (what Kamailio's probe gets). */
async function optionsTo(port: number): Promise<{ status: number; retryAfter?: string }> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((done) => s.bind(0, '127.0.0.1', () => done()));
  const local = s.address().port;
  try {
    const reply = new Promise<string>((done, fail) => {
      const timer = setTimeout(() => fail(new Error(`no answer to OPTIONS from 127.0.0.1:${port}`)), 3000);
      s.once('message', (m) => {
        clearTimeout(timer);
        done(m.toString('latin1'));
      });
    });
    const msg = [
      `OPTIONS sip:127.0.0.1:${port} SIP/2.0`,
      `Via: SIP/2.0/UDP 127.0.0.1:${local};rport;branch=z9hG4bKcluster${Date.now()}`,
      `From: <sip:probe@127.0.0.1:${local}>;tag=cl${local}`,
      `To: <sip:127.0.0.1:${port}>`,
      `Call-ID: cluster-options-${Date.now()}@127.0.0.1`,
      'CSeq: 1 OPTIONS',
      'Max-Forwards: 70',
      'Content-Length: 0',
      '',
      '',
    ].join('\r\n');
    s.send(msg, port, '127.0.0.1');
    const text = await reply;
    return { status: Number(/^SIP\/2\.0 (\d{3})/.exec(text)?.[1]), retryAfter: /^Retry-After:\s*(\S+)/im.exec(text)?.[1] };
  } finally {
    s.close();
  }
}

/** An OPTIONS to Kamailio itself over TCP: the status line of its answer (its TCP listener works). */
async function optionsOverTcp(port: number): Promise<string> {
  const sock = net.connect(port, '127.0.0.1');
  try {
    await new Promise<void>((done, fail) => {
      sock.once('connect', () => done());
      sock.once('error', fail);
    });
    const local = sock.localPort;
    sock.write(
      [
        `OPTIONS sip:127.0.0.1:${port};transport=tcp SIP/2.0`,
        `Via: SIP/2.0/TCP 127.0.0.1:${local};branch=z9hG4bKclustertcp${Date.now()}`,
        `From: <sip:probe@127.0.0.1:${local}>;tag=tcp${local}`,
        `To: <sip:127.0.0.1:${port}>`,
        `Call-ID: cluster-tcp-${Date.now()}@127.0.0.1`,
        'CSeq: 1 OPTIONS',
        'Max-Forwards: 70',
        'Content-Length: 0',
        '',
        '',
      ].join('\r\n'),
    );
    const text = await new Promise<string>((done, fail) => {
      const timer = setTimeout(() => fail(new Error(`no answer over TCP from Kamailio at 127.0.0.1:${port}`)), 3000);
      sock.once('data', (b) => {
        clearTimeout(timer);
        done(b.toString('latin1'));
      });
    });
    return text.split('\r\n')[0]!;
  } finally {
    sock.destroy();
  }
}

const downLine = (n: CallbridgeNode) => new RegExp(`dispatcher: node ${escapeRe(n.sipUri)} down`);
const upLine = (n: CallbridgeNode) => new RegExp(`dispatcher: node ${escapeRe(n.sipUri)} up`);

/** Resolves with when `pattern` first shows up in Kamailio's log after `fromIndex`. */
async function logAfter(fromIndex: number, pattern: RegExp, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (pattern.test(kam.log().slice(fromIndex))) return Date.now();
    if (Date.now() > deadline) throw new Error(`Kamailio did not log ${pattern} within ${timeoutMs} ms\n${context()}`);
    await sleep(20);
  }
}

describe.skipIf(skipReason !== undefined)(`Kamailio dispatcher in front of three callbridge nodes${skipReason ? `: skipped, ${skipReason}` : ''}`, () => {
  beforeAll(async () => {
    const db = await testPostgresDatabase('cluster');
    // Media on the main thread: each start is ~4 s shorter without the worker threads, and the
    // media path is not what this file tests (test/interop/bridge-e2e.test.ts runs both).
    const env = {
      CALLBRIDGE_STORE_URL: db.url,
      CALLBRIDGE_STORE_POOL_SIZE: '4',
      // What makes the nodes interchangeable on one store: the same keys and secrets everywhere.
      CALLBRIDGE_ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
      CALLBRIDGE_TOKEN_SECRET: randomBytes(32).toString('base64'),
      CALLBRIDGE_SIP_DIGEST_SECRET: DIGEST_SECRET,
      CALLBRIDGE_CLUSTER_HEARTBEAT_SECS: String(HEARTBEAT_SECS),
      CALLBRIDGE_CLUSTER_NODE_TIMEOUT_SECS: String(NODE_TIMEOUT_SECS),
      CALLBRIDGE_DRAIN_DEADLINE_SECS: String(DRAIN_DEADLINE_SECS),
      CALLBRIDGE_RTP_MEDIA_TIMEOUT_SECS: '10',
      CALLBRIDGE_RTP_MEDIA_THREADS: '0',
    };
    // Distinct RTP slices: a port one node holds is never offered by another.
    const base = 20000 + 600 * Math.floor(Math.random() * 16);
    const startNode = (i: number, apiKey?: string) =>
      startCallbridgeNode({ name: `node${i}`, env: { ...env, CALLBRIDGE_CLUSTER_NODE_ID: `node${i}` }, rtpPorts: [base + 200 * (i - 1), base + 200 * (i - 1) + 199], apiKey });
    // node1 alone first: on the empty database it creates the organization and its key; the
    // others then find a key and create none (started together, each could make its own).
    nodes.push(await startNode(1));
    const started = await Promise.allSettled([2, 3].map((i) => startNode(i, nodes[0]!.key)));
    for (const s of started) if (s.status === 'fulfilled') nodes.push(s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    nodes.sort((a, b) => a.name.localeCompare(b.name));
    for (const n of nodes.slice(1)) expect(existsSync(join(n.dataDir, 'initial-api-key')), `${n.name} made a key of its own`).toBe(false);
    // Provisioned once, through node1: every node serves it from the shared store.
    const a = nodes[0]!;
    const agent = await a.api('POST', '/v1/agents', { name: 'Cluster desk', first_message: FIRST_MESSAGE });
    expect(agent.status, agent.text).toBe(201);
    agentId = agent.body.id;
    const trunk = await a.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'kamailio front', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] });
    expect(trunk.status, trunk.text).toBe(201);
    aclTrunkId = trunk.body.id;
    const assigned = await a.api('POST', `/v1/sip-trunks/${trunk.body.id}/assignments`, { agent_id: agent.body.id, alternate_number: NUMBER });
    expect(assigned.status, assigned.text).toBe(201);
    const digest = await a.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx digest through kamailio', inbound_auth_type: 'digest', inbound_sip_username: DIGEST_USER, inbound_sip_password: DIGEST_PASSWORD });
    expect(digest.status, digest.text).toBe(201);
    const d = await a.api('POST', `/v1/sip-trunks/${digest.body.id}/assignments`, { agent_id: agent.body.id, number: DIGEST_NUMBER });
    expect(d.status, d.text).toBe(201);
    // Two nodes at first: (a) adds the third the way deploy/README.md says.
    [kam, blind] = await Promise.all([
      startDispatcherFront({ nodes: [nodes[0]!.sipUri, nodes[1]!.sipUri], pingIntervalSecs: PING_SECS, frTimerMs: FR_MS }),
      startDispatcherFront({ nodes: nodes.map((n) => n.sipUri), pingIntervalSecs: 0, frTimerMs: FR_MS }),
    ]);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.close()));
    await kam?.stop();
    await blind?.stop();
    await stopTestPostgres();
  });

  it('(a, d) Kamailio on UDP and TCP; a node added by dispatcher.list + dispatcher.reload; six calls answered and bridged, two per node, each ended by the caller on the node that owns it', async () => {
    expect(await optionsOverTcp(kam.port)).toBe('SIP/2.0 200 Keepalive');
    expect(dsFlags(nodes[2]!.sipUri)).toBeUndefined();
    kam.setNodes(nodes.map((n) => n.sipUri));
    for (const n of nodes) expect(dsFlags(n.sipUri), kam.rpc('dispatcher.list')).toMatch(/^A/);

    const calls = [...(await wave(3)), ...(await wave(3))];
    for (const c of calls) expectBridged(c);
    // Round robin over three active nodes: two calls each; no call needed a failover.
    const perNode = nodes.map((n) => calls.filter((c) => c.node === n).length);
    expect(perNode, calls.map((c) => `${c.caller} -> ${c.dispatched.join(' -> ')}`).join('\n')).toEqual([2, 2, 2]);
    for (const c of calls) expect(c.dispatched.length, c.callId).toBe(1);
    for (const c of calls) await expectEndedByCallerOnOwner(c);

    // Digest passed through: round robin sends the INVITE with credentials (same Call-ID, new
    // transaction) to the node after the one that challenged; it validates a nonce it did not
    // issue because the nodes share sip.digest_secret.
    const dc = await finishCall(await startCall(1000, kam, true));
    const dctx = `${dc.dispatched.join(' -> ')}\n${dc.r.describe()}`;
    expect(dc.r.code, dctx).toBe(0);
    expect(dc.r.statuses('received', 'INVITE').filter((st) => st >= 200), dctx).toEqual([401, 200]);
    expect(dc.dispatched.length, dctx).toBe(2);
    expect(nodeByUri(dc.dispatched[0]), dctx).toBeDefined();
    expect(dc.dispatched[1], `the retry landed on the node that challenged: ${dctx}`).not.toBe(dc.dispatched[0]);
    expect((await recordsFrom(otherNode(dc.node), dc.caller)).length, dctx).toBe(1);
  }, 120_000);

  it('(e) REST writes on node1 are read on node3 at once: an agent created, a trunk changed', async () => {
    const [a, , c] = nodes as [CallbridgeNode, CallbridgeNode, CallbridgeNode];
    const created = await a.api('POST', '/v1/agents', { name: 'Written on node1', first_message: 'Read on node3.' });
    expect(created.status, created.text).toBe(201);
    const read = await c.api('GET', `/v1/agents/${created.body.id}`);
    expect(read.status, read.text).toBe(200);
    expect(read.body).toEqual(created.body);

    const patched = await a.api('PATCH', `/v1/sip-trunks/${aclTrunkId}`, { name: 'kamailio front (renamed on node1)' });
    expect(patched.status, patched.text).toBe(200);
    const trunk = await c.api('GET', `/v1/sip-trunks/${aclTrunkId}`);
    expect(trunk.status, trunk.text).toBe(200);
    expect(trunk.body).toEqual(patched.body);
    expect(trunk.body.name).toBe('kamailio front (renamed on node1)');

    const deleted = await a.api('DELETE', `/v1/agents/${created.body.id}`);
    expect(deleted.status, deleted.text).toBe(204);
    expect((await c.api('GET', `/v1/agents/${created.body.id}`)).status).toBe(404);
  });

  it('(f) a session token minted on node1 opens a voice WebSocket on node2 once; node3 and node2 refuse it after that', async () => {
    const [a, b, c] = nodes as [CallbridgeNode, CallbridgeNode, CallbridgeNode];
    const minted = await a.api('POST', '/v1/session-token', { agent_id: agentId });
    expect(minted.status, minted.text).toBe(200);
    const token = minted.body.token as string;
    const sessionId = decodeJwt(token).sub;
    const wsUrl = (n: CallbridgeNode) => `ws://127.0.0.1:${n.httpPort}/v1/connection?token=${encodeURIComponent(token)}`;
    const client = connect(wsUrl(b));
    try {
      await client.opened;
      // session_started comes after the claim is stored: from here on every node sees the token used.
      expect(await client.message(0)).toEqual({ type: 'session_started', data: { id: sessionId } });
      // server.ts refuses a used token before the upgrade (a race lost after it would close 1008).
      const used = { status: 401, body: { error: 'session token already used: a token opens one connection' }, upgraded: false };
      expect(await rejected(wsUrl(c)), `${c.name} let a token used on ${b.name} open again`).toEqual(used);
      expect(await rejected(wsUrl(b)), `${b.name} let its own used token open again`).toEqual(used);
      // The first connection is untouched by the refused ones.
      expect(client.ws.readyState).toBe(client.ws.OPEN);
      const rec = await c.api('GET', `/v1/calls/${sessionId}`);
      expect(rec.status, rec.text).toBe(200);
      expect(rec.body.status, rec.text).toBe('in_progress');
    } finally {
      client.ws.close();
      await client.closed;
    }
  });

  it('(b) kill -9 of the node carrying a call: the probes take it out within a probe interval and fr_timer, new calls land on the survivors with no failed setup', async () => {
    // A call that is up on the node about to die: the callers' side cannot end it (its BYE would
    // go to the dead node), so its SIPp and RTP peer are stopped right after the kill.
    const mark = kam.log().length;
    const up = await startCall(60_000);
    let dead: CallbridgeNode;
    try {
      dead = onlyDispatchSince(mark).node;
      let [rec, ...more] = await recordsFrom(otherNode(dead), up.caller);
      // The answer and the record's in_progress are written by different steps: allow a moment.
      for (const until = Date.now() + 3000; rec?.status !== 'in_progress' && Date.now() < until; ) {
        await sleep(100);
        [rec, ...more] = await recordsFrom(otherNode(dead), up.caller);
      }
      expect(more, JSON.stringify(more)).toEqual([]);
      expect(rec?.status, `the call from ${up.caller} on ${dead.name} is not in progress in the shared history: ${JSON.stringify(rec ?? null)}`).toBe('in_progress');
      const killMark = kam.log().length;
      const killedAt = Date.now();
      await dead.kill9();
      lost = { node: dead, killedAt, callId: rec.id, caller: up.caller };
      await up.call.cleanup();
      // Meanwhile, through the front without probes: failover alone keeps these calls alive.
      const [downAt, blindCalls] = await Promise.all([logAfter(killMark, downLine(dead), PING_SECS * 1000 + FR_MS + MARGIN_MS + 2000), wave(3, 1000, blind)]);
      expectOneFailover(blindCalls, dead, 408);
      expect(downAt - killedAt, `marked down ${downAt - killedAt} ms after the kill`).toBeLessThanOrEqual(PING_SECS * 1000 + FR_MS + MARGIN_MS);
      expect(dsFlags(dead.sipUri)).toMatch(/^I/);
    } finally {
      await up.call.cleanup();
    }

    // Round robin would give the dead node one of three calls: the probes must have taken it out.
    const survivors = nodes.filter((n) => n !== dead);
    const afterKill = await wave(3);
    for (const c of afterKill) expectBridged(c);
    for (const c of afterKill) {
      expect(c.dispatched, `${c.callId} was sent to the dead node`).not.toContain(dead.sipUri);
      expect(c.dispatched.length, `${c.callId} needed a failover: ${c.dispatched.join(' -> ')}`).toBe(1);
      expect(survivors).toContain(c.node);
    }
    for (const c of afterKill) await expectEndedByCallerOnOwner(c);
  }, 120_000);

  it('(b) node leases: a survivor marks the killed node\'s call failed (node_lost) within the node timeout and a heartbeat', async () => {
    expect(lost, '(b) did not kill a node with a call up').toBeDefined();
    const { node: dead, killedAt, callId, caller } = lost!;
    const withinMs = (NODE_TIMEOUT_SECS + HEARTBEAT_SECS) * 1000 + MARGIN_MS;
    const reader = otherNode(dead);
    let rec: any;
    for (const deadline = killedAt + withinMs + 1000; ; ) {
      const res = await reader.api('GET', `/v1/calls/${callId}`);
      expect(res.status, res.text).toBe(200);
      rec = res.body;
      if (rec.status === 'ended' || Date.now() > deadline) break;
      await sleep(100);
    }
    const json = JSON.stringify(rec);
    const story = `the call from ${caller} was up on ${dead.name} when it was killed (kill -9); ${Date.now() - killedAt} ms later ${reader.name} reads ${json}`;
    expect(rec.status, `no survivor marked the dead node's call ended within ${withinMs} ms (node timeout ${NODE_TIMEOUT_SECS} s + heartbeat ${HEARTBEAT_SECS} s + margin; node leases, CALLBRIDGE_CLUSTER_*): ${story}`).toBe('ended');
    expect(rec.end_status, story).toBe('failed');
    expect(rec.termination_reason, story).toBe('node_lost');
    expect(Date.parse(rec.ended_at) - killedAt, `ended too late: ${story}`).toBeLessThanOrEqual(withinMs);
  }, 30_000);

  it('(b) the killed node, restarted while a survivor carries a call: marked up again and takes calls', async () => {
    expect(lost, '(b) did not kill a node').toBeDefined();
    const dead = lost!.node;
    // A call up on a survivor across the restart (the dead node is marked down: it cannot get it).
    const callMark = kam.log().length;
    const across = await startCall(10_000);
    try {
      expect(onlyDispatchSince(callMark).node).not.toBe(dead);
      const restartMark = kam.log().length;
      await dead.start();
      const readyAt = Date.now();
      const [rec] = await recordsFrom(dead, across.caller);
      acrossRestart = { caller: across.caller, atRestart: rec };
      const upAt = await logAfter(restartMark, upLine(dead), PING_SECS * 1000 + MARGIN_MS + 2000);
      expect(upAt - readyAt).toBeLessThanOrEqual(PING_SECS * 1000 + MARGIN_MS);
      const afterRestart = await wave(3);
      for (const c of afterRestart) expectBridged(c);
      expect(afterRestart.filter((c) => c.node === dead).length, afterRestart.map((c) => `${c.caller} -> ${c.dispatched.join(' -> ')}`).join('\n')).toBe(1);
      for (const c of afterRestart) await expectEndedByCallerOnOwner(c);
    } catch (err) {
      await across.call.cleanup();
      throw err;
    }
    acrossRestart.finished = await finishCall(across);
    expectAnswered(acrossRestart.finished);
  }, 120_000);

  it('(b) the restart leaves the survivors\' calls alone: a call up on a survivor is still in progress after it, and ends by its caller\'s BYE', async () => {
    expect(acrossRestart?.finished, '(b) placed no call across the restart').toBeDefined();
    const { atRestart, finished } = acrossRestart!;
    // A restarting node may end its own previous run's sessions (they died with it), never
    // those of the nodes still running.
    expect(atRestart?.status, `right after the restart of ${lost!.node.name}, the call up on ${finished!.node?.name} reads ${JSON.stringify(atRestart ?? null)}: the restart ended another node's live call`).toBe('in_progress');
    await expectEndedByCallerOnOwner(finished!);
  });

  it('(c) SIGTERM with a call up: OPTIONS turn 503, Kamailio takes the node out, new calls go elsewhere; its call ends with the caller\'s BYE, then it exits 0', async () => {
    const LONG_CALL_MS = 13_000;
    const callMark = kam.log().length;
    const long = await startCall(LONG_CALL_MS);
    let draining: CallbridgeNode;
    let exitCode: Promise<number | null>;
    try {
      // Which node took it: where Kamailio dispatched the one INVITE since the mark.
      draining = onlyDispatchSince(callMark).node;
      const others = nodes.filter((n) => n !== draining);

      const mark = kam.log().length;
      const termAt = Date.now();
      exitCode = draining.terminate();
      await until503(draining, 3000);
      // The probe-less front marked the node killed in (b) down for good: all active again first.
      for (const n of nodes) blind.rpc('dispatcher.set_state', 'a', '1', n.sipUri);
      const [downAt, blindCalls] = await Promise.all([logAfter(mark, downLine(draining), PING_SECS * 1000 + MARGIN_MS + 2000), wave(3, 1000, blind)]);
      expectOneFailover(blindCalls, draining, 503);
      expect(downAt - termAt, `marked down ${downAt - termAt} ms after SIGTERM`).toBeLessThanOrEqual(PING_SECS * 1000 + MARGIN_MS);
      expect(dsFlags(draining.sipUri)).toMatch(/^I/);
      // What Kamailio's probe got: the drain's 503 (not silence: the node is up and has a call).
      expect(await optionsTo(draining.sipPort)).toEqual({ status: 503, retryAfter: String(DRAIN_DEADLINE_SECS) });

      const meanwhile = await wave(3);
      for (const c of meanwhile) expectBridged(c);
      for (const c of meanwhile) {
        expect(c.dispatched, `${c.callId} was sent to the draining node`).not.toContain(draining.sipUri);
        expect(c.dispatched.length, `${c.callId} needed a failover: ${c.dispatched.join(' -> ')}`).toBe(1);
        expect(others).toContain(c.node);
      }
      for (const c of meanwhile) await expectEndedByCallerOnOwner(c, draining);
      // Its own call is still up, so it still runs.
      expect(draining.running(), `${draining.name} stopped before its call ended\n${draining.output().slice(-2000)}`).toBe(true);
    } catch (err) {
      // SIPp and the RTP peer of the long call are not left behind.
      await long.call.cleanup();
      throw err;
    }

    const l = await finishCall(long);
    expectBridged(l);
    expect(l.node).toBe(draining);
    expect(await Promise.race([exitCode, sleep(8000).then(() => 'still running')]), draining.output().slice(-2000)).toBe(0);
    // The shared history, read on another node: the call ended by the caller's BYE.
    await expectEndedByCallerOnOwner(l, draining);
  }, 120_000);
});

describe('deploy/: the files the cluster front ships', () => {
  it.skipIf(front.skip)('kamailio.cfg checks out with its production defaults and the shipped dispatcher.list', () => {
    const r = spawnSync(KAMAILIO_BIN, ['-c', '-f', SHIPPED_CFG, '-A', `DISPATCHER_LIST="${join(DEPLOY, 'kamailio/dispatcher.list')}"`], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
  });

  it('docker-compose.yml parses and agrees with dispatcher.list: three nodes at the listed addresses on one PostgreSQL, the same store URL and secrets, a node id each; Kamailio listening at its own, the repository Dockerfile', async () => {
    const services = await composeServices();
    // No YAML library installed: nothing to parse with.
    if (services === undefined) return;
    expect(Object.keys(services).sort()).toEqual(['haproxy', 'kamailio', 'node1', 'node2', 'node3', 'postgres']);
    const listed = readFileSync(join(DEPLOY, 'kamailio/dispatcher.list'), 'utf8')
      .split('\n')
      .filter((l) => l.trim() && !l.startsWith('#'))
      .map((l) => l.trim().split(/\s+/));
    for (const line of listed) expect(line[0]).toBe('1');
    const ip = (svc: any) => svc.networks.cluster.ipv4_address as string;
    const nodeNames = ['node1', 'node2', 'node3'];
    expect(listed.map((l) => l[1]).sort()).toEqual(nodeNames.map((n) => `sip:${ip(services[n])}:${services[n].environment.CALLBRIDGE_SIP_PORT}`).sort());
    for (const n of nodeNames) {
      const svc = services[n];
      expect(existsSync(resolve(DEPLOY, svc.build.context, svc.build.dockerfile))).toBe(true);
      expect(svc.environment.CALLBRIDGE_SIP_ADVERTISE_ADDRESS).toBe(ip(svc));
      // The secrets that make nodes interchangeable come from one place.
      expect(svc.environment.CALLBRIDGE_SIP_DIGEST_SECRET).toMatch(/^\$\{CALLBRIDGE_SIP_DIGEST_SECRET:\?/);
      expect(svc.stop_signal).toBe('SIGTERM');
      expect(Number.parseInt(svc.stop_grace_period, 10)).toBeGreaterThan(Number(svc.environment.CALLBRIDGE_DRAIN_DEADLINE_SECS));
    }
    // One store and the same secrets everywhere (what makes the nodes interchangeable), each node
    // under a name of its own (its lease, the calls it carries).
    const env = (n: string) => services[n].environment as Record<string, string>;
    for (const name of ['CALLBRIDGE_STORE_URL', 'CALLBRIDGE_TOKEN_SECRET', 'CALLBRIDGE_ENCRYPTION_KEY', 'CALLBRIDGE_SIP_DIGEST_SECRET']) {
      const values = new Set(nodeNames.map((n) => env(n)[name]));
      expect([...values], `${name} of ${nodeNames.join(', ')}`).toHaveLength(1);
      expect([...values][0], name).toMatch(/\S/);
    }
    for (const secret of ['CALLBRIDGE_TOKEN_SECRET', 'CALLBRIDGE_ENCRYPTION_KEY']) expect(env('node1')[secret]).toMatch(new RegExp(`^\\$\\{${secret}:\\?`));
    const ids = nodeNames.map((n) => env(n).CALLBRIDGE_CLUSTER_NODE_ID);
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_.-]+$/);
    expect(new Set(ids).size, ids.join(', ')).toBe(nodeNames.length);
    // The URL names the postgres service's address and database, its password from deploy/.env.
    const postgres = services.postgres;
    const storeUrl = env('node1').CALLBRIDGE_STORE_URL!;
    expect(storeUrl).toBe(`postgres://${postgres.environment.POSTGRES_USER}:\${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in deploy/.env}@${ip(postgres)}:5432/${postgres.environment.POSTGRES_DB}`);
    expect(postgres.environment.POSTGRES_PASSWORD).toMatch(/^\$\{POSTGRES_PASSWORD:\?/);
    expect(postgres.image).toMatch(/^postgres:/);
    expect(postgres.volumes.some((v: string) => v.endsWith(':/var/lib/postgresql/data')), JSON.stringify(postgres.volumes)).toBe(true);
    expect(postgres.healthcheck.test).toContain('pg_isready');
    for (const n of nodeNames) expect(services[n].depends_on.postgres, n).toEqual({ condition: 'service_healthy' });
    const kamailio = services.kamailio;
    expect(kamailio.command).toContain(`LISTEN_ADDR=${ip(kamailio)}`);
    expect(existsSync(join(DEPLOY, kamailio.build, 'Dockerfile'))).toBe(true);
    expect(kamailio.volumes).toContain('./kamailio:/etc/kamailio:ro');
  });
});
