/**
 * ACL specificity and organizations: how wide an ACL is never decides between organizations.
 *
 * Two organizations import the same carrier number (the carrier allows it). Org B has an ACL
 * trunk that admits everything (0.0.0.0/0, written into the store directly: the API now refuses
 * it) and was created first; org A then has an ACL trunk for exactly 127.0.0.7. Both route the
 * number from 127.0.0.7, so the call is ambiguous and refused (404) with one log line naming the
 * trunks: were the narrower ACL to win, an organization could take calls from an address it
 * shares with another just by naming that address exactly. Specificity still ranks the trunks of
 * one organization (which of its trunks a call is on), and a source only one organization's
 * trunks admit, or a number only one organization routes, is routed as before.
 *
 * Over the wire (a real daemon, a raw UDP socket bound to 127.0.0.x) and at the decision
 * (decideInbound over the daemon's store) for the finer cases.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { startLoggedDaemon, WARN, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { startRawSipPeer } from '../helpers/raw-sip.ts';
import { newId, nowIso } from '../../src/domain/ids.ts';
import { trunkForCreate } from '../../src/domain/sip-trunk.ts';
import { AuthRateLimiter } from '../../src/sip/ua/auth-rate-limit.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { DigestServer } from '../../src/sip/digest/index.ts';
import { decideInbound, type InboundAuthorizer, type InboundDecision } from '../../src/sip/ua/inbound-routing.ts';
import { StoreDirectory } from '../../src/bridge/sip-store-directory.ts';

const NUMBER = '+15551230000';
/** Imported by org B only. */
const NUMBER_B_ONLY = '+15551230001';
const ACCOUNT_A = 'AC' + 'a'.repeat(32);
const ACCOUNT_B = 'AC' + 'b'.repeat(32);
const TOKEN = 'carrier-token-acl-specificity';

let carrier: FakeCarrier;
let d: LoggedDaemon;
let keyB: string;
let orgA: string;
let orgB: string;
const ids = {} as Record<'agentA' | 'agentB' | 'agentB2' | 'wideB' | 'exactA' | 'tieA' | 'tieB' | 'onlyA' | 'hostA' | 'slash24B' | 'sameOrg1' | 'sameOrg2', string>;

async function ok<T = any>(p: Promise<{ status: number; body: T; text: string }>, status = 201): Promise<T> {
  const r = await p;
  expect(r.status, r.text).toBe(status);
  return r.body;
}

async function carrierAgent(name: string, phone: string, account: string, key?: string): Promise<string> {
  carrier.addNumber(account, TOKEN, phone);
  const num = await ok(d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: account, auth_token: TOKEN }, key));
  return (await ok(d.api('POST', '/v1/agents', { name, phone_number_id: num.id }, key))).id as string;
}

const aclTrunk = async (name: string, body: Record<string, unknown>, key?: string): Promise<string> =>
  (await ok(d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name, inbound_auth_type: 'acl', ...body }, key))).id as string;

function authorizer(): InboundAuthorizer {
  return { directory: new StoreDirectory(d.daemon.store), digest: new DigestServer({ realm: 'callbridge' }), limiter: new AuthRateLimiter() };
}

const decide = (user: string, source: string): Promise<InboundDecision> =>
  decideInbound(authorizer(), { method: 'INVITE', requestUri: `sip:${user}@127.0.0.1`, user, authorization: [], sourceAddress: source });

beforeAll(async () => {
  carrier = await startFakeCarrier();
  d = await startLoggedDaemon({ telco: { api_base_url: carrier.url } });
  const b = await d.daemon.store.organizations.createKey('Org B');
  keyB = b.key;
  orgB = b.org.id;
  orgA = (await ok(d.api('GET', '/v1/organization'), 200)).id;

  // Org B first: the number, its agent, and an ACL trunk open to the world (older data: the API
  // refuses /0 now, so it goes into the store as a migration would have left it).
  ids.agentB = await carrierAgent('B desk', NUMBER, ACCOUNT_B, keyB);
  ids.agentB2 = await carrierAgent('B other desk', NUMBER_B_ONLY, ACCOUNT_B, keyB);
  ids.wideB = newId();
  await d.daemon.store.sipTrunks.insert({
    id: ids.wideB,
    org_id: orgB,
    settings: trunkForCreate({ pbx: 'generic', name: 'B everything', inbound_auth_type: 'acl', inbound_acl: ['0.0.0.0/0'] }),
    passwords: {},
    created_at: nowIso(),
  });

  // Then org A: the same number on its agent, an ACL trunk for exactly 127.0.0.7.
  ids.agentA = await carrierAgent('A desk', NUMBER, ACCOUNT_A);
  ids.exactA = await aclTrunk('A exact', { inbound_acl: ['127.0.0.7/32'] });
});

afterAll(async () => {
  await d?.close();
  await carrier?.close();
});

/** Sends an INVITE from `source` and resolves with the call the daemon routed, or the final response. */
async function inviteFrom(source: string, user: string): Promise<{ call?: SipCall; status?: number; reason?: string }> {
  const ua = d.daemon.sip!.ua;
  const peer = await startRawSipPeer(source);
  try {
    const routed = new Promise<SipCall>((resolve) => ua.once('call', resolve));
    const callId = peer.invite(d.sipPort, { user });
    const end = Date.now() + 3000;
    let call: SipCall | undefined;
    void routed.then((c) => (call = c));
    for (;;) {
      if (call !== undefined) {
        call.hangup();
        return { call };
      }
      const final = peer.for(callId).find((r) => r.status >= 200);
      if (final) return { status: final.status, reason: final.reason };
      if (Date.now() > end) throw new Error(`no call and no final response for ${callId}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    await peer.close();
  }
}

describe('a narrower ACL takes nothing from another organization (over the wire)', () => {
  it('the INVITE from 127.0.0.7 to the number both organizations route is refused, not given to the /32 trunk’s organization', async () => {
    const { call, status } = await inviteFrom('127.0.0.7', NUMBER);
    expect(call, 'the call was routed by ACL width').toBeUndefined();
    expect(status).toBe(404);
  });

  it('another source, admitted only by the /0 trunk, still reaches org B (the wide trunk keeps working)', async () => {
    const { call } = await inviteFrom('127.0.0.9', NUMBER);
    expect(call!.route).toMatchObject({ orgId: orgB, agentId: ids.agentB, trunkId: ids.wideB });
  });

  it('two organizations equally specific, each routing the number: 404 and one warning naming both trunks', async () => {
    ids.tieA = await aclTrunk('A tie', { inbound_acl: ['127.0.0.8/32'] });
    ids.tieB = await aclTrunk('B tie', { inbound_acl: ['127.0.0.8/32'] }, keyB);
    const before = d.lines.length;
    const { call, status } = await inviteFrom('127.0.0.8', NUMBER);
    expect(call, 'the call was routed to a guess').toBeUndefined();
    expect(status).toBe(404);
    const warnings = d.lines.slice(before).filter((l) => l.level >= WARN);
    expect(warnings, JSON.stringify(warnings)).toHaveLength(1);
    const line = warnings[0]!;
    expect(line.msg).toContain(ids.tieA);
    expect(line.msg).toContain(ids.tieB);
    expect(line.msg).toMatch(/ambiguous/);
    expect(line).toMatchObject({ status: 404, source: expect.stringContaining('127.0.0.8') });
    // The organizations' own data is not in it.
    expect(JSON.stringify(line)).not.toContain(orgA);
    expect(JSON.stringify(line)).not.toContain(orgB);
  });
});

describe('the decision (decideInbound over the store)', () => {
  it('the most specific trunk that cannot route the number does not block a wider one that can', async () => {
    ids.onlyA = await aclTrunk('A only', { inbound_acl: ['127.0.0.10/32'] });
    const dec = await decide(NUMBER_B_ONLY, '127.0.0.10');
    expect(dec).toMatchObject({ kind: 'accept', trunk: { id: ids.wideB }, route: { orgId: orgB, agentId: ids.agentB2 } });
    // The number both organizations route: the /32 does not beat the /0.
    expect(await decide(NUMBER, '127.0.0.10')).toMatchObject({ kind: 'reject', status: 404, outcome: 'ambiguous_route' });
  });

  it('an exact inbound_host takes nothing from another organization’s /24; within one organization the most specific trunk carries the call', async () => {
    ids.hostA = await aclTrunk('A host', { inbound_host: '127.0.0.11' });
    ids.slash24B = await aclTrunk('B /24', { inbound_acl: ['127.0.0.0/24'] }, keyB);
    expect(await decide(NUMBER, '127.0.0.11')).toMatchObject({ kind: 'reject', status: 404, outcome: 'ambiguous_route' });
    // Elsewhere in that /24 only org B's trunks admit the source: its /24 rather than its /0.
    expect(await decide(NUMBER, '127.0.0.12')).toMatchObject({ kind: 'accept', trunk: { id: ids.slash24B }, route: { orgId: orgB } });
  });

  it('a tie inside one organization is no ambiguity: the call routes', async () => {
    ids.sameOrg1 = await aclTrunk('A same 1', { inbound_acl: ['127.0.1.0/24'] });
    ids.sameOrg2 = await aclTrunk('A same 2', { inbound_acl: ['127.0.1.0/24'] });
    // A number only org A routes (an alternate_number on its second trunk; org B's /0 admits the source too).
    await ok(d.api('POST', `/v1/sip-trunks/${ids.sameOrg2}/assignments`, { agent_id: ids.agentA, alternate_number: '7001' }));
    const dec = await decide('7001', '127.0.1.5');
    expect(dec).toMatchObject({ kind: 'accept', trunk: { id: ids.sameOrg2 }, route: { orgId: orgA, agentId: ids.agentA, via: 'alternate_number' } });
  });

  it('a tie where only one organization routes the number is no ambiguity either', async () => {
    // 127.0.0.8: org A's and org B's /32; only org B has NUMBER_B_ONLY.
    expect(await decide(NUMBER_B_ONLY, '127.0.0.8')).toMatchObject({ kind: 'accept', trunk: { id: ids.tieB }, route: { orgId: orgB } });
  });

  it('the refusal: 404, not quiet, naming the claiming trunks (one per organization, its most specific)', async () => {
    const dec = await decide(NUMBER, '127.0.0.8');
    expect(dec).toMatchObject({ kind: 'reject', status: 404, quiet: false, outcome: 'ambiguous_route' });
    const r = dec as Extract<InboundDecision, { kind: 'reject' }>;
    expect(new Set(r.ambiguousTrunks)).toEqual(new Set([ids.tieA, ids.tieB]));
    expect(new Set(r.detail.claimingTrunks as string[])).toEqual(new Set([ids.tieA, ids.tieB]));
    expect(r.why).toContain('ambiguous');
  });
});

describe('older trunks wider than the limit', () => {
  it('are logged at start (a warning naming the trunk and the CIDR) and keep routing', async () => {
    await d.stop();
    d = await startLoggedDaemon({ telco: { api_base_url: carrier.url } }, { dataDir: d.dataDir });
    const warning = d.lines.find((l) => l.level >= WARN && JSON.stringify(l).includes(ids.wideB));
    expect(warning, JSON.stringify(d.lines.filter((l) => l.level >= WARN))).toBeDefined();
    expect(JSON.stringify(warning)).toContain('0.0.0.0/0');
    expect(warning!.msg).toMatch(/acl_min_prefix_v4/);
    // 127.0.2.9: in no trunk's ACL but the /0 (the /24s above cover 127.0.0.x and 127.0.1.x).
    const { call } = await inviteFrom('127.0.2.9', NUMBER);
    expect(call!.route).toMatchObject({ orgId: orgB, trunkId: ids.wideB });
  });
});
