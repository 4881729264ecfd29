/**
 * What one organization configures never takes, blocks or reveals another organization's calls
 * or numbers (docs/sip-trunks.md "Overlapping ACLs"). Over the wire: a real daemon, INVITEs over
 * UDP from raw sockets bound to loopback addresses, digest answers computed like a PBX's, the call
 * records read back through each organization's GET /v1/calls, the metric through /metrics.
 *
 * "The review's case": org A's ACL trunk admits 127.0.0.0/8 and claims `200` and `+15552220000` as
 * alternate_numbers; org B has a digest trunk with number `200` and imported `+15552220000` from
 * its carrier. Calls from B's PBX on 127.0.0.1 were answered by A's agent.
 *
 * "One carrier SBC for two organizations": both organizations' ACL trunks admit the SBC address,
 * each with its own alternate_numbers and carrier numbers; every call lands in its owner's
 * organization, a number both claim is refused, a number a digest trunk claims is challenged.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { startLoggedDaemon, WARN, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { startRawSipPeer } from '../helpers/raw-sip.ts';
import { untilAsync } from '../helpers/until.ts';
import { authorize } from '../../src/sip/digest/index.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { StoreDirectory } from '../../src/bridge/sip-store-directory.ts';

const TOKEN = 'carrier-token-tenant-isolation';
const ACCOUNT_A = 'AC' + 'c'.repeat(32);
const ACCOUNT_B = 'AC' + 'd'.repeat(32);

interface Org {
  id: string;
  key: string | undefined;
  name: string;
}

async function ok<T = any>(p: Promise<{ status: number; body: T; text: string }>, status = 201): Promise<T> {
  const r = await p;
  expect(r.status, r.text).toBe(status);
  return r.body;
}

/** One daemon with organizations A (the first key) and B, and the helpers that act as either. */
async function world(carrier: FakeCarrier) {
  const d = await startLoggedDaemon({ telco: { api_base_url: carrier.url } });
  const b = await d.daemon.store.organizations.createKey('Org Bravo');
  const a: Org = { id: (await ok(d.api('GET', '/v1/organization'), 200)).id, key: undefined, name: (await ok(d.api('GET', '/v1/organization'), 200)).name };
  const B: Org = { id: b.org.id, key: b.key, name: 'Org Bravo' };
  const agent = async (org: Org, name: string): Promise<string> => (await ok(d.api('POST', '/v1/agents', { name }, org.key))).id as string;
  const carrierAgent = async (org: Org, name: string, phone: string, account: string): Promise<string> => {
    carrier.addNumber(account, TOKEN, phone);
    const num = await ok(d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: account, auth_token: TOKEN }, org.key));
    return (await ok(d.api('POST', '/v1/agents', { name, phone_number_id: num.id }, org.key))).id as string;
  };
  const trunk = async (org: Org, body: Record<string, unknown>): Promise<string> => (await ok(d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'trunk', ...body }, org.key))).id as string;
  const assign = (org: Org, trunkId: string, body: Record<string, unknown>) => d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, body, org.key);
  return { d, A: a, B, agent, carrierAgent, trunk, assign };
}

interface Placed {
  call?: SipCall;
  /** The final status when no call was routed (after the digest answer, if credentials were given). */
  status?: number;
  /** Whether the first INVITE was challenged (401). */
  challenged: boolean;
}

/** The final response or the routed call for one INVITE from `peer`. */
async function outcome(d: LoggedDaemon, send: () => string, peerFor: (callId: string) => Array<{ status: number; getAll(name: string): string[] }>): Promise<{ call?: SipCall; final?: { status: number; getAll(name: string): string[] } }> {
  const ua = d.daemon.sip!.ua;
  let call: SipCall | undefined;
  const onCall = (c: SipCall) => (call = c);
  ua.on('call', onCall);
  try {
    const callId = send();
    const end = Date.now() + 5000;
    for (;;) {
      if (call !== undefined) return { call };
      const final = peerFor(callId).find((r) => r.status >= 200);
      if (final) return { final };
      if (Date.now() > end) throw new Error(`no call and no final response for ${callId}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    ua.off('call', onCall);
  }
}

/** Places a call from `source` to `user`; answers a 401 with `creds` when given. Routed calls are hung up at once. */
async function place(d: LoggedDaemon, source: string, user: string, creds?: { username: string; password: string }): Promise<Placed> {
  const peer = await startRawSipPeer(source);
  try {
    const first = await outcome(d, () => peer.invite(d.sipPort, { user }), (id) => peer.for(id));
    if (first.call) {
      first.call.hangup();
      return { call: first.call, challenged: false };
    }
    const challenged = first.final!.status === 401;
    if (!challenged || creds === undefined) return { status: first.final!.status, challenged };
    const uri = `sip:${user}@127.0.0.1:${d.sipPort}`;
    const auth = authorize({ ...creds, challenges: first.final!.getAll('WWW-Authenticate'), method: 'INVITE', uri });
    if (!auth.ok) throw new Error(`cannot answer the challenge: ${auth.detail}`);
    const value = auth.authorizations[0]!.value;
    const second = await outcome(d, () => peer.invite(d.sipPort, { user, headers: [`Authorization: ${value}`] }), (id) => peer.for(id));
    if (second.call) {
      second.call.hangup();
      return { call: second.call, challenged };
    }
    return { status: second.final!.status, challenged };
  } finally {
    await peer.close();
  }
}

/** The value of callbridge_sip_ambiguous_routes_total for these trunks and action (0 when absent). */
async function ambiguousCount(d: LoggedDaemon, trunkIds: string[], action: 'refused' | 'challenged'): Promise<number> {
  const label = `trunk_ids="${[...trunkIds].sort().join(',')}"`;
  const line = (await d.metrics()).split('\n').find((l) => l.startsWith('callbridge_sip_ambiguous_routes_total{') && l.includes(label) && l.includes(`action="${action}"`));
  return line === undefined ? 0 : Number(line.split(' ').at(-1));
}

/** The to_number of every call in the organization's GET /v1/calls. */
async function calledNumbers(d: LoggedDaemon, org: Org): Promise<string[]> {
  const body = await ok(d.api('GET', '/v1/calls?page_size=100', undefined, org.key), 200);
  return (body.calls as Array<{ to_number?: string; to?: string }>).map((c) => c.to_number ?? c.to ?? '').sort();
}

let carrier: FakeCarrier;
beforeAll(async () => {
  carrier = await startFakeCarrier();
});
afterAll(async () => {
  await carrier?.close();
});

describe("the review's case: A's ACL trunk claims B's digest number and B's carrier number", () => {
  let w: Awaited<ReturnType<typeof world>>;
  const ids = {} as Record<'aclA' | 'digestA' | 'digestB' | 'agentA' | 'agentB' | 'agentB2' | 'altA200' | 'altACarrier', string>;
  const CARRIER_B = '+15552220000';
  const credsB = { username: 'bravo-pbx', password: 'bravo-secret-1' };

  beforeAll(async () => {
    w = await world(carrier);
    ids.agentA = await w.agent(w.A, 'A desk');
    ids.aclA = await w.trunk(w.A, { inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'] });
    ids.altA200 = (await ok(w.assign(w.A, ids.aclA, { agent_id: ids.agentA, alternate_number: '200' }))).id;
    ids.altACarrier = (await ok(w.assign(w.A, ids.aclA, { agent_id: ids.agentA, alternate_number: CARRIER_B }))).id;
    ids.agentB = await w.agent(w.B, 'B desk');
    ids.agentB2 = await w.carrierAgent(w.B, 'B carrier desk', CARRIER_B, ACCOUNT_B);
    ids.digestB = await w.trunk(w.B, { inbound_auth_type: 'digest', inbound_sip_username: credsB.username, inbound_sip_password: credsB.password });
    await ok(w.assign(w.B, ids.digestB, { agent_id: ids.agentB, number: '200' }));
  });
  afterAll(() => w?.d.close());

  it("a call from 127.0.0.1 to B's digest number 200 is challenged, not answered by A's agent; B's credentials route it to B", async () => {
    const before = await ambiguousCount(w.d, [ids.aclA, ids.digestB], 'challenged');
    const bare = await place(w.d, '127.0.0.1', '200');
    expect(bare.call?.route, "routed to A's agent through its ACL").toBeUndefined();
    expect(bare).toMatchObject({ status: 401, challenged: true });
    expect(await ambiguousCount(w.d, [ids.aclA, ids.digestB], 'challenged')).toBe(before + 1);

    const authed = await place(w.d, '127.0.0.1', '200', credsB);
    expect(authed.call?.route).toMatchObject({ orgId: w.B.id, agentId: ids.agentB, via: 'assignment_number', trunkId: ids.digestB });
  });

  it("a call to the carrier number B imported never reaches A (A's alternate_number for it is void); B's credentials route it to B's agent", async () => {
    const bare = await place(w.d, '127.0.0.1', CARRIER_B);
    expect(bare.call?.route, "routed to A's agent through its ACL").toBeUndefined();
    expect(bare).toMatchObject({ status: 401, challenged: true });
    const authed = await place(w.d, '127.0.0.1', CARRIER_B, credsB);
    expect(authed.call?.route).toMatchObject({ orgId: w.B.id, agentId: ids.agentB2, via: 'carrier_number' });
  });

  it("A's assignments say why, without naming B", async () => {
    const alt200 = await ok(w.d.api('GET', `/v1/sip-trunks/assignments/${ids.altA200}`), 200);
    expect(alt200.routing_warnings).toHaveLength(1);
    expect(alt200.routing_warnings[0]).toMatch(/digest trunk.*challenged/);
    const altCarrier = await ok(w.d.api('GET', `/v1/sip-trunks/assignments/${ids.altACarrier}`), 200);
    expect(altCarrier.routing_warnings).toHaveLength(1);
    expect(altCarrier.routing_warnings[0]).toMatch(/carrier number that another organization imported/);
    for (const text of [JSON.stringify(alt200), JSON.stringify(altCarrier)]) {
      for (const secret of [w.B.id, w.B.name, ids.digestB, ids.agentB, ids.agentB2, credsB.username]) expect(text).not.toContain(secret);
    }
  });

  it("A's digest trunk with B's carrier number as its assignment number: A's own credentials get 404, not A's agent", async () => {
    const credsA = { username: 'alpha-pbx', password: 'alpha-secret-1' };
    ids.digestA = await w.trunk(w.A, { inbound_auth_type: 'digest', inbound_sip_username: credsA.username, inbound_sip_password: credsA.password });
    await ok(w.assign(w.A, ids.digestA, { agent_id: ids.agentA, number: CARRIER_B, alternate_number: '201' }));
    const p = await place(w.d, '127.0.0.1', CARRIER_B, credsA);
    expect(p.call?.route, 'routed to A by its assignment number').toBeUndefined();
    expect(p).toMatchObject({ status: 404, challenged: true });
  });

  it('a registered trunk routes only its own assignments, and never another organization’s carrier number', async () => {
    // The registered path as the UAS calls it (a carrier calling our registered Contact): the directory over the daemon's store.
    const directory = new StoreDirectory(w.d.daemon.store);
    const trunk = { id: ids.digestA, orgId: w.A.id, name: 'trunk', authType: 'digest' as const };
    expect(await directory.routeRegistered(trunk, CARRIER_B)).toBeUndefined();
    expect(await directory.routeRegistered(trunk, '201')).toMatchObject({ orgId: w.A.id, agentId: ids.agentA, via: 'alternate_number', trunkId: ids.digestA });
    // B claims 201 as well (allowed): A's registered trunk still routes its own; B's assignment is not on it.
    await ok(w.assign(w.B, ids.digestB, { agent_id: ids.agentB, alternate_number: '201' }));
    expect(await directory.routeRegistered(trunk, '201')).toMatchObject({ orgId: w.A.id, trunkId: ids.digestA });
    const trunkB = { id: ids.digestB, orgId: w.B.id, name: 'trunk', authType: 'digest' as const };
    expect(await directory.routeRegistered(trunkB, '201')).toMatchObject({ orgId: w.B.id, agentId: ids.agentB, trunkId: ids.digestB });
  });

  it("the call records are B's; A has none", async () => {
    await untilAsync(async () => (await calledNumbers(w.d, w.B)).length >= 2, "B's call records");
    expect(await calledNumbers(w.d, w.A)).toEqual([]);
  });
});

describe('one carrier SBC for two organizations: every call lands in its owner’s organization', () => {
  let w: Awaited<ReturnType<typeof world>>;
  const SBC = '127.0.0.20';
  const CARRIER_A = '+15553330001';
  const CARRIER_B = '+15553330002';
  const credsB = { username: 'bravo-sbc-digest', password: 'bravo-secret-2' };
  const ids = {} as Record<'aclA' | 'aclB' | 'digestB' | 'a1' | 'a2' | 'b1' | 'b2' | 'ambiguousB' | 'ambiguousA', string>;

  beforeAll(async () => {
    w = await world(carrier);
    // A admits the SBC's whole range, B exactly the SBC: B's narrower ACL must win nothing by it.
    ids.aclA = await w.trunk(w.A, { inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'] });
    ids.aclB = await w.trunk(w.B, { inbound_auth_type: 'acl', inbound_acl: [`${SBC}/32`] });
    ids.digestB = await w.trunk(w.B, { inbound_auth_type: 'digest', inbound_sip_username: credsB.username, inbound_sip_password: credsB.password });
    ids.a1 = await w.agent(w.A, 'A one');
    ids.b1 = await w.agent(w.B, 'B one');
    // Each tries to reserve the other's carrier number before the other imports it.
    await ok(w.assign(w.A, ids.aclA, { agent_id: ids.a1, alternate_number: CARRIER_B }));
    await ok(w.assign(w.B, ids.aclB, { agent_id: ids.b1, alternate_number: CARRIER_A }));
    ids.a2 = await w.carrierAgent(w.A, 'A carrier', CARRIER_A, ACCOUNT_A);
    ids.b2 = await w.carrierAgent(w.B, 'B carrier', CARRIER_B, ACCOUNT_B);
    // Their own alternate_numbers; B's 400 after A already claimed it would have been a 409 before.
    await ok(w.assign(w.A, ids.aclA, { agent_id: ids.a1, alternate_number: '300' }));
    await ok(w.assign(w.B, ids.aclB, { agent_id: ids.b1, alternate_number: '400' }));
    // 500: both claim it through their ACL trunks. 700: A's ACL trunk and B's digest trunk.
    ids.ambiguousA = (await ok(w.assign(w.A, ids.aclA, { agent_id: ids.a1, alternate_number: '500' }))).id;
    await ok(w.assign(w.A, ids.aclA, { agent_id: ids.a1, alternate_number: '700' }));
    await ok(w.assign(w.B, ids.digestB, { agent_id: ids.b1, number: '700' }));
  });
  afterAll(() => w?.d.close());

  it('REST: B claims the alternate_number A already uses: 201 with a warning that names nothing of A; the same number twice in B: 409', async () => {
    const r = await w.assign(w.B, ids.aclB, { agent_id: ids.b1, alternate_number: '500' });
    expect(r.status, r.text).toBe(201);
    ids.ambiguousB = r.body.id;
    expect(r.body.routing_warnings).toHaveLength(1);
    expect(r.body.routing_warnings[0]).toMatch(/another organization through an ACL trunk.*refused as ambiguous/);
    for (const secret of [w.A.id, w.A.name, ids.aclA, ids.a1]) expect(r.text).not.toContain(secret);
    // A's assignment shows it too, from now on.
    const mine = await ok(w.d.api('GET', `/v1/sip-trunks/assignments/${ids.ambiguousA}`), 200);
    expect(mine.routing_warnings).toEqual([expect.stringMatching(/refused as ambiguous/)]);
    const twice = await w.assign(w.B, ids.aclB, { agent_id: ids.b1, alternate_number: '500' });
    expect(twice.status).toBe(409);
    expect(twice.body.error).toBe('alternate_number is already assigned in this organization');
    // The same claim where the ACLs do not overlap: no warning.
    const far = await w.trunk(w.B, { inbound_auth_type: 'acl', inbound_acl: ['10.1.0.0/16'] });
    const elsewhere = await ok(w.assign(w.B, far, { agent_id: ids.b1, alternate_number: '300' }));
    expect(elsewhere.routing_warnings).toEqual([]);
    // A's import of CARRIER_A voids B's alternate_number for it: A's own claim gets no warning from it.
    const ownImport = await ok(w.assign(w.A, ids.aclA, { agent_id: ids.a2, alternate_number: CARRIER_A }));
    expect(ownImport.routing_warnings).toEqual([]);
    // PATCH answers with the warnings as well.
    const patched = await ok(w.d.api('PATCH', `/v1/sip-trunks/assignments/${elsewhere.id}`, { number: CARRIER_A }, w.B.key), 200);
    expect(patched.routing_warnings).toEqual([expect.stringMatching(/carrier number that another organization imported/)]);
  });

  it('calls from the shared SBC to each organization’s numbers land in that organization', async () => {
    const expectRoute = async (user: string, orgId: string, agentId: string) => {
      const p = await place(w.d, SBC, user);
      expect(p.call?.route, `${user}: ${p.status}`).toMatchObject({ orgId, agentId });
    };
    await expectRoute('300', w.A.id, ids.a1);
    await expectRoute(CARRIER_A, w.A.id, ids.a2);
    await expectRoute('400', w.B.id, ids.b1);
    await expectRoute(CARRIER_B, w.B.id, ids.b2);
  });

  it('the number both claim through their ACLs is refused (404), logged and counted with both trunk ids only', async () => {
    const before = await ambiguousCount(w.d, [ids.aclA, ids.aclB], 'refused');
    const from = w.d.lines.length;
    const p = await place(w.d, SBC, '500');
    expect(p.call, 'the ambiguous call was given to one of them').toBeUndefined();
    expect(p.status).toBe(404);
    expect(await ambiguousCount(w.d, [ids.aclA, ids.aclB], 'refused')).toBe(before + 1);
    const warnings = w.d.lines.slice(from).filter((l) => l.level >= WARN);
    expect(warnings).toHaveLength(1);
    const text = JSON.stringify(warnings[0]);
    expect(text).toContain(ids.aclA);
    expect(text).toContain(ids.aclB);
    for (const secret of [w.A.id, w.B.id, w.A.name, w.B.name]) expect(text).not.toContain(secret);
  });

  it("the number B's digest trunk claims is challenged, and B's credentials route it to B", async () => {
    const before = await ambiguousCount(w.d, [ids.aclA, ids.digestB], 'challenged');
    const bare = await place(w.d, SBC, '700');
    expect(bare).toMatchObject({ status: 401, challenged: true });
    expect(await ambiguousCount(w.d, [ids.aclA, ids.digestB], 'challenged')).toBe(before + 1);
    const authed = await place(w.d, SBC, '700', credsB);
    expect(authed.call?.route).toMatchObject({ orgId: w.B.id, agentId: ids.b1, trunkId: ids.digestB });
  });

  it('the call records: each organization holds exactly the calls to its own numbers', async () => {
    await untilAsync(async () => (await calledNumbers(w.d, w.A)).length >= 2 && (await calledNumbers(w.d, w.B)).length >= 3, 'call records');
    expect(await calledNumbers(w.d, w.A)).toEqual(['300', CARRIER_A].sort());
    expect(await calledNumbers(w.d, w.B)).toEqual(['400', '700', CARRIER_B].sort());
  });
});
