/**
 * Upstream mode of the call bridge (bridge.upstream_url): with the upstream URL pointing at a
 * second daemon instance, the bridge must work through the public WebSocket protocol alone.
 * Two daemons on loopback:
 *
 *   SIPp (PBX, ACL trunk) --SIP--> A (SIP + bridge, upstream_url = B) --POST /v1/session-token,
 *   test RTP peer <------RTP------>                                       WebSocket /v1/connection--> B
 *                                                                         (voice server, SIP off)
 *
 * A call to A is answered, the caller hears B's agent's first message (RTP energy: one talk
 * spurt of real speech), B's GET /v1/calls shows the WEB session (the public API cannot say
 * "phone") with B's first message in its transcript, and A keeps only the phone-call record
 * (same id, direction inbound, trunk, from/to) with no session row: A's own /v1/connection never
 * saw the call. The routed agent is given a DIFFERENT first message in A, so the transcript shows
 * which server ran the conversation.
 * Refusal: an A whose upstream key is wrong refuses the call with 503 and logs why (HTTP 401).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import { startDaemon, INITIAL_KEY_FILE, type Daemon } from '../../src/main.ts';
import { tokenSubject } from '../../src/bridge/upstream-session-opener.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { placeBridgeCall, type BridgeCall } from '../interop/bridge-harness.ts';
import { describeSpurts } from '../interop/rtp-peer.ts';
import { sippAvailable, startSipp } from '../interop/sipp.ts';

const NUMBER = '+15550009001';
const CALLER = '+15559999001';
const B_FIRST = 'Hello, this is the upstream agent speaking.';
const A_FIRST = 'This message lives only in the bridge daemon.';
const sipp = sippAvailable();

/**
 * The routed agent must exist in both daemons with the same id (deployments keep agents in sync
 * by id: docs/bridge.md). The public API always generates a new id on create, so the test
 * creates the agent in B through the API and copies it into A's store directly, with another
 * first message (to tell which server ran the conversation).
 */
async function mirrorAgent(a: TestDaemon, agent: Record<string, any>): Promise<void> {
  const orgId = (await a.api('GET', '/v1/organization')).body.id as string;
  const { id, name, status, phone_number_id: _p, created_at, updated_at: _u, ...settings } = agent;
  await a.daemon.store.agents.insert({ id, org_id: orgId, name, status, phone_number_id: null, settings: { ...settings, first_message: A_FIRST } as any, created_at });
}

async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const list = (body: any): any[] => body.calls;

describe('upstream session opener: token subject', () => {
  it('reads the uuid sub of a JWT without verifying it; anything else is undefined', () => {
    const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const sub = '6f1c2a9e-3b4d-4e5f-8a9b-0c1d2e3f4a5b';
    expect(tokenSubject(`${enc({ alg: 'HS256' })}.${enc({ sub })}.sig`)).toBe(sub);
    expect(tokenSubject(`${enc({ alg: 'HS256' })}.${enc({ sub: 'x' })}.sig`)).toBeUndefined();
    expect(tokenSubject('not-a-jwt')).toBeUndefined();
    expect(tokenSubject('a.%%%.c')).toBeUndefined();
  });

  it('config: upstream_url needs upstream_api_key', () => {
    expect(() => loadConfig({ bridge: { upstream_url: 'http://127.0.0.1:9' } }, {})).toThrow(/bridge\.upstream_api_key is required/);
    expect(() => loadConfig({ bridge: { upstream_url: 'ws://127.0.0.1:9', upstream_api_key: 'k' } }, {})).toThrow(/upstream_url/);
    expect(loadConfig({ bridge: { upstream_url: 'http://127.0.0.1:9', upstream_api_key: 'k' } }, {}).bridge.upstream_timeout_ms).toBe(5000);
  });
});

describe.skipIf(sipp.skip)(`call bridge to an upstream voice server (two daemons)${sipp.ok ? '' : `: skipped, ${sipp.reason}`}`, () => {
  let b: TestDaemon;
  let a: TestDaemon;
  let agent: Record<string, any>;
  let trunkId: string;

  beforeAll(async () => {
    b = await startTestDaemon({ sip: { enabled: false } });
    a = await startTestDaemon({ rtp: { address: '127.0.0.1' }, bridge: { upstream_url: b.url, upstream_api_key: b.key } });
    const created = await b.api('POST', '/v1/agents', { name: 'Upstream desk', first_message: B_FIRST, vad_settings: { start_secs: 0.1, stop_secs: 0.4, silence_timeout_secs: 30 } });
    expect(created.status, created.text).toBe(201);
    agent = created.body;
    await mirrorAgent(a, agent);
    trunkId = (await a.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    const assigned = await a.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agent.id, alternate_number: NUMBER });
    expect(assigned.status, assigned.text).toBe(201);
  }, 30_000);

  afterAll(async () => {
    await a?.close();
    await b?.close();
  });

  it('answers, the caller hears the upstream agent, the upstream records a web session, A only the phone call', async () => {
    let call: BridgeCall | undefined;
    try {
      call = await placeBridgeCall({ scenario: 'bridge-acl', remote: `127.0.0.1:${a.daemon.sip!.port}`, service: NUMBER, caller: CALLER, hangupAfterMs: 6000, timeoutMs: 20_000 });
      const peer = call.peer;
      // The first message: one talk spurt of real speech, over (500 ms quiet) within 5 s.
      await peer.waitFor(() => peer.spurts().some((s) => s.durationMs > 800 && Date.now() - s.lastLoudAt > 700), 5000, "the upstream agent's first message");
      const spurts = peer.spurts();
      expect(spurts.length, describeSpurts(spurts, call.answer.seenAt)).toBe(1);
      expect(spurts[0]!.rmsDb, describeSpurts(spurts, call.answer.seenAt)).toBeGreaterThan(-35);
      expect(peer.foreign()).toEqual([]);
      // Mid-call: the voice socket is B's; A's own /v1/connection carries nothing.
      expect(b.daemon.app.voiceSessions.activeCount()).toBe(1);
      expect(a.daemon.app.voiceSessions.activeCount()).toBe(0);
      const r = await call.proc.result;
      expect(r.code, r.describe()).toBe(0);
      expect(r.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([200]);
    } finally {
      await call?.cleanup();
    }

    // B: the conversation's record, a web session (the public API cannot set direction or trunk).
    const upstream = await waitFor('the ended web session in B', 5000, async () => list((await b.api('GET', '/v1/calls')).body).find((c) => c.from === CALLER && c.ended_at));
    expect(upstream).toMatchObject({ direction: 'web', source: 'api', agent_id: agent.id, from: CALLER, party_number: CALLER, termination_reason: 'client_closed' });
    expect(upstream).not.toHaveProperty('sip_trunk_id');
    expect(upstream.started_at).toBeDefined();
    expect(upstream.transcript.entries[0]).toMatchObject({ role: 'assistant', message: B_FIRST });
    // The call's session variables went to B with the session-token request (docs/bridge.md).
    expect((await b.daemon.store.sessions.get(upstream.id))?.variables).toEqual([
      { key: 'caller_number', value: CALLER },
      { key: 'called_number', value: NUMBER },
      { key: 'trunk_id', value: trunkId },
      { key: 'trunk_name', value: 'pbx acl' },
    ]);

    // A: the phone call's record with the same id, and no voice session of its own.
    const local = list((await a.api('GET', '/v1/calls')).body);
    expect(local).toHaveLength(1);
    expect(local[0]).toMatchObject({ id: upstream.id, direction: 'inbound', source: 'sip', agent_id: agent.id, sip_trunk_id: trunkId, from: CALLER, to: NUMBER, transcript: { entries: [] } });
    // The bridge keeps that record itself in upstream mode: answered, ended with why.
    expect(local[0]).toMatchObject({ status: 'ended', end_status: 'completed', outcome: 'ended_by_user' });
    expect(local[0].started_at).toBeDefined();
    expect(local[0].ended_at).toBeDefined();
    expect(local[0].termination_reason).toMatch(/^caller side ended: remote_bye$/);
    expect(local[0]).not.toHaveProperty('graph_version_id');
    // No session row: A's /v1/connection (which only admits tokens of its own session rows) was
    // never used; A's session server would also have written the transcript on the end.
    expect(await a.daemon.store.sessions.get(upstream.id)).toBeUndefined();
    expect(a.daemon.bridge.active).toBe(0);
  }, 40_000);
});

describe.skipIf(sipp.skip)(`call bridge: upstream refuses${sipp.ok ? '' : `: skipped, ${sipp.reason}`}`, () => {
  let b: TestDaemon;
  let c: Daemon | undefined;
  let dir: string;
  const logLines: string[] = [];

  beforeAll(async () => {
    b = await startTestDaemon({ sip: { enabled: false } });
    dir = mkdtempSync(join(tmpdir(), 'callbridge-test-'));
    const config = loadConfig(
      {
        data_dir: dir,
        http: { host: '127.0.0.1', port: 0 },
        sip: { host: '127.0.0.1', port: 0 },
        rtp: { address: '127.0.0.1' },
        drain: { deadline_secs: 1 },
        log_level: 'info',
        bridge: { upstream_url: b.url, upstream_api_key: 'cbk_not_a_key_of_b' },
      },
      {},
    );
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logLines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
        done();
      },
    });
    c = await startDaemon(config, createLogger('info', sink), () => {});
  }, 30_000);

  afterAll(async () => {
    await c?.close();
    await b?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a wrong upstream key: the call gets 503, the log says the upstream answered 401, and the key is not logged', async () => {
    const key = readFileSync(join(dir, INITIAL_KEY_FILE), 'utf8').trim();
    const api = (method: string, path: string, body?: unknown) =>
      fetch(c!.url + path, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));
    const agent = (await b.api('POST', '/v1/agents', { name: 'Upstream desk' })).body;
    const orgId = (await api('GET', '/v1/organization')).body.id as string;
    const { id, name, status, phone_number_id: _p, created_at, updated_at: _u, ...settings } = agent;
    await c!.store.agents.insert({ id, org_id: orgId, name, status, phone_number_id: null, settings, created_at });
    const trunk = (await api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: id, alternate_number: NUMBER })).status).toBe(201);

    const proc = await startSipp({ scenario: 'bridge-acl', remote: `127.0.0.1:${c!.sip!.port}`, service: NUMBER, keys: { caller: CALLER, media_port: 40_000 }, timeoutMs: 15_000 });
    const r = await proc.result;
    expect(r.statuses('received', 'INVITE').filter((s) => s >= 200), r.describe()).toContain(503);
    const why = logLines.map((l) => JSON.parse(l) as Record<string, any>).find((l) => l.msg === 'could not open a voice session for the call');
    expect(why, logLines.join('\n')).toBeDefined();
    expect(JSON.stringify(why)).toMatch(/HTTP 401/);
    expect(logLines.join('\n')).not.toContain('cbk_not_a_key_of_b');
    expect(list((await api('GET', '/v1/calls')).body)).toEqual([]);
    expect(c!.bridge.active).toBe(0);
  }, 30_000);
});
