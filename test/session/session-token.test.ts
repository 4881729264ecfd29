/**
 * POST /v1/session-token: the stored session and call record, defaults, claims, the webrtc
 * credentials (a LiveKit access token), and the token library itself.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { SESSION_TOKEN_TTL_SECS, SessionTokens, TOKEN_SECRET_FILE } from '../../src/session/tokens.ts';
import { daemonTokens, issue } from './helpers.ts';

const MISSING = '00000000-0000-4000-8000-000000000000';

describe('POST /v1/session-token', () => {
  let d: TestDaemon;
  let agent: any;
  beforeAll(async () => {
    d = await startTestDaemon();
    agent = (await d.api('POST', '/v1/agents', { name: 'Talker' })).body;
  });
  afterAll(() => d.close());

  it('stores the session and its call record before answering; caller_id defaults to api-client', async () => {
    const r = await d.api('POST', '/v1/session-token', { agent_id: agent.id });
    expect(r.status).toBe(200);
    expect(Object.keys(r.body)).toEqual(['token']);
    const id = decodeJwt(r.body.token).sub as string;
    const call = await d.api('GET', `/v1/calls/${id}`);
    expect(call.status).toBe(200);
    expect(call.body).toMatchObject({ id, agent_id: agent.id, direction: 'web', source: 'api', status: 'started', party_number: 'api-client', from: 'api-client', to: 'Talker', outbound: false, transcript: { entries: [] } });
    for (const k of ['started_at', 'ended_at', 'termination_reason', 'graph_version_id']) expect(call.body, k).not.toHaveProperty(k);
    const s = (await d.daemon.store.sessions.get(id))!;
    expect(s).toMatchObject({ agent_id: agent.id, version_id: null, caller_id: 'api-client', transport: 'websocket', chat_id: null, first_message: null, prompt: null, variables: [], scopes: ['voice'], connected_at: null });
    expect((await d.api('GET', '/v1/calls?source=api&outbound=false')).body.calls.map((c: any) => c.id)).toContain(id);
  });

  it('keeps the overrides, variables, caller_id and chat_id of the request', async () => {
    const chatId = '11111111-1111-4111-8111-111111111111';
    const t = await issue(d, { agent_id: agent.id, caller_id: '+15551234567', first_message: 'Hi there', prompt: 'Be brief', chat_id: chatId, variables: [{ key: 'name', value: 'Ada' }] });
    expect(await d.daemon.store.sessions.get(t.id)).toMatchObject({ caller_id: '+15551234567', first_message: 'Hi there', prompt: 'Be brief', chat_id: chatId, variables: [{ key: 'name', value: 'Ada' }] });
    expect((await d.api('GET', `/v1/calls/${t.id}`)).body.from).toBe('+15551234567');
  });

  it('uses the active published version by default, the one asked for when given', async () => {
    const a = (await d.api('POST', '/v1/agents', { name: 'Versioned' })).body;
    const v1 = (await d.api('POST', `/v1/agents/${a.id}/versions`, { tag: 'one' })).body;
    const v2 = (await d.api('POST', `/v1/agents/${a.id}/versions`, { tag: 'two' })).body;
    expect((await d.api('POST', `/v1/agents/${a.id}/versions/${v1.id}/publish`)).status).toBe(200);
    const byDefault = await issue(d, { agent_id: a.id });
    expect(byDefault.claims.version).toBe(v1.id);
    expect((await d.daemon.store.sessions.get(byDefault.id))!.version_id).toBe(v1.id);
    const chosen = await issue(d, { agent_id: a.id, version_id: v2.id });
    expect(chosen.claims.version).toBe(v2.id);
    // The call record names the version as graph_version_id.
    expect((await d.api('GET', `/v1/calls/${byDefault.id}`)).body.graph_version_id).toBe(v1.id);
    expect((await d.api('GET', `/v1/calls/${chosen.id}`)).body.graph_version_id).toBe(v2.id);
    // No published version: null in the claims and the record.
    expect((await issue(d, { agent_id: agent.id })).claims.version).toBeNull();
  });

  it('404 for a missing or inactive agent and a version of another agent; nothing stored', async () => {
    const before = (await d.api('GET', '/v1/calls')).body.pagination.total;
    expect((await d.api('POST', '/v1/session-token', { agent_id: MISSING })).status).toBe(404);
    const off = (await d.api('POST', '/v1/agents', { name: 'Off', status: 'inactive' })).body;
    const r = await d.api('POST', '/v1/session-token', { agent_id: off.id });
    expect(r.status).toBe(404);
    expect(typeof r.body.error).toBe('string');
    const other = (await d.api('POST', '/v1/agents', { name: 'Other' })).body;
    const v = (await d.api('POST', `/v1/agents/${other.id}/versions`, { tag: 'x' })).body;
    expect((await d.api('POST', '/v1/session-token', { agent_id: agent.id, version_id: v.id })).status).toBe(404);
    // another organization's agent is not found either
    expect((await d.api('POST', '/v1/session-token', { agent_id: agent.id }, { key: await d.newOrgKey('other') })).status).toBe(404);
    expect((await d.api('GET', '/v1/calls')).body.pagination.total).toBe(before);
  });

  it('claims: sub, org, agent, version, scopes (chat adds "chat"), jti, iat, exp = iat + 600, HS256 with the data-dir secret', async () => {
    const plain = await issue(d, { agent_id: agent.id });
    const chat = await issue(d, { agent_id: agent.id, chat: true });
    const noChat = await issue(d, { agent_id: agent.id, chat: false });
    expect(plain.claims.scopes).toEqual(['voice']);
    expect(noChat.claims.scopes).toEqual(['voice']);
    expect(chat.claims.scopes).toEqual(['voice', 'chat']);
    expect((await d.daemon.store.sessions.get(chat.id))!.scopes).toEqual(['voice', 'chat']);
    const orgId = (await d.daemon.store.organizations.byApiKey(d.key))!.id;
    expect(plain.claims).toMatchObject({ org: orgId, agent: agent.id, version: null });
    expect(plain.claims.exp - plain.claims.iat).toBe(SESSION_TOKEN_TTL_SECS);
    expect(SESSION_TOKEN_TTL_SECS).toBe(600);
    expect(plain.claims.jti).not.toBe(chat.claims.jti);
    expect(decodeProtectedHeader(plain.token).alg).toBe('HS256');
    const s = (await d.daemon.store.sessions.get(plain.id))!;
    expect(s.token_jti).toBe(plain.claims.jti);
    expect(s.token_expires_at).toBe(new Date(plain.claims.exp * 1000).toISOString());
    const v = await daemonTokens(d).verify(plain.token);
    expect(v.ok).toBe(true);
    // The generated secret is private to the daemon's user.
    expect(statSync(join(d.dataDir, TOKEN_SECRET_FILE)).mode & 0o777).toBe(0o600);
  });

  it('503 for webrtc with no media server configured, never a token', async () => {
    const r = await d.api('POST', '/v1/session-token', { agent_id: agent.id, transport: 'webrtc' });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatch(/webrtc/);
    expect(r.body.token).toBeUndefined();
  });
});

describe('POST /v1/session-token with a WebRTC media server and a configured token secret', () => {
  const secret = randomBytes(32).toString('base64');
  const apiSecret = 'lk-secret-0123456789abcdef0123456789';
  let d: TestDaemon;
  let partial: TestDaemon;
  let agent: any;
  beforeAll(async () => {
    d = await startTestDaemon({ security: { token_secret: secret }, webrtc: { url: 'wss://media.example.test', api_key: 'APIkey123', api_secret: apiSecret } });
    partial = await startTestDaemon({ webrtc: { url: 'wss://media.example.test', api_key: 'APIkey123' } });
    agent = (await d.api('POST', '/v1/agents', { name: 'Room agent' })).body;
  });
  afterAll(async () => {
    await d.close();
    await partial.close();
  });

  it('503 when the media server key or secret is missing', async () => {
    const a = (await partial.api('POST', '/v1/agents', { name: 'x' })).body;
    expect((await partial.api('POST', '/v1/session-token', { agent_id: a.id, transport: 'webrtc' })).status).toBe(503);
  });

  it('answers token, room, identity, url and a LiveKit access token; caller_id defaults to the identity', async () => {
    const r = await d.api('POST', '/v1/session-token', { agent_id: agent.id, transport: 'webrtc' });
    expect(r.status).toBe(200);
    const { token, room, identity, url, webrtc_token } = r.body;
    const id = decodeJwt(token).sub as string;
    expect(room).toBe(`callbridge-${id}`);
    expect(identity).toMatch(/^caller-[0-9a-f]{16}$/);
    expect(url).toBe('wss://media.example.test');
    const { payload, protectedHeader } = await jwtVerify(webrtc_token, new TextEncoder().encode(apiSecret), { issuer: 'APIkey123', subject: identity });
    expect(protectedHeader.alg).toBe('HS256');
    expect(payload.video).toEqual({ room, roomJoin: true, canPublish: true, canSubscribe: true });
    expect(payload.exp! - payload.nbf!).toBe(600);
    expect(await d.daemon.store.sessions.get(id)).toMatchObject({ transport: 'webrtc', caller_id: identity });
    expect((await d.api('GET', `/v1/calls/${id}`)).body.from).toBe(identity);
    // An explicit caller_id wins; identities differ per request.
    const r2 = await d.api('POST', '/v1/session-token', { agent_id: agent.id, transport: 'webrtc', caller_id: '+4930123' });
    expect(r2.body.identity).not.toBe(identity);
    expect((await d.daemon.store.sessions.get(decodeJwt(r2.body.token).sub as string))!.caller_id).toBe('+4930123');
  });

  it('signs session tokens with the configured security.token_secret', async () => {
    const t = await issue(d, { agent_id: agent.id });
    expect((await new SessionTokens(Buffer.from(secret, 'base64')).verify(t.token)).ok).toBe(true);
    expect(await new SessionTokens(randomBytes(32)).verify(t.token)).toEqual({ ok: false, reason: 'bad_signature' });
  });
});

describe('SessionTokens', () => {
  const secret = randomBytes(32);
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const tokens = new SessionTokens(secret, () => clock);
  const base = { sessionId: 's-1', orgId: 'o-1', agentId: 'a-1', versionId: 'v-1' };

  it('verifies what it signed, with every claim', async () => {
    const issued = await tokens.sign({ ...base, chat: true });
    const v = await tokens.verify(issued.token);
    expect(v).toEqual({ ok: true, claims: issued.claims });
    expect(issued.claims).toMatchObject({ sub: 's-1', org: 'o-1', agent: 'a-1', version: 'v-1', scopes: ['voice', 'chat'] });
    expect(issued.expiresAt).toBe('2026-01-01T00:10:00.000Z');
  });

  it('expired after 10 minutes, not before', async () => {
    const issued = await tokens.sign(base);
    clock += 599_000;
    expect((await tokens.verify(issued.token)).ok).toBe(true);
    clock += 2_000;
    expect(await tokens.verify(issued.token)).toEqual({ ok: false, reason: 'expired' });
  });

  it('bad signature, malformed text, alg none, and missing claims', async () => {
    const issued = await tokens.sign(base);
    expect(await new SessionTokens(randomBytes(32), () => clock).verify(issued.token)).toEqual({ ok: false, reason: 'bad_signature' });
    const [h, p, sig] = issued.token.split('.');
    const tampered = JSON.parse(Buffer.from(p!, 'base64url').toString());
    tampered.agent = 'a-2';
    expect(await tokens.verify(`${h}.${Buffer.from(JSON.stringify(tampered)).toString('base64url')}.${sig}`)).toEqual({ ok: false, reason: 'bad_signature' });
    for (const junk of ['', 'garbage', 'a.b.c', `${h}.${p}`]) expect(await tokens.verify(junk), junk).toEqual({ ok: false, reason: 'malformed' });
    const none = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${p}.`;
    expect(await tokens.verify(none)).toEqual({ ok: false, reason: 'malformed' });
    // Signed with the right secret but without the session claims.
    const { SignJWT } = await import('jose');
    const bare = await new SignJWT({ sub: 'x' }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt(Math.floor(clock / 1000)).setExpirationTime(Math.floor(clock / 1000) + 60).sign(secret);
    expect(await tokens.verify(bare)).toEqual({ ok: false, reason: 'malformed' });
  });
});
