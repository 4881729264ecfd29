/**
 * Phone calls that end before they are answered still get their end in the record at once: a
 * caller who hangs up (CANCEL) while callbridge rings, with the agent's voice session being
 * created or its socket connecting, leaves a record that is ended, with ended_at and a
 * termination_reason naming the caller side, and no connected_at (nothing connected). Before,
 * such a record stayed `started` until its session token expired (10 minutes), then claimed
 * `token_expired`.
 *
 * Real sockets: a raw SIP UAC on loopback against the daemon in its default (local) mode. The
 * CANCEL follows the 180 after 0 to 8 ms, so it lands in each stage of the session's setup; a
 * call the session happened to reach first is ended by the session server (reason
 * client_closed), as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLoggedDaemon, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';
import { delay, until, untilAsync } from '../helpers/until.ts';

const NUMBER = '+15550408200';

describe('a call the caller gives up on while it rings', () => {
  let d: LoggedDaemon;
  let peer: RawSipPeer;
  let agentId: string;
  beforeAll(async () => {
    d = await startLoggedDaemon({});
    agentId = (await d.api('POST', '/v1/agents', { name: 'Desk', first_message: 'Hello.' })).body.id;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
    peer = await startRawSipPeer('127.0.0.1');
  });
  afterAll(async () => {
    await peer?.close();
    await d?.close();
  });

  it('ends its record at once: ended_at and the caller side as termination_reason, never left started', async () => {
    const answered = new Set<string>();
    for (const [i, wait] of [0, 0, 0, 1, 1, 2, 2, 3, 5, 8].entries()) {
      const caller = `+1555999100${i}`;
      const callId = peer.invite(d.sipPort, { user: NUMBER, from: caller });
      await until(() => peer.for(callId).some((r) => r.status === 180 || r.status === 183), 'a provisional response');
      await delay(wait);
      peer.cancel(d.sipPort, callId);
      const isFinal = (r: { status: number; get(h: string): string | undefined }) => r.status >= 200 && r.get('cseq')?.endsWith('INVITE') === true;
      await until(() => peer.for(callId).some(isFinal), 'the final response to the INVITE');
      const final = peer.for(callId).find(isFinal)!;
      // A CANCEL after the answer (200) finds nothing to cancel (RFC 3261 9.2): that call is up, not this test's.
      if (final.status === 200) answered.add(caller);
      else {
        expect(final.status).toBe(487);
        peer.ackFailure(d.sipPort, callId);
      }
    }
    let calls: any[] = [];
    await untilAsync(async () => {
      calls = (await d.api('GET', `/v1/calls?agent_ids=${agentId}&page_size=100`)).body.calls.filter((c: any) => !answered.has(c.from));
      return calls.every((c) => c.ended_at !== undefined);
    }, 'every record ended', 5000).catch(() => undefined);
    // Most CANCELs land before the session started (the case this is about).
    expect(calls.filter((c) => c.started_at === undefined).length).toBeGreaterThan(0);
    for (const c of calls) {
      const json = JSON.stringify(c);
      expect(c.status, json).toBe('ended');
      expect(typeof c.ended_at, json).toBe('string');
      expect(typeof c.termination_reason, json).toBe('string');
      if (c.started_at === undefined) {
        // Never connected: the bridge's end, with what the caller side did.
        expect(c, json).toMatchObject({ termination_reason: 'caller side ended: cancelled', end_status: 'failed' });
        expect(c.connected_at, json).toBeUndefined();
        expect(c.duration_seconds, json).toBeUndefined();
      } else {
        // The session started first: its end.
        expect(c.termination_reason, json).toBe('client_closed');
      }
    }
  });
});
