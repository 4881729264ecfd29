/**
 * The dial options under the service's names (as its official SDK sends them): `sipTrunkId`, `callerId`, `firstMessage`,
 * `prompt`, with the snake_case names as aliases. What reaches the wire is checked where it
 * shows: the INVITE the daemon sends to the trunk's outbound_host, received on a real UDP socket.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSocket, type Socket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

/** A UDP socket standing in for the carrier: collects the INVITEs sent to it, answers nothing. */
async function startInviteSink(): Promise<{ port: number; invites: string[]; next(ms?: number): Promise<string>; close(): Promise<void> }> {
  const socket: Socket = createSocket('udp4');
  const invites: string[] = [];
  const waiters: Array<(m: string) => void> = [];
  socket.on('message', (buf) => {
    const text = buf.toString('utf8');
    if (!text.startsWith('INVITE ')) return;
    invites.push(text);
    waiters.shift()?.(text);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  let taken = 0;
  return {
    port: (socket.address() as AddressInfo).port,
    invites,
    next(ms = 5000) {
      // Retransmissions repeat an INVITE; each new call has a new Call-ID, so take by order of calls.
      const fresh = () => {
        const seen = new Set<string>();
        const calls = invites.filter((m) => {
          const id = /^Call-ID:\s*(.+)$/im.exec(m)?.[1];
          if (!id || seen.has(id)) return false;
          seen.add(id);
          return true;
        });
        return calls[taken];
      };
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no INVITE reached the trunk')), ms);
        const poll = () => {
          const m = fresh();
          if (m !== undefined) {
            taken++;
            clearTimeout(timer);
            resolve(m);
          } else waiters.push(poll);
        };
        poll();
      });
    },
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

const fromUser = (invite: string) => /^From:[^\n]*<sip:([^@>;]+)@/im.exec(invite)?.[1];

describe('dial options under the service\'s names', () => {
  let d: TestDaemon;
  let sink: Awaited<ReturnType<typeof startInviteSink>>;
  let agentId: string;
  let trunkId: string;

  beforeAll(async () => {
    sink = await startInviteSink();
    d = await startTestDaemon({ sip: { ring_timeout_secs: 2 } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Dialer' })).body.id;
    const trunk = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'], outbound_host: `127.0.0.1:${sink.port}` });
    expect(trunk.status, trunk.text).toBe(201);
    trunkId = trunk.body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, alternate_number: '+15550007000' })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
    await sink?.close();
  });

  const dial = (query: string) => d.api('POST', `/v1/agents/${agentId}/dial${query}`, undefined, { headers: { 'content-type': 'application/json' }, rawBody: '' });

  it('sipTrunkId and callerId reach the wire', async () => {
    const r = await dial(`?number=%2B15551234567&sipTrunkId=${trunkId}&callerId=%2B15550001111&firstMessage=Hi&prompt=Sell`);
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual({ success: true });
    const invite = await sink.next();
    expect(invite).toMatch(/^INVITE sip:\+15551234567@127\.0\.0\.1/);
    expect(fromUser(invite)).toBe('+15550001111');
  });

  it('the snake_case names still work, alone or beside the same value', async () => {
    expect((await dial(`?number=%2B15551234568&sip_trunk_id=${trunkId}&caller_id=%2B15550002222`)).status).toBe(200);
    expect(fromUser(await sink.next())).toBe('+15550002222');
    expect((await dial(`?number=%2B15551234569&sipTrunkId=${trunkId}&sip_trunk_id=${trunkId}&callerId=%2B15550003333&caller_id=%2B15550003333`)).status).toBe(200);
    expect(fromUser(await sink.next())).toBe('+15550003333');
  });

  // The agent id, the service's default, is the fallback only: a dial needs an assignment on the
  // trunk, and an assignment always keeps a number.
  it('without callerId the caller ID is the agent\'s number on the trunk', async () => {
    expect((await dial(`?number=%2B15551234570&sipTrunkId=${trunkId}`)).status).toBe(200);
    expect(fromUser(await sink.next())).toBe('+15550007000');
  });

  it('an option under both names with different values is a 400 naming both, and places no call', async () => {
    // Calls, not datagrams: the earlier tests' unanswered INVITEs are still being retransmitted.
    const calls = () => new Set(sink.invites.map((m) => /^Call-ID:\s*(.+)$/im.exec(m)?.[1])).size;
    const before = calls();
    for (const [query, names] of [
      [`?number=%2B15551234571&sipTrunkId=${trunkId}&sip_trunk_id=00000000-0000-4000-8000-000000000000`, 'sipTrunkId and sip_trunk_id'],
      [`?number=%2B15551234571&sipTrunkId=${trunkId}&callerId=%2B1555&caller_id=%2B1666`, 'callerId and caller_id'],
      [`?number=%2B15551234571&sipTrunkId=${trunkId}&firstMessage=a&first_message=b`, 'firstMessage and first_message'],
    ] as const) {
      const r = await dial(query);
      expect(r.status, query).toBe(400);
      expect(r.body.error).toContain(names);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(calls()).toBe(before);
  });

  it('/v1/openapi.json documents the names and marks the aliases', async () => {
    const r = await d.api('GET', '/v1/openapi.json', undefined, { key: null });
    const params = r.body.paths['/v1/agents/{id}/dial'].post.parameters as Array<{ name: string; description?: string }>;
    const byName = Object.fromEntries(params.map((p) => [p.name, p.description ?? '']));
    for (const name of ['number', 'destination', 'sipTrunkId', 'callerId', 'firstMessage', 'prompt']) expect(byName).toHaveProperty(name);
    expect(byName.sip_trunk_id).toMatch(/alias of sipTrunkId/);
    expect(byName.caller_id).toMatch(/alias of callerId/);
    expect(byName.first_message).toMatch(/alias of firstMessage/);
  });
});
