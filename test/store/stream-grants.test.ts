/**
 * Stream grants (src/store/stream-grants.ts, migration 11) under StreamTokens, on both backends:
 * a token opens one stream in the whole cluster (many redeems at once, from two nodes on
 * PostgreSQL: exactly one grant), an expired token never; the table holds the token's SHA-256
 * and never the token, and an outbound dial's session token only sealed; the sweep deletes
 * expired rows only; an outbound dial's state (answered, stream started, ended) as any node
 * reads it, scoped to the callback's account; a dial's conditional end never ends a call whose
 * stream started.
 */
import { createHash, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import { STREAM_GRANT_KEEP_MS, StreamTokens, type StreamGrant } from '../../src/telco/twilio-stream-tokens.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const SESSION_TOKEN = 'eyJhbGciOiJIUzI1NiJ9.session-token-in-clear.signature';

forEachStoreBackend((backend) =>
  describe('stream grants', () => {
    let t: TestStore;
    let a: Store;
    /** Node b: a second store on the same database (PostgreSQL); the same store on SQLite. */
    let b: Store;
    let orgId = '';
    const accountSid = 'AC' + randomUUID().replace(/-/g, '');
    const FROM = '+15550300001';
    beforeAll(async () => {
      t = await openTestStore(backend, undefined, { nodeId: 'node-a' });
      a = t.store;
      b = backend === 'postgres' ? await openOtherNode(t, 'node-b') : a;
      orgId = (await a.organizations.createKey('grants')).org.id;
      const at = new Date().toISOString();
      await a.telcoNumbers.insert({ id: randomUUID(), org_id: orgId, phone_number: FROM, phone_sid: 'PN1', label: FROM, account_sid: accountSid, auth_token: 'tok', created_at: at });
    });
    afterAll(async () => {
      if (b !== a) await b?.close();
      await t?.dispose();
    });

    const inbound = (): StreamGrant => ({ orgId, agentId: randomUUID(), numberId: randomUUID(), callSid: 'CA' + randomUUID(), accountSid, from: '+15559990000', to: FROM });

    /** An outbound dial's call record (started, like one just placed) and its grant's token. */
    async function dial(tokens: StreamTokens): Promise<{ callId: string; token: string }> {
      const callId = randomUUID();
      await a.calls.insert({ id: callId, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'outbound', source: 'twilio', from: FROM, to: '+15557770001', created_at: new Date().toISOString() });
      const token = await tokens.issue({ orgId, agentId: randomUUID(), numberId: randomUUID(), callSid: '', accountSid, from: FROM, to: '+15557770001', outbound: { callId, sessionToken: SESSION_TOKEN } });
      return { callId, token };
    }

    it('a token opens once in the whole cluster: 24 redeems at once (both nodes) get one grant', async () => {
      // Issued by one StreamTokens (the node that answered the webhook), redeemed by others.
      const issuer = new StreamTokens(a.streamGrants);
      const onA = new StreamTokens(a.streamGrants);
      const onB = new StreamTokens(b.streamGrants);
      const grant = inbound();
      const token = await issuer.issue(grant);
      const results = await Promise.all(Array.from({ length: 24 }, (_, i) => (i % 2 === 0 ? onA : onB).redeem(token, grant.callSid)));
      const got = results.filter((r) => r !== undefined);
      expect(got).toEqual([grant]);
      expect(await onB.redeem(token, grant.callSid)).toBeUndefined();
    });

    it('an expired token never opens; one issued on node a opens on node b', async () => {
      let now = Date.now();
      const onA = new StreamTokens(a.streamGrants, { ttlMs: 1000, now: () => now });
      const onB = new StreamTokens(b.streamGrants, { now: () => now });
      const grant = inbound();
      const expired = await onA.issue(grant);
      const fresh = await onA.issue(grant);
      now += 1000;
      expect(await onB.redeem(expired, grant.callSid)).toBeUndefined();
      now -= 1;
      expect(await onB.redeem(fresh, grant.callSid)).toEqual(grant);
    });

    it('stores the token\'s SHA-256, never the token, and the session token only sealed', async () => {
      const tokens = new StreamTokens(a.streamGrants);
      const { callId, token } = await dial(tokens);
      const rows = await a.client.all<Record<string, unknown>>('SELECT * FROM stream_grants WHERE call_id = ?', [callId]);
      expect(rows).toHaveLength(1);
      const row = rows[0]!;
      expect(row.token_hash).toBe(sha256(token));
      const text = JSON.stringify(rows);
      expect(text).not.toContain(token);
      expect(text).not.toContain(SESSION_TOKEN);
      expect(text).not.toContain('session-token-in-clear');
      expect(String(row.session_token_enc)).toMatch(/^v1:/);
      // The node taking the stream gets it opened.
      await tokens.bindCall(callId, 'CA-dial-1');
      const grant = await new StreamTokens(b.streamGrants).redeem(token, 'CA-dial-1');
      expect(grant?.outbound).toEqual({ callId, sessionToken: SESSION_TOKEN });
    });

    it('the sweep deletes grants expired for the keep time, and no others', async () => {
      const t0 = Date.now();
      let now = t0;
      const tokens = new StreamTokens(a.streamGrants, { ttlMs: 1000, now: () => now });
      const old = inbound();
      await tokens.issue(old);
      now = t0 + 60_000;
      const young = inbound();
      const youngToken = await tokens.issue(young);
      const count = async () => (await a.client.all<{ org_id: string }>('SELECT org_id FROM stream_grants WHERE agent_id IN (?, ?)', [old.agentId, young.agentId])).length;
      expect(await count()).toBe(2);
      // Expired, but not for the keep time yet: kept (an outbound dial's state).
      now = t0 + 1000 + STREAM_GRANT_KEEP_MS;
      await tokens.sweep();
      expect(await count()).toBe(2);
      now += 1;
      expect(await tokens.sweep()).toBeGreaterThanOrEqual(1);
      expect(await count()).toBe(1);
      now = t0 + 61_001 + STREAM_GRANT_KEEP_MS;
      await tokens.sweep();
      expect(await count()).toBe(0);
      expect(await tokens.redeem(youngToken, young.callSid)).toBeUndefined();
    });

    it('an outbound dial\'s state: answered and bound on one node, read on the other; scoped to the account', async () => {
      const tokens = new StreamTokens(a.streamGrants);
      const { callId } = await dial(tokens);
      expect(await b.streamGrants.carrierDial(callId, accountSid)).toEqual({ orgId, callSid: null, ended: false, streaming: false, answered: false });
      expect(await b.streamGrants.carrierDial(callId, 'AC-another-account')).toBeUndefined();
      await b.streamGrants.markAnswered(callId);
      expect((await a.streamGrants.dialStates([callId])).get(callId)).toEqual({ ended: false, streaming: false, answered: true });
      // Revoked: the grant is gone, the record stays as it was.
      await new StreamTokens(b.streamGrants).revoke(callId);
      expect(await a.client.all('SELECT token_hash FROM stream_grants WHERE call_id = ?', [callId])).toEqual([]);
      expect((await a.streamGrants.dialStates([callId])).get(callId)).toEqual({ ended: false, streaming: false, answered: false });
    });

    it('a started stream makes the dial streaming; a conditional end (unconnected_only) then leaves the record alone', async () => {
      const tokens = new StreamTokens(a.streamGrants);
      const { callId, token } = await dial(tokens);
      // A start naming another call spends the token but is no stream of this dial.
      const other = await dial(tokens);
      await tokens.bindCall(other.callId, 'CA-right');
      expect((await new StreamTokens(b.streamGrants).redeem(other.token, 'CA-wrong'))?.callSid).toBe('CA-right');
      expect((await a.streamGrants.dialStates([other.callId])).get(other.callId)?.streaming).toBe(false);

      await tokens.bindCall(callId, 'CA-streams');
      expect(await new StreamTokens(b.streamGrants).redeem(token, 'CA-streams')).toBeDefined();
      expect((await a.streamGrants.dialStates([callId])).get(callId)).toEqual({ ended: false, streaming: true, answered: false });
      // Revoking keeps a started stream's row: the dial stays "streaming" for every node.
      await tokens.revoke(callId);
      const end = { ended_at: new Date().toISOString(), termination_reason: 'busy', end_status: 'busy' as const, unconnected_only: true };
      expect(await a.calls.end(callId, end)).toBe(false);
      expect((await a.calls.get(orgId, callId))?.ended_at).toBeNull();
      // A dial that never streamed is ended by it, once.
      expect(await b.calls.end(other.callId, end)).toBe(true);
      expect(await a.calls.end(other.callId, end)).toBe(false);
      expect(await a.calls.get(orgId, other.callId)).toMatchObject({ status: 'ended', end_status: 'busy' });
      expect((await a.streamGrants.dialStates([other.callId])).get(other.callId)?.ended).toBe(true);
    });

    it('an inbound call\'s grant is one per CallSid: 24 issues at once on both nodes give one token and one row; then used, and a record keeps it used', async () => {
      const onA = new StreamTokens(a.streamGrants);
      const onB = new StreamTokens(b.streamGrants);
      const grant = inbound();
      expect(await onA.callState(grant.accountSid, grant.callSid)).toBeUndefined();
      const tokens = await Promise.all(Array.from({ length: 24 }, (_, i) => (i % 2 === 0 ? onA : onB).issueForCall(grant)));
      expect(new Set(tokens).size).toBe(1);
      expect(tokens[0]).toMatch(/^[A-Za-z0-9_-]{43}$/);
      // Nodes sharing the store's key derive the same token; another CallSid another one.
      expect(onB.callToken(grant.accountSid, grant.callSid)).toBe(tokens[0]);
      expect(onA.callToken(grant.accountSid, grant.callSid + 'x')).not.toBe(tokens[0]);
      const rows = await a.client.all<{ n: number }>('SELECT count(*) AS n FROM stream_grants WHERE call_sid = ?', [grant.callSid]);
      expect(Number(rows[0]!.n)).toBe(1);
      expect(await onB.callState(grant.accountSid, grant.callSid)).toBe('pending');
      // The stream starts on node b; the same token again is a second stream of a started call.
      expect(await onB.redeem(tokens[0], grant.callSid)).toEqual(grant);
      expect(await onA.callState(grant.accountSid, grant.callSid)).toBe('used');
      expect(await onA.redeem(tokens[0], grant.callSid)).toBeUndefined();
      expect(await onA.startedFor(tokens[0], grant.callSid)).toBe(true);
      expect(await onA.startedFor(tokens[0], 'CA-another-call')).toBe(false);
      // Swept, the grant is gone; the call record (carrier_call_id) still says the CallSid was used.
      await a.client.run('DELETE FROM stream_grants WHERE call_sid = ?', [grant.callSid]);
      expect(await onA.callState(grant.accountSid, grant.callSid)).toBeUndefined();
      await a.calls.insert({ id: randomUUID(), org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'inbound', source: 'twilio', from: grant.from, to: grant.to, created_at: new Date().toISOString(), carrier_call_id: grant.callSid });
      expect(await onB.callState(grant.accountSid, grant.callSid)).toBe('used');
    });
  }),
);
