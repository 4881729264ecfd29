/**
 * The session records in the store (SessionRepo, CallRepo's session end) on both store backends,
 * and the logs of a session: one line at its start, one at its end, never the token.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Store } from '../../src/store/index.ts';
import type { NewSession } from '../../src/store/sessions.ts';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import { INITIAL_KEY_FILE, startDaemon } from '../../src/main.ts';
import { connect, scriptedRuntime, waitFor } from './helpers.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

forEachStoreBackend((backend) => describe('SessionRepo and the call end', () => {
  let t: TestStore;
  let store: Store;
  let orgId: string;
  let agentId: string;
  beforeAll(async () => {
    // A node id, as the daemon gives it: on PostgreSQL endAbandoned ends only this node's rows.
    t = await openTestStore(backend, undefined, { nodeId: 'node-a' });
    store = t.store;
    orgId = (await store.organizations.createKey('o')).org.id;
    agentId = randomUUID();
    // The settings JSON is not read here; the call row's agent_id needs a real agent row.
    await store.agents.insert({ id: agentId, org_id: orgId, name: 'Agent', status: 'active', phone_number_id: null, settings: {} as never, created_at: '2026-01-01T00:00:00.000Z' });
  });
  afterAll(() => t?.dispose());

  const newSession = (over: Partial<NewSession> = {}): NewSession => ({
    id: randomUUID(),
    org_id: orgId,
    agent_id: agentId,
    version_id: null,
    caller_id: 'api-client',
    transport: 'websocket',
    chat_id: null,
    first_message: null,
    prompt: null,
    variables: [{ key: 'k', value: 'v' }],
    scopes: ['voice'],
    token_jti: 'jti-1',
    token_expires_at: '2026-01-01T00:10:00.000Z',
    created_at: '2026-01-01T00:00:00.000Z',
    call_to: 'Agent',
    ...over,
  });

  it('create writes the session and a started web call row together', async () => {
    const s = await store.sessions.create(newSession());
    expect(s.connected_at).toBeNull();
    expect(s.variables).toEqual([{ key: 'k', value: 'v' }]);
    expect(await store.calls.get(orgId, s.id)).toMatchObject({ direction: 'web', source: 'api', status: 'started', from: 'api-client', to: 'Agent', party_number: 'api-client', created_at: '2026-01-01T00:00:00.000Z', started_at: null });
    // The session's agent version is the call's graph_version_id.
    const versioned = await store.sessions.create(newSession({ version_id: '7c9e6679-7425-40de-944b-e07fc1f90ae7' }));
    expect((await store.calls.get(orgId, versioned.id))!.graph_version_id).toBe('7c9e6679-7425-40de-944b-e07fc1f90ae7');
    expect((await store.calls.get(orgId, s.id))!.graph_version_id).toBeNull();
    // A failing session insert leaves no call row behind (one transaction).
    const dup = newSession({ id: s.id });
    await expect(store.sessions.create(dup)).rejects.toThrow();
    const orphan = newSession({ transport: 'carrier-pigeon' as never });
    await expect(store.sessions.create(orphan)).rejects.toThrow();
    expect(await store.calls.get(orgId, orphan.id)).toBeUndefined();
  });

  it('claim: exactly one winner, only with the right jti, only before expiry', async () => {
    const s = await store.sessions.create(newSession());
    const before = '2026-01-01T00:05:00.000Z';
    expect(await store.sessions.claim(s.id, 'other-jti', before)).toBe(false);
    expect(await store.sessions.claim(s.id, 'jti-1', '2026-01-01T00:10:00.000Z')).toBe(false);
    // Five claims made at once (none awaited before the next is made): one wins (on SQLite the
    // first made; on PostgreSQL they run on several connections, any one of them).
    const results = await Promise.all(Array.from({ length: 5 }, () => store.sessions.claim(s.id, 'jti-1', before)));
    if (backend === 'sqlite') expect(results).toEqual([true, false, false, false, false]);
    else expect(results.filter((won) => won)).toHaveLength(1);
    expect((await store.sessions.get(s.id))!.connected_at).toBe(before);
  });

  it('end: ended, end_status and outcome from the reason, only the first end counts; the analysis once, after the end', async () => {
    const a = await store.sessions.create(newSession());
    expect(await store.calls.markAnswered(a.id, '2026-01-01T00:00:01.000Z')).toBe(true);
    expect(await store.calls.get(orgId, a.id)).toMatchObject({ status: 'in_progress', started_at: '2026-01-01T00:00:01.000Z' });
    const bye = [{ index: 0, role: 'assistant', message: 'bye', type: 'message' as const }];
    const analysis = { summary: 'short call', extracted_variables: [{ name: 'outcome', type: 'extracted' as const, dataType: 'string' as const, value: 'resolved' }] };
    // Not before the end.
    expect(await store.calls.setAnalysis(a.id, analysis, '2026-01-01T00:00:30.000Z')).toBe(false);
    expect(await store.calls.end(a.id, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'agent_hangup', transcript: bye })).toBe(true);
    expect(await store.calls.end(a.id, { ended_at: '2026-01-01T00:02:00.000Z', termination_reason: 'error', transcript: [] })).toBe(false);
    expect(await store.calls.markAnswered(a.id, '2026-01-01T00:03:00.000Z')).toBe(false);
    expect(await store.calls.setAnalysis(a.id, analysis, '2026-01-01T00:01:05.000Z')).toBe(true);
    // Once: a second analysis (another node's, a retry) changes nothing.
    expect(await store.calls.setAnalysis(a.id, { summary: 'other', extracted_variables: [] }, '2026-01-01T00:01:06.000Z')).toBe(false);
    expect(await store.calls.get(orgId, a.id)).toMatchObject({
      status: 'ended',
      end_status: 'completed',
      outcome: 'ended_by_agent',
      termination_reason: 'agent_hangup',
      ended_at: '2026-01-01T00:01:00.000Z',
      transcript: { entries: bye },
      summary: 'short call',
      extracted_variables: analysis.extracted_variables,
      analyzed_at: '2026-01-01T00:01:05.000Z',
    });
    const b = await store.sessions.create(newSession());
    await store.calls.end(b.id, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'error', transcript: [] });
    expect(await store.calls.get(orgId, b.id)).toMatchObject({ status: 'ended', end_status: 'failed', outcome: null });
  });

  it('expireUnused marks unused expired tokens; endAbandoned ends sessions a stopped daemon left open', async () => {
    const unused = await store.sessions.create(newSession({ token_expires_at: '2026-02-01T00:10:00.000Z' }));
    const later = await store.sessions.create(newSession({ token_expires_at: '2026-02-01T00:20:00.000Z' }));
    const open = await store.sessions.create(newSession({ token_expires_at: '2026-02-01T00:10:00.000Z' }));
    expect(await store.sessions.claim(open.id, 'jti-1', '2026-02-01T00:01:00.000Z')).toBe(true);
    await store.calls.markAnswered(open.id, '2026-02-01T00:01:00.000Z');
    expect(await store.sessions.expireUnused('2026-02-01T00:15:00.000Z')).toBeGreaterThanOrEqual(1);
    expect(await store.calls.get(orgId, unused.id)).toMatchObject({ status: 'ended', end_status: 'expired', termination_reason: 'token_expired', ended_at: '2026-02-01T00:10:00.000Z' });
    expect((await store.calls.get(orgId, later.id))!.status).toBe('started');
    expect((await store.calls.get(orgId, open.id))!.status).toBe('in_progress');
    expect(await store.sessions.endAbandoned('2026-02-01T01:00:00.000Z')).toBe(1);
    expect(await store.calls.get(orgId, open.id)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error', ended_at: '2026-02-01T01:00:00.000Z' });
    expect((await store.calls.get(orgId, later.id))!.status).toBe('started');
  });
}));

describe('session logs', () => {
  it('one line at the start and one at the end (reason, duration, counts), never the token', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'callbridge-session-log-'));
    const lines: string[] = [];
    const logger = createLogger('debug', { write: (line: string) => void lines.push(line) });
    const config = loadConfig({ data_dir: dir, http: { host: '127.0.0.1', port: 0 }, sip: { enabled: false }, log_level: 'debug' }, {});
    const rt = scriptedRuntime();
    const daemon = await startDaemon(config, logger, () => {}, { runtimeFactory: rt.factory });
    try {
      const key = readFileSync(join(dir, INITIAL_KEY_FILE), 'utf8').trim();
      const post = async (path: string, body: unknown) =>
        (await fetch(daemon.url + path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })).json() as Promise<any>;
      const agent = await post('/v1/agents', { name: 'Logged' });
      const { token } = await post('/v1/session-token', { agent_id: agent.id });
      // A refused connection logs its request line: without the query string.
      await fetch(`${daemon.url}/v1/connection?token=${token}x`);
      const c = connect(`${daemon.url.replace('http', 'ws')}/v1/connection?token=${token}`);
      const started = await c.message(0);
      c.send({ type: 'input_audio', data: { audio: Buffer.from(new Int16Array([1, 2]).buffer).toString('base64') } });
      c.send({ type: 'mystery', data: {} });
      c.send({ type: 'mystery', data: {} });
      const s = await rt.session(started.data.id);
      await waitFor(() => s.audio.length === 1);
      s.io.end('agent_hangup');
      await c.closed;
      await waitFor(() => lines.some((l) => l.includes('voice session ended')));
      const entries = lines.map((l) => JSON.parse(l));
      const mine = entries.filter((e) => e.sessionId === started.data.id);
      expect(mine.filter((e) => e.msg === 'voice session started')).toHaveLength(1);
      expect(mine.filter((e) => e.msg === 'unknown client message type ignored')).toHaveLength(1);
      const end = mine.filter((e) => e.msg === 'voice session ended');
      expect(end).toHaveLength(1);
      expect(end[0]).toMatchObject({ reason: 'agent_hangup', framesIn: 3, audioSamplesIn: 2, eventsOut: 2 });
      expect(typeof end[0].durationMs).toBe('number');
      const all = lines.join('');
      expect(all).toContain('/v1/connection');
      expect(all).not.toContain(token);
      expect(all).not.toContain(token.split('.')[2]);
    } finally {
      await daemon.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
