/**
 * GET /v1/connection over real sockets: a real daemon, a real `ws` client, and a scripted runtime
 * (this tests the socket layer; the conversation runtime is tested in test/agent/).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { untilAsync } from '../helpers/until.ts';
import { SessionTokens } from '../../src/session/tokens.ts';
import { MAX_CLIENT_FRAME_BYTES, type ServerEvent } from '../../src/session/protocol.ts';
import { transcriptFromRuntime } from '../../src/domain/call.ts';
import { connect, daemonTokens, issue, pcmBase64, rejected, scriptedRuntime, waitFor, wsUrl, type ScriptedRuntime } from './helpers.ts';

describe('GET /v1/connection', () => {
  let d: TestDaemon;
  let rt: ScriptedRuntime;
  let agent: any;
  let version: any;
  beforeAll(async () => {
    rt = scriptedRuntime();
    d = await startTestDaemon({}, undefined, { runtimeFactory: (ctx, io) => rt.factory(ctx, io) });
    agent = (await d.api('POST', '/v1/agents', { name: 'Socket agent' })).body;
    expect((await d.api('PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: 'n1', type: 'tool', name: 'lookup', description: 'd', parameters: [] }] })).status).toBe(200);
    version = (await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' })).body;
    expect((await d.api('POST', `/v1/agents/${agent.id}/versions/${version.id}/publish`)).status).toBe(200);
  });
  afterAll(() => d.close());

  /** A connected session: the client, its scripted runtime, the session id. */
  async function open(body: Record<string, unknown> = {}, extraQuery = '') {
    const t = await issue(d, { agent_id: agent.id, ...body });
    const c = connect(wsUrl(d, t.token, extraQuery));
    await c.opened;
    const s = await rt.session(t.id);
    return { ...t, c, s };
  }
  const call = async (id: string) => (await d.api('GET', `/v1/calls/${id}`)).body;

  it('sends session_started first with the session id, then hands the runtime its context; the call is in progress', async () => {
    const { id, c, s } = await open({ caller_id: 'web-user', first_message: 'Hello!', prompt: 'Be kind', variables: [{ key: 'name', value: 'Ada' }] });
    expect(await c.message(0)).toEqual({ type: 'session_started', data: { id } });
    expect(s.ctx).toMatchObject({
      sessionId: id,
      versionId: version.id,
      callerId: 'web-user',
      firstMessage: 'Hello!',
      prompt: 'Be kind',
      variables: [{ key: 'name', value: 'Ada' }],
      direction: 'web',
      // A web client answers its tool calls itself (phone calls' tools go to the webhook).
      clientAnswersTools: true,
      nodes: [{ id: 'n1', type: 'tool', name: 'lookup', description: 'd', parameters: [] }],
    });
    expect(s.ctx.agent.id).toBe(agent.id);
    expect(s.ctx.orgId).toBe((await d.daemon.store.organizations.byApiKey(d.key))!.id);
    const rec = await call(id);
    expect(rec.status).toBe('in_progress');
    expect(rec.started_at).toBeDefined();
    expect(rec).toMatchObject({ source: 'api', party_number: 'web-user', graph_version_id: version.id, outbound: false });
    expect((await d.daemon.store.sessions.get(id))!.connected_at).not.toBeNull();
    c.ws.close();
    await c.closed;
  });

  it('the runtime context has no overrides when the request had none', async () => {
    const { c, s } = await open();
    expect(s.ctx.firstMessage).toBeUndefined();
    expect(s.ctx.prompt).toBeUndefined();
    expect(s.ctx.callerId).toBe('api-client');
    c.ws.close();
    await c.closed;
  });

  it('input_audio reaches the runtime as the exact samples, in order', async () => {
    const { c, s } = await open();
    const chunks = [[0, 1, -1, 32767, -32768], Array.from({ length: 480 }, (_, i) => ((i * 7919) % 65536) - 32768), [12345]];
    for (const chunk of chunks) c.send({ type: 'input_audio', data: { audio: pcmBase64(chunk) } });
    await waitFor(() => s.audio.length === chunks.length, 3000, 'audio');
    expect(s.audio.map((a) => Array.from(a))).toEqual(chunks);
    c.ws.close();
    await c.closed;
  });

  it('tool_call_output reaches the runtime', async () => {
    const { c, s } = await open();
    c.send({ type: 'tool_call_output', data: { toolCallId: 'call-1', output: '{"ok":true}' } });
    c.send({ type: 'tool_call_output', data: { toolCallId: 'call-2', output: '' } });
    await waitFor(() => s.toolOutputs.length === 2);
    expect(s.toolOutputs).toEqual([
      ['call-1', '{"ok":true}'],
      ['call-2', ''],
    ]);
    c.ws.close();
    await c.closed;
  });

  it('every server event type reaches the client exactly as the runtime sent it', async () => {
    const { c, s } = await open();
    const events: ServerEvent[] = [
      { type: 'session_started', data: { id: 'x' } },
      { type: 'response_audio', data: { turn_id: 't"1', audio: pcmBase64([1, -2, 3]), is_final: false } },
      { type: 'response_audio', data: { turn_id: 't1', audio: '', is_final: true } },
      { type: 'response_text', data: { turn_id: 't1', text: 'Hallo "Welt" ✓\n', is_final: true } },
      { type: 'input_audio_transcript', data: { transcript: 'hi', turn_id: 'u1', is_final: false } },
      { type: 'input_audio_transcript', data: { transcript: 'hi there', is_final: true } },
      { type: 'speech_started', data: { emulated: true } },
      { type: 'speech_stopped', data: {} },
      { type: 'interruption', data: {} },
      { type: 'tool_call', data: { toolCallId: 'c1', toolName: 'lookup', arguments: [{ name: 'q', type: 'resolved', dataType: 'string', description: 'query', required: true, value: 'x' }] } },
      { type: 'session_ended', data: { reason: 'transfer', transfer_number: '+15551234567' } },
    ];
    for (const e of events) s.io.send(e);
    await waitFor(() => c.messages.length === events.length + 1);
    expect(c.messages.slice(1)).toEqual(events);
    // A session_ended sent through io.send is only an event: the session goes on.
    s.io.send({ type: 'speech_stopped', data: {} });
    await c.message(events.length + 1);
    c.ws.close();
    await c.closed;
  });

  it('ignores an unknown message type and goes on', async () => {
    const { c, s, id } = await open();
    c.send({ type: 'conversation.item.create', data: { text: 'x' } });
    c.send({ type: 'conversation.item.create', data: {} });
    c.send({ type: 'ping' });
    c.send({ type: 'input_audio', data: { audio: pcmBase64([7, 8]) } });
    await waitFor(() => s.audio.length === 1);
    expect(Array.from(s.audio[0]!)).toEqual([7, 8]);
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    expect((await call(id)).ended_at).toBeUndefined();
    c.ws.close();
    await c.closed;
  });

  it('client close: runtime closed, record ended with client_closed and the runtime transcript', async () => {
    const { c, s, id } = await open();
    s.transcript.push({ role: 'agent', text: 'Hello!', at: '2026-01-01T00:00:00.000Z', turn_id: 't1' }, { role: 'user', text: 'Bye', at: '2026-01-01T00:00:02.000Z' });
    c.ws.close(4000, 'done');
    await waitFor(() => s.closeCalls > 0, 3000, 'runtime.close');
    const ended = await waitForCall(id, (r) => r.ended_at !== undefined);
    expect(ended).toMatchObject({ status: 'ended', end_status: 'completed', termination_reason: 'client_closed', transcript: transcriptFromRuntime(s.transcript) });
    expect(s.closeCalls).toBe(1);
    await waitFor(() => d.daemon.app.voiceSessions.activeCount() === 0, 3000, 'no active session');
    // Nothing is sent once the client is gone; sending does not throw.
    s.io.send({ type: 'speech_stopped', data: {} });
  });

  it('io.end: session_ended { reason } then close 1000, the end stored; idempotent; later sends dropped; then the analysis, once', async () => {
    const { c, s, id } = await open();
    s.transcript.push({ role: 'agent', text: 'Goodbye', at: '2026-01-01T00:00:00.000Z' });
    let endStoredBeforeAnalysis: boolean | undefined;
    s.analysis = async () => {
      endStoredBeforeAnalysis = (await call(id)).ended_at !== undefined;
      return { summary: 'The caller said goodbye.', extracted_variables: [{ name: 'outcome', type: 'extracted', dataType: 'string', value: null }] };
    };
    s.io.end('agent_hangup');
    s.io.end('timeout');
    s.io.send({ type: 'speech_stopped', data: {} });
    const closed = await c.closed;
    expect(closed.code).toBe(1000);
    expect(c.messages).toEqual([
      { type: 'session_started', data: { id } },
      { type: 'session_ended', data: { reason: 'agent_hangup' } },
    ]);
    expect(await call(id)).toMatchObject({ status: 'ended', end_status: 'completed', termination_reason: 'agent_hangup', transcript: transcriptFromRuntime(s.transcript) });
    expect(s.closeCalls).toBe(0);
    // The analysis is asked for after the end was stored, and stored beside it.
    await untilAsync(async () => (await call(id)).analyzed_at !== undefined, 'analysis stored');
    const rec = await call(id);
    expect(rec).toMatchObject({ summary: 'The caller said goodbye.', extracted_variables: [{ name: 'outcome', type: 'extracted', dataType: 'string', value: null }], termination_reason: 'agent_hangup' });
    expect(endStoredBeforeAnalysis).toBe(true);
    expect(s.analyzeCalls).toBe(1);
  });

  it('shutdown: an analysis still running is given up (aborted, logged) and the daemon closes', async () => {
    const lines: string[] = [];
    const rt2 = scriptedRuntime();
    const d2 = await startTestDaemon({}, undefined, { runtimeFactory: (ctx, io) => rt2.factory(ctx, io) }, lines);
    let aborted = false;
    try {
      const agent2 = (await d2.api('POST', '/v1/agents', { name: 'Hanging analysis' })).body;
      const t = await issue(d2, { agent_id: agent2.id });
      const c = connect(wsUrl(d2, t.token));
      await c.opened;
      const s = await rt2.session(t.id);
      // A model that never answers (its own 30 s bound is longer than the shutdown's grace).
      s.analysis = (signal) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => {
            aborted = true;
            reject(new Error('aborted'));
          }),
        );
      s.transcript.push({ role: 'user', text: 'Hi', at: '2026-01-01T00:00:00.000Z' });
      s.io.end('agent_hangup');
      await c.closed;
      await waitFor(() => s.analyzeCalls === 1, 3000, 'analysis asked for');
    } finally {
      await d2.close();
    }
    expect(rt2.sessions[0]!.analyzeCalls).toBe(1);
    expect(aborted).toBe(true);
    expect(lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'post-call analysis failed: the call record keeps no analysis')).toMatchObject({ level: 40 });
  });

  it('an analysis that fails leaves the record complete and without analysis', async () => {
    const { c, s, id } = await open();
    s.transcript.push({ role: 'user', text: 'Hi', at: '2026-01-01T00:00:00.000Z' });
    s.analysis = () => Promise.reject(new Error('model down'));
    c.ws.close();
    await c.closed;
    await waitFor(() => s.analyzeCalls === 1, 3000, 'analysis asked for');
    await untilAsync(async () => (await call(id)).ended_at !== undefined, 'end stored');
    const rec = await call(id);
    expect(rec).toMatchObject({ status: 'ended', termination_reason: 'client_closed', extracted_variables: [] });
    expect(rec.summary).toBeUndefined();
    expect(rec.analyzed_at).toBeUndefined();
  });

  it('io.end with transfer carries transfer_number; reason error marks the call failed', async () => {
    const a = await open();
    a.s.io.end('transfer', { transferNumber: '+15557654321' });
    expect((await a.c.closed).code).toBe(1000);
    expect(a.c.messages[1]).toEqual({ type: 'session_ended', data: { reason: 'transfer', transfer_number: '+15557654321' } });
    expect(await call(a.id)).toMatchObject({ status: 'ended', end_status: 'completed', termination_reason: 'transfer' });
    const b = await open();
    b.s.io.end('error');
    expect((await b.c.closed).code).toBe(1000);
    expect(await call(b.id)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error' });
  });

  describe('refused before the upgrade (HTTP status, { error }, no handshake)', () => {
    it('401 for a missing, empty, garbage or badly signed token', async () => {
      const t = await issue(d, { agent_id: agent.id });
      const forged = await new SessionTokens(randomBytes(32)).sign({ sessionId: t.id, orgId: t.claims.org, agentId: agent.id, versionId: t.claims.version, jti: t.claims.jti });
      for (const [url, pattern] of [
        [wsUrl(d), /missing/],
        [wsUrl(d, ''), /missing/],
        [wsUrl(d, 'garbage'), /malformed/],
        [wsUrl(d, t.token + 'x'), /signature|malformed/],
        [wsUrl(d, forged.token), /signature/],
        [wsUrl(d, t.token, '&token=' + t.token), /malformed/],
      ] as const) {
        const r = await rejected(url);
        expect(r.status, url).toBe(401);
        expect(r.upgraded).toBe(false);
        expect(r.body.error, url).toMatch(pattern);
      }
      // None of that used the token up.
      const c = connect(wsUrl(d, t.token));
      await c.opened;
      c.ws.close();
      await c.closed;
    });

    it('401 for an expired token (signed with an old iat by the daemon secret)', async () => {
      const t = await issue(d, { agent_id: agent.id });
      const old = await daemonTokens(d).sign({
        sessionId: t.id,
        orgId: t.claims.org,
        agentId: agent.id,
        versionId: t.claims.version,
        jti: t.claims.jti,
        iat: Math.floor(Date.now() / 1000) - 601,
      });
      const r = await rejected(wsUrl(d, old.token));
      expect(r.status).toBe(401);
      expect(r.body.error).toMatch(/expired/);
      // The same secret signing a fresh token for that session works: only the age was wrong.
      const fresh = await daemonTokens(d).sign({ sessionId: t.id, orgId: t.claims.org, agentId: agent.id, versionId: t.claims.version, jti: t.claims.jti });
      const c = connect(wsUrl(d, fresh.token));
      await c.opened;
      c.ws.close();
      await c.closed;
    });

    it('401 for a token that was already used, and for one whose jti is not the session’s', async () => {
      const { token, c, claims } = await open();
      const r = await rejected(wsUrl(d, token));
      expect(r.status).toBe(401);
      expect(r.body.error).toMatch(/already used/);
      c.ws.close();
      await c.closed;
      expect((await rejected(wsUrl(d, token))).status).toBe(401);
      const t2 = await issue(d, { agent_id: agent.id });
      const otherJti = await daemonTokens(d).sign({ sessionId: t2.id, orgId: claims.org, agentId: agent.id, versionId: claims.version });
      expect((await rejected(wsUrl(d, otherJti.token))).status).toBe(401);
    });

    it('agentId / versionId query parameters must match the token (401), matching ones are accepted', async () => {
      const other = (await d.api('POST', '/v1/agents', { name: 'Other' })).body;
      const t = await issue(d, { agent_id: agent.id });
      for (const q of [`&agentId=${other.id}`, `&versionId=${other.id}`, `&agentId=${agent.id}&versionId=nope`, '&agentId=']) {
        const r = await rejected(wsUrl(d, t.token, q));
        expect(r.status, q).toBe(401);
        expect(r.body.error).toMatch(/does not match/);
      }
      const c = connect(wsUrl(d, t.token, `&agentId=${agent.id}&versionId=${version.id}`));
      await c.opened;
      expect(await c.message(0)).toEqual({ type: 'session_started', data: { id: t.id } });
      c.ws.close();
      await c.closed;
    });

    it('404 when the agent became inactive or was deleted after the token was issued', async () => {
      const a = (await d.api('POST', '/v1/agents', { name: 'Fickle' })).body;
      const t1 = await issue(d, { agent_id: a.id });
      const t2 = await issue(d, { agent_id: a.id });
      expect((await d.api('PATCH', `/v1/agents/${a.id}`, { status: 'inactive' })).status).toBe(200);
      const r = await rejected(wsUrl(d, t1.token));
      expect(r.status).toBe(404);
      expect(r.body.error).toMatch(/agent/);
      expect((await d.api('DELETE', `/v1/agents/${a.id}`)).status).toBe(204);
      expect((await rejected(wsUrl(d, t2.token))).status).toBe(404);
    });

    it('needs no API key, and a plain GET without the handshake gets 426 without using the token', async () => {
      const t = await issue(d, { agent_id: agent.id });
      const plain = await fetch(`${d.url}/v1/connection?token=${t.token}`);
      expect(plain.status).toBe(426);
      expect(((await plain.json()) as any).error).toMatch(/WebSocket/);
      const noToken = await fetch(`${d.url}/v1/connection`);
      expect(noToken.status).toBe(401);
      const c = connect(wsUrl(d, t.token));
      await c.opened;
      c.ws.close();
      await c.closed;
    });
  });

  it('two connections racing with one token: exactly one session starts', async () => {
    for (let round = 0; round < 5; round++) {
      const t = await issue(d, { agent_id: agent.id });
      const clients = [connect(wsUrl(d, t.token)), connect(wsUrl(d, t.token)), connect(wsUrl(d, t.token))];
      const outcomes = await Promise.all(
        clients.map(async (c) => {
          try {
            await c.opened;
          } catch {
            return 'refused';
          }
          const first = await Promise.race([c.message(0).then(() => 'started'), c.closed.then((x) => `closed ${x.code}`)]);
          return first;
        }),
      );
      expect(outcomes.filter((o) => o === 'started'), outcomes.join()).toHaveLength(1);
      expect(outcomes.every((o) => o === 'started' || o === 'refused' || o === 'closed 1008'), outcomes.join()).toBe(true);
      expect(rt.sessions.filter((s) => s.ctx.sessionId === t.id)).toHaveLength(1);
      for (const c of clients) c.ws.close();
      await Promise.all(clients.map((c) => c.closed));
    }
  });

  it('the loser of a race past the token check is closed 1008 and starts nothing', async () => {
    const { token, id, c } = await open();
    // Make the check before the upgrade see the session as unconnected, as a connection racing
    // the first one would: only the claim after the upgrade can stop it now.
    const repo = d.daemon.store.sessions;
    const realGet = repo.get.bind(repo);
    repo.get = async (sid: string) => {
      const r = await realGet(sid);
      return r && sid === id ? { ...r, connected_at: null } : r;
    };
    try {
      const loser = connect(wsUrl(d, token));
      await loser.opened;
      expect(await loser.closed).toEqual({ code: 1008, reason: 'session token already used' });
      expect(loser.messages).toEqual([]);
    } finally {
      repo.get = realGet;
    }
    expect(rt.sessions.filter((s) => s.ctx.sessionId === id)).toHaveLength(1);
    // The first connection is untouched.
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    expect((await call(id)).ended_at).toBeUndefined();
    c.ws.close();
    await c.closed;
  });

  describe('malformed client frames close the session', () => {
    const cases: Array<[string, string, RegExp]> = [
      ['malformed JSON', '{"type":"input_audio",', /malformed JSON/],
      ['an array', '[1,2]', /JSON object/],
      ['a string', '"input_audio"', /JSON object/],
      ['no type', '{"data":{}}', /type/],
      ['input_audio without data', '{"type":"input_audio"}', /data must be an object/],
      ['audio of the wrong type', '{"type":"input_audio","data":{"audio":42}}', /data\.audio/],
      ['audio that is not base64', '{"type":"input_audio","data":{"audio":"not base64!"}}', /base64/],
      ['an odd byte count', `{"type":"input_audio","data":{"audio":"${Buffer.from([1, 2, 3]).toString('base64')}"}}`, /odd byte count/],
      ['tool_call_output without output', '{"type":"tool_call_output","data":{"toolCallId":"c1"}}', /data\.output/],
      ['tool_call_output with a numeric id', '{"type":"tool_call_output","data":{"toolCallId":1,"output":"x"}}', /data\.toolCallId/],
    ];
    for (const [name, frame, reason] of cases) {
      it(`1007 for ${name}`, async () => {
        const { c, s, id } = await open();
        c.send(frame);
        const closed = await c.closed;
        expect(closed.code).toBe(1007);
        expect(closed.reason).toMatch(reason);
        expect(s.audio).toHaveLength(0);
        expect(s.toolOutputs).toHaveLength(0);
        await waitFor(() => s.closeCalls === 1, 3000, 'runtime.close');
        expect(await call(id)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error' });
      });
    }

    it('1003 for a binary frame', async () => {
      const { c, s, id } = await open();
      c.ws.send(Buffer.from(new Int16Array([1, 2, 3]).buffer));
      const closed = await c.closed;
      expect(closed.code).toBe(1003);
      expect(closed.reason).toBe('binary frames are not accepted: send JSON text');
      expect(s.audio).toHaveLength(0);
      expect(await call(id)).toMatchObject({ termination_reason: 'error' });
    });

    it('1009 for a frame over 1 MiB; one just under 1 MiB is accepted', async () => {
      const ok = await open();
      // The largest input_audio that fits: the JSON around the audio counts too. 8 base64
      // characters are 6 bytes, 3 samples.
      const audioLen = MAX_CLIENT_FRAME_BYTES - '{"type":"input_audio","data":{"audio":""}}'.length;
      const fits = 'AAAAAAAA'.repeat(Math.floor(audioLen / 8));
      const frame = `{"type":"input_audio","data":{"audio":"${fits}"}}`;
      expect(MAX_CLIENT_FRAME_BYTES - frame.length).toBeLessThan(8);
      ok.c.send(frame);
      await waitFor(() => ok.s.audio.length === 1, 5000, 'big audio');
      expect(ok.s.audio[0]!.length).toBe((fits.length / 8) * 3);
      ok.c.ws.close();
      await ok.c.closed;

      const { c, s, id } = await open();
      c.send(`{"type":"input_audio","data":{"audio":"${'AAAA'.repeat(MAX_CLIENT_FRAME_BYTES / 4)}"}}`);
      const closed = await c.closed;
      expect(closed.code).toBe(1009);
      expect(s.audio).toHaveLength(0);
      await waitFor(() => s.closeCalls === 1, 3000, 'runtime.close');
      expect(await call(id)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error' });
    });
  });

  async function waitForCall(id: string, pred: (r: any) => boolean): Promise<any> {
    const deadline = Date.now() + 3000;
    for (;;) {
      const r = await call(id);
      if (pred(r)) return r;
      if (Date.now() > deadline) throw new Error(`call ${id} never matched: ${JSON.stringify(r)}`);
      await new Promise((res) => setTimeout(res, 10));
    }
  }
});

describe('GET /v1/connection: runtime failures, liveness, slow clients, shutdown', () => {
  it('without a runtime factory: session_started, session_ended error, close 1011 "no runtime configured"', async () => {
    const d = await startTestDaemon({}, undefined, { runtimeFactory: null });
    try {
      const agent = (await d.api('POST', '/v1/agents', { name: 'A' })).body;
      const t = await issue(d, { agent_id: agent.id });
      const c = connect(wsUrl(d, t.token));
      const closed = await c.closed;
      expect(closed).toEqual({ code: 1011, reason: 'no runtime configured' });
      expect(c.messages).toEqual([
        { type: 'session_started', data: { id: t.id } },
        { type: 'session_ended', data: { reason: 'error' } },
      ]);
      expect((await d.api('GET', `/v1/calls/${t.id}`)).body).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error' });
      expect(d.daemon.app.voiceSessions.activeCount()).toBe(0);
    } finally {
      await d.close();
    }
  });

  it('a runtime that throws (at start or on input): session_ended error, close 1011', async () => {
    let throwOnInput = false;
    const rt = scriptedRuntime((s) => {
      if (s.ctx.callerId === 'boom') throw new Error('no provider');
    });
    const d = await startTestDaemon({}, undefined, {
      runtimeFactory: (ctx, io) => {
        const r = rt.factory(ctx, io);
        return {
          ...r,
          inputAudio: (pcm) => {
            if (throwOnInput) throw new Error('decoder broke');
            r.inputAudio(pcm);
          },
        };
      },
    });
    try {
      const agent = (await d.api('POST', '/v1/agents', { name: 'A' })).body;
      const t = await issue(d, { agent_id: agent.id, caller_id: 'boom' });
      const c = connect(wsUrl(d, t.token));
      expect(await c.closed).toEqual({ code: 1011, reason: 'runtime failed to start' });
      expect(c.messages.map((m) => m.type)).toEqual(['session_started', 'session_ended']);

      const t2 = await issue(d, { agent_id: agent.id });
      const c2 = connect(wsUrl(d, t2.token));
      await c2.message(0);
      throwOnInput = true;
      c2.send({ type: 'input_audio', data: { audio: pcmBase64([1]) } });
      expect((await c2.closed).code).toBe(1011);
      expect(c2.messages[1]).toEqual({ type: 'session_ended', data: { reason: 'error' } });
      const s2 = await rt.session(t2.id);
      expect(s2.closeCalls).toBe(1);
      expect((await d.api('GET', `/v1/calls/${t2.id}`)).body).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error' });
      expect(d.daemon.app.voiceSessions.activeCount()).toBe(0);
    } finally {
      await d.close();
    }
  });

  it('ends a session whose client stopped answering pings, and one whose client stopped reading', async () => {
    const rt = scriptedRuntime();
    const d = await startTestDaemon({}, undefined, { runtimeFactory: rt.factory, sessionServer: { pingIntervalMs: 100, maxBufferedBytes: 256 * 1024 } });
    try {
      const agent = (await d.api('POST', '/v1/agents', { name: 'A' })).body;
      // Alive: answers pings (ws does), so it outlives several intervals.
      const alive = await issue(d, { agent_id: agent.id });
      const ca = connect(wsUrl(d, alive.token));
      await ca.message(0);

      const silent = await issue(d, { agent_id: agent.id });
      const cs = connect(wsUrl(d, silent.token));
      await cs.message(0);
      // Stop reading: no pongs go back.
      (cs.ws as any)._socket.pause();
      const ss = await rt.session(silent.id);
      await waitFor(() => ss.closeCalls === 1, 5000, 'ping timeout');
      expect(await d.daemon.store.calls.get(ss.ctx.orgId, silent.id)).toMatchObject({ termination_reason: 'client_closed', status: 'ended', end_status: 'completed' });
      expect((await d.daemon.store.calls.get(ss.ctx.orgId, alive.id))!.ended_at).toBeNull();

      // Stopped reading while the runtime keeps sending: bounded, then ended with reason error.
      const slow = await issue(d, { agent_id: agent.id });
      const cl = connect(wsUrl(d, slow.token));
      await cl.message(0);
      (cl.ws as any)._socket.pause();
      const sl = await rt.session(slow.id);
      const chunk = pcmBase64(new Array(24000).fill(1000));
      for (let i = 0; i < 2000 && sl.closeCalls === 0; i++) {
        sl.io.send({ type: 'response_audio', data: { turn_id: 't', audio: chunk, is_final: false } });
        if (i % 20 === 19) await new Promise((r) => setTimeout(r, 1));
      }
      await waitFor(() => sl.closeCalls === 1, 5000, 'slow client end');
      expect(await d.daemon.store.calls.get(sl.ctx.orgId, slow.id)).toMatchObject({ termination_reason: 'error', status: 'ended', end_status: 'failed' });
      expect((await d.daemon.store.calls.get(ss.ctx.orgId, alive.id))!.ended_at).toBeNull();
      ca.ws.close();
      await ca.closed;
    } finally {
      await d.close();
    }
  });

  it('daemon shutdown: new connections 503 while draining; open sessions get session_ended error and close 1001, stored', async () => {
    const rt = scriptedRuntime();
    const d = await startTestDaemon({ drain: { deadline_secs: 1 } }, undefined, { runtimeFactory: rt.factory });
    const agent = (await d.api('POST', '/v1/agents', { name: 'A' })).body;
    const t = await issue(d, { agent_id: agent.id });
    const waiting = await issue(d, { agent_id: agent.id });
    const c = connect(wsUrl(d, t.token));
    await c.message(0);
    const s = await rt.session(t.id);
    s.transcript.push({ role: 'user', text: 'still here', at: '2026-01-01T00:00:00.000Z' });
    const stopping = d.stop();
    // During the drain the open session goes on, a new one is refused.
    const r = await rejected(wsUrl(d, waiting.token));
    expect(r.status).toBe(503);
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    const closed = await c.closed;
    await stopping;
    expect(closed.code).toBe(1001);
    expect(c.messages[1]).toEqual({ type: 'session_ended', data: { reason: 'error' } });
    expect(s.closeCalls).toBe(1);
    const d2 = await d.restart();
    try {
      const rec = (await d2.api('GET', `/v1/calls/${t.id}`)).body;
      // The transcript shows the end was stored by the shutdown, not guessed at the next start.
      expect(rec).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error', transcript: transcriptFromRuntime(s.transcript) });
    } finally {
      await d2.close();
    }
  });
});
