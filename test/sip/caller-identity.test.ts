/**
 * Caller identity was once unbounded (a 3,000-character From user was stored whole).
 * An INVITE whose From or To user, display name, or Request-URI user is longer than 128
 * characters is answered 400 at the UAS, before authentication and routing: nothing is stored,
 * and the log line carries the values cut short.
 *
 * A real daemon (an ACL trunk for 127.0.0.1 and an agent on a number) and a raw UDP socket.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLoggedDaemon, WARN, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { startRawSipPeer, type RawInvite } from '../helpers/raw-sip.ts';
import type { SipResponse } from '../../src/sip/message/index.ts';

const NUMBER = '+15550409000';
const LONG = '1'.repeat(3000);
const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let d: LoggedDaemon;

beforeAll(async () => {
  d = await startLoggedDaemon();
  const agent = (await d.api('POST', '/v1/agents', { name: 'Desk', first_message: 'Hello.' })).body;
  const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
  expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER })).status).toBe(201);
});
afterAll(() => d?.close());

async function send(source: string, invite: RawInvite): Promise<SipResponse> {
  const peer = await startRawSipPeer(source);
  try {
    const callId = peer.invite(d.sipPort, invite);
    const end = Date.now() + 3000;
    for (;;) {
      const f = peer.for(callId).find((r) => r.status >= 200);
      if (f) return f;
      if (Date.now() > end) throw new Error(`no final response: ${peer.for(callId).map((r) => r.status).join(', ')}`);
      await delay(5);
    }
  } finally {
    await peer.close();
  }
}

describe('caller identity length', () => {
  it('a 3,000-character From user from an ACL source: 400 "From too long", no call, nothing stored or logged whole', async () => {
    const before = d.lines.length;
    const res = await send('127.0.0.1', { user: NUMBER, from: LONG });
    expect(res.status).toBe(400);
    expect(res.reason).toMatch(/From too long/);
    expect(d.daemon.sip!.ua.calls).toHaveLength(0);
    const calls = (await d.api('GET', '/v1/calls')).body.calls as Array<{ from?: string }>;
    expect(calls.filter((c) => (c.from ?? '').length > 128)).toEqual([]);
    const lines = d.lines.slice(before);
    expect(lines.some((l) => JSON.stringify(l).includes(LONG))).toBe(false);
    const refusal = lines.find((l) => l.status === 400);
    expect(refusal, JSON.stringify(lines)).toBeDefined();
    expect(String(refusal!.from).length).toBeLessThanOrEqual(130);
  });

  it('before authentication: a stranger gets 400, not a 401 challenge', async () => {
    expect((await send('127.0.0.3', { user: NUMBER, from: LONG })).status).toBe(400);
  });

  it.each<[string, RawInvite, RegExp]>([
    ['a From display name', { user: NUMBER, fromName: 'x'.repeat(3000) }, /From too long/],
    ['a To user', { user: NUMBER, to: LONG }, /To too long/],
    ['a Request-URI user', { user: LONG, to: NUMBER }, /Request-URI too long/],
  ])('%s over 128 characters: 400', async (_what, invite, reason) => {
    const res = await send('127.0.0.1', invite);
    expect(res.status).toBe(400);
    expect(res.reason).toMatch(reason);
  });

  it('128 characters are accepted: the call is routed, with the caller as sent', async () => {
    const from = '2'.repeat(128);
    const routed = new Promise<{ from: string }>((resolve) => d.daemon.sip!.ua.once('call', resolve));
    const peer = await startRawSipPeer('127.0.0.1');
    try {
      peer.invite(d.sipPort, { user: NUMBER, from, fromName: 'n'.repeat(128) });
      const call = (await routed) as { from: string; hangup(): void };
      expect(call.from).toBe(from);
      call.hangup();
    } finally {
      await peer.close();
    }
    expect(d.lines.filter((l) => l.level >= WARN && /too long/.test(l.msg))).toHaveLength(0);
  });
});
