/**
 * decideInbound (src/sip/ua/inbound-routing.ts) over the real SQLite store of a test daemon, with
 * trunks, assignments, agents and imported carrier numbers created through the REST API (numbers
 * imported through the fake carrier), StoreDirectory over that store (DNS names of inbound_host
 * resolved by an injected resolver), a real DigestServer and AuthRateLimiter, and Authorization
 * values computed by DigestClient from the challenges the decision carried.
 *
 * The `why` of a refusal is the sentence PBX admins read in the log: the tests check that it
 * names the trunk, the number or the source that decided.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { AuthRateLimiter, type AuthRateLimiterOptions } from '../../src/sip/ua/auth-rate-limit.ts';
import { DigestClient, DigestServer, parseDigestChallenges, type DigestAlgorithm, type DigestServerOptions } from '../../src/sip/digest/index.ts';
import { decideInbound, type InboundAuthorizer, type InboundDecision, type InboundRequestInfo } from '../../src/sip/ua/inbound-routing.ts';
import { numberCandidates, StoreDirectory } from '../../src/bridge/sip-store-directory.ts';

const ACCOUNT_A = 'AC' + 'a'.repeat(32);
const ACCOUNT_B = 'AC' + 'b'.repeat(32);
const TOKEN = 'carrier-token-for-inbound-routing';

const USER_A = 'pbx-a';
const PASSWORD_A = 'pbx-a-secret-71c';
const USER_B = 'pbx-b';
const PASSWORD_B = 'pbx-b-secret-0d4';
const USER_NONE = 'pbx-none';

/** Org A: digest assignment numbers, an ACL alternate_number, carrier numbers. */
const DIGEST_NUMBER = '+15550001000';
const INACTIVE_NUMBER = '+15550003000';
const ALTERNATE_NUMBER = '+15550002000';
const CARRIER_A = '+15550101000';
/** Imported into both organizations, held by one agent in each. */
const SHARED_CARRIER = '+15550303000';
/** Org B. */
const CARRIER_B = '+15550202000';
const DIGEST_NUMBER_B = '+15550004000';
const ALTERNATE_NUMBER_B = '+15550005000';

const ACL_SOURCE = '10.1.2.3'; // inside org A's ACL trunk 10.1.0.0/16
const ACL_SOURCE_B = '10.2.2.3'; // inside org B's ACL trunk 10.2.0.0/16
const HOST_LITERAL = '192.0.2.55'; // org A's ACL trunk by inbound_host (an IP literal)
const HOST_NAME = 'pbx.example.test'; // org A's ACL trunk by inbound_host (a DNS name)
const HOST_NAME_ADDRESS = '198.51.100.20';
const NONE_SOURCE = '203.0.113.9'; // inside the 'none' trunk's inbound_acl
const STRANGER = '198.51.100.77'; // in no ACL trunk

let carrier: FakeCarrier;
let d: TestDaemon;
let keyB: string;
const ids = {} as Record<
  'front' | 'closed' | 'carrierA' | 'sharedA' | 'agentB' | 'sharedB' | 'digestA' | 'aclA' | 'hostLiteral' | 'hostName' | 'none' | 'digestB' | 'aclB',
  string
>;

async function ok<T = any>(p: Promise<{ status: number; body: T; text: string }>, status = 201): Promise<T> {
  const r = await p;
  expect(r.status, r.text).toBe(status);
  return r.body;
}

/** Imports `phone` into the key's organization (through the fake carrier) and gives it to a new agent. */
async function carrierAgent(name: string, phone: string, account: string, key?: string): Promise<string> {
  carrier.addNumber(account, TOKEN, phone);
  const opts = key === undefined ? {} : { key };
  const num = await ok(d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: account, auth_token: TOKEN }, opts));
  const agent = await ok(d.api('POST', '/v1/agents', { name, phone_number_id: num.id }, opts));
  expect(agent.phone_number_id).toBe(num.id);
  return agent.id as string;
}

/** Resolver calls, by name, of the directories made by directory(). */
const resolved: string[] = [];

function directory(): StoreDirectory {
  return new StoreDirectory(d.daemon.store, {
    resolve: async (host) => {
      resolved.push(host);
      if (host === HOST_NAME) return [HOST_NAME_ADDRESS];
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    },
  });
}

function authorizer(o: { digest?: Partial<DigestServerOptions>; limiter?: AuthRateLimiterOptions } = {}): InboundAuthorizer {
  return {
    directory: directory(),
    digest: new DigestServer({ realm: 'callbridge', algorithms: ['SHA-256', 'MD5'], ...o.digest }),
    limiter: new AuthRateLimiter(o.limiter),
  };
}

function request(user: string, sourceAddress: string, authorization: string[] = []): InboundRequestInfo {
  return { method: 'INVITE', requestUri: `sip:${user}@127.0.0.1:5060`, user, authorization, sourceAddress };
}

type Reject = Extract<InboundDecision, { kind: 'reject' }>;
type Accept = Extract<InboundDecision, { kind: 'accept' }>;

function rejected(decision: InboundDecision, status: number): Reject {
  expect(decision.kind, JSON.stringify(decision)).toBe('reject');
  const r = decision as Reject;
  expect(r.status, r.why).toBe(status);
  return r;
}

function accepted(decision: InboundDecision): Accept {
  expect(decision.kind, JSON.stringify(decision)).toBe('accept');
  return decision as Accept;
}

const challengesOf = (r: Reject): string[] => r.headers.filter(([n]) => n === 'WWW-Authenticate').map(([, v]) => v);

/** Credentials for `user` answering the challenge of a 401 decision. */
function credentials(challenge: Reject, user: string, creds: { username: string; password: string; algorithms?: DigestAlgorithm[] }): string[] {
  expect(challenge.status).toBe(401);
  const client = new DigestClient(creds);
  const r = client.respond({ challenges: challengesOf(challenge), method: 'INVITE', uri: request(user, '').requestUri });
  if (!r.ok) throw new Error(`DigestClient: ${r.reason} ${r.detail}`);
  return r.authorizations.map((x) => x.value);
}

/** The two INVITEs of a digest login: without credentials (401), then with them. */
async function login(a: InboundAuthorizer, user: string, source: string, creds: { username: string; password: string; algorithms?: DigestAlgorithm[] }): Promise<InboundDecision> {
  const first = rejected(await decideInbound(a, request(user, source)), 401);
  return decideInbound(a, request(user, source, credentials(first, user, creds)));
}

const A = { username: USER_A, password: PASSWORD_A };
const B = { username: USER_B, password: PASSWORD_B };

beforeAll(async () => {
  carrier = await startFakeCarrier();
  // No SIP listener: decideInbound runs against the store directly.
  d = await startTestDaemon({ telco: { api_base_url: carrier.url }, sip: { enabled: false } });
  keyB = await d.newOrgKey('Other organization');

  // Organization A.
  ids.front = (await ok(d.api('POST', '/v1/agents', { name: 'Front desk' }))).id;
  ids.closed = (await ok(d.api('POST', '/v1/agents', { name: 'Closed desk', status: 'inactive' }))).id;
  ids.carrierA = await carrierAgent('Carrier desk A', CARRIER_A, ACCOUNT_A);
  ids.sharedA = await carrierAgent('Shared number A', SHARED_CARRIER, ACCOUNT_A);
  const trunk = async (body: Record<string, unknown>, key?: string) => (await ok(d.api('POST', '/v1/sip-trunks', { pbx: 'generic', ...body }, key === undefined ? {} : { key }))).id as string;
  ids.digestA = await trunk({ name: 'A digest', inbound_auth_type: 'digest', inbound_sip_username: USER_A, inbound_sip_password: PASSWORD_A });
  ids.aclA = await trunk({ name: 'A acl', inbound_auth_type: 'acl', inbound_acl: ['10.1.0.0/16'] });
  ids.hostLiteral = await trunk({ name: 'A host literal', inbound_auth_type: 'acl', inbound_host: HOST_LITERAL });
  ids.hostName = await trunk({ name: 'A host name', inbound_auth_type: 'acl', inbound_host: HOST_NAME });
  // A trunk that takes no inbound calls, though it has an ACL and credentials stored.
  ids.none = await trunk({ name: 'A none', inbound_auth_type: 'none', inbound_acl: ['203.0.113.0/24'], inbound_sip_username: USER_NONE, inbound_sip_password: 'none-secret-1' });
  const assign = (trunkId: string, body: Record<string, unknown>, key?: string) => ok(d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, body, key === undefined ? {} : { key }));
  await assign(ids.digestA, { agent_id: ids.front, number: DIGEST_NUMBER });
  await assign(ids.digestA, { agent_id: ids.closed, number: INACTIVE_NUMBER });
  await assign(ids.aclA, { agent_id: ids.front, alternate_number: ALTERNATE_NUMBER });
  await assign(ids.none, { agent_id: ids.front, number: '+15550006000', alternate_number: '+15550006001' });

  // Organization B.
  ids.agentB = (await ok(d.api('POST', '/v1/agents', { name: 'Desk B' }, { key: keyB }))).id;
  ids.sharedB = await carrierAgent('Shared number B', SHARED_CARRIER, ACCOUNT_B, keyB);
  await carrierAgent('Carrier desk B', CARRIER_B, ACCOUNT_B, keyB);
  ids.digestB = await trunk({ name: 'B digest', inbound_auth_type: 'digest', inbound_sip_username: USER_B, inbound_sip_password: PASSWORD_B }, keyB);
  ids.aclB = await trunk({ name: 'B acl', inbound_auth_type: 'acl', inbound_acl: ['10.2.0.0/16'] }, keyB);
  await assign(ids.digestB, { agent_id: ids.agentB, number: DIGEST_NUMBER_B }, keyB);
  await assign(ids.aclB, { agent_id: ids.agentB, alternate_number: ALTERNATE_NUMBER_B }, keyB);
});

afterAll(async () => {
  await d?.close();
  await carrier?.close();
});

describe('ACL trunks: chosen by source address', () => {
  it('a source inside an inbound_acl CIDR, dialling the trunk’s alternate_number: accepted without challenge', async () => {
    const dec = accepted(await decideInbound(authorizer(), request(ALTERNATE_NUMBER, ACL_SOURCE)));
    expect(dec.auth).toBe('acl');
    expect(dec.trunk).toMatchObject({ id: ids.aclA, authType: 'acl', name: 'A acl' });
    expect(dec.route).toMatchObject({ agentId: ids.front, via: 'alternate_number', number: ALTERNATE_NUMBER, trunkId: ids.aclA, agentActive: true });
    expect(dec.username).toBeUndefined();
  });

  it('an IPv4-mapped IPv6 source (dual-stack socket) matches the IPv4 CIDR', async () => {
    const dec = accepted(await decideInbound(authorizer(), request(ALTERNATE_NUMBER, `::ffff:${ACL_SOURCE}`)));
    expect(dec.trunk.id).toBe(ids.aclA);
  });

  it('a source equal to a literal inbound_host: the organization’s carrier number routes', async () => {
    const dec = accepted(await decideInbound(authorizer(), request(CARRIER_A, HOST_LITERAL)));
    expect(dec.trunk.id).toBe(ids.hostLiteral);
    expect(dec.route).toMatchObject({ agentId: ids.carrierA, via: 'carrier_number', number: CARRIER_A, trunkId: ids.hostLiteral });
  });

  it('a source equal to the resolved DNS name of inbound_host (injected resolver, cached)', async () => {
    resolved.length = 0;
    const a = authorizer();
    const dec = accepted(await decideInbound(a, request(CARRIER_A, HOST_NAME_ADDRESS)));
    expect(dec.trunk).toMatchObject({ id: ids.hostName, name: 'A host name' });
    expect(dec.route.via).toBe('carrier_number');
    accepted(await decideInbound(a, request(CARRIER_A, HOST_NAME_ADDRESS)));
    expect(resolved.filter((h) => h === HOST_NAME)).toEqual([HOST_NAME]); // once: cached
    // Another address is not that host: no ACL trunk, so a challenge.
    rejected(await decideInbound(a, request(CARRIER_A, '198.51.100.21')), 401);
  });

  it('the alternate_number route: ACL trunk and the carrier number of the trunk’s organization', async () => {
    const dec = accepted(await decideInbound(authorizer(), request(CARRIER_A, ACL_SOURCE)));
    expect(dec.route).toMatchObject({ orgId: dec.trunk.orgId, agentId: ids.carrierA, via: 'carrier_number', trunkId: ids.aclA });
  });

  it('an unknown number from an ACL source: 404 at once, naming the source, the trunk and the number', async () => {
    const dec = rejected(await decideInbound(authorizer(), request('+15550009999', ACL_SOURCE)), 404);
    expect(dec.headers).toEqual([]);
    expect(dec.quiet).toBe(false);
    expect(dec.why).toContain(ACL_SOURCE);
    expect(dec.why).toContain(ids.aclA);
    expect(dec.why).toContain('+15550009999');
    expect(dec.detail).toMatchObject({ source: ACL_SOURCE, user: '+15550009999', aclTrunks: [ids.aclA] });
  });

  it('a number a digest trunk routes, from an ACL source without credentials: 401 challenge, and the digest login then routes it', async () => {
    const a = authorizer();
    const first = rejected(await decideInbound(a, request(DIGEST_NUMBER, ACL_SOURCE)), 401);
    expect(first.quiet).toBe(true);
    expect(first.why).toContain(ACL_SOURCE);
    expect(first.why).toContain(DIGEST_NUMBER);
    expect(first.detail).toMatchObject({ aclTrunks: [ids.aclA] });
    const dec = accepted(await decideInbound(a, request(DIGEST_NUMBER, ACL_SOURCE, credentials(first, DIGEST_NUMBER, A))));
    expect(dec).toMatchObject({ auth: 'digest', username: USER_A, trunk: { id: ids.digestA } });
    expect(dec.route).toMatchObject({ via: 'assignment_number', agentId: ids.front });
  });
});

describe('digest trunks: chosen by username', () => {
  it('no ACL source and no credentials: 401 with one WWW-Authenticate per configured algorithm, most preferred first', async () => {
    const dec = rejected(await decideInbound(authorizer(), request(DIGEST_NUMBER, STRANGER)), 401);
    expect(dec.quiet).toBe(true);
    expect(dec.why).toContain(STRANGER);
    const challenges = challengesOf(dec);
    expect(challenges).toHaveLength(2);
    const { challenges: parsed, errors } = parseDigestChallenges(challenges);
    expect(errors).toEqual([]);
    expect(parsed.map((c) => c.algorithm)).toEqual(['SHA-256', 'MD5']);
    for (const c of parsed) expect(c).toMatchObject({ realm: 'callbridge', stale: false });
    expect(parsed[0]!.nonce).toBe(parsed[1]!.nonce);

    const md5Only = rejected(await decideInbound(authorizer({ digest: { algorithms: ['MD5'] } }), request(DIGEST_NUMBER, STRANGER)), 401);
    expect(challengesOf(md5Only)).toHaveLength(1);
    expect(challengesOf(md5Only)[0]).toMatch(/algorithm=MD5/);
  });

  it.each<[string, DigestAlgorithm[] | undefined]>([
    ['SHA-256', undefined],
    ['MD5', ['MD5']],
  ])('good credentials (%s): routed by the trunk’s assignment number', async (_name, algorithms) => {
    const dec = accepted(await login(authorizer(), DIGEST_NUMBER, STRANGER, { ...A, ...(algorithms ? { algorithms } : {}) }));
    expect(dec.auth).toBe('digest');
    expect(dec.username).toBe(USER_A);
    expect(dec.trunk).toMatchObject({ id: ids.digestA, authType: 'digest', name: 'A digest' });
    expect(dec.route).toMatchObject({ agentId: ids.front, via: 'assignment_number', number: DIGEST_NUMBER, trunkId: ids.digestA, agentActive: true });
  });

  it('good credentials: routed by a carrier number of the trunk’s organization', async () => {
    const dec = accepted(await login(authorizer(), CARRIER_A, STRANGER, A));
    expect(dec.route).toMatchObject({ agentId: ids.carrierA, via: 'carrier_number', number: CARRIER_A, trunkId: ids.digestA });
  });

  it('good credentials, unknown number: 404 naming the trunk, the username and the number', async () => {
    const dec = rejected(await login(authorizer(), '+15550009999', STRANGER, A), 404);
    expect(dec.why).toContain(ids.digestA);
    expect(dec.why).toContain(USER_A);
    expect(dec.why).toContain('+15550009999');
    expect(dec.detail).toMatchObject({ trunkId: ids.digestA, username: USER_A, auth: 'digest' });
  });

  it('an unknown username: 403 naming the username', async () => {
    const dec = rejected(await login(authorizer(), DIGEST_NUMBER, STRANGER, { username: 'nobody', password: PASSWORD_A }), 403);
    expect(dec.quiet).toBe(false);
    expect(dec.why).toContain('"nobody"');
    expect(dec.detail).toMatchObject({ username: 'nobody', digest: 'unknown_user' });
  });

  it('a wrong password: 403 naming the trunk’s username and the failed step', async () => {
    const dec = rejected(await login(authorizer(), DIGEST_NUMBER, STRANGER, { username: USER_A, password: 'not-the-password' }), 403);
    expect(dec.quiet).toBe(false);
    expect(dec.why).toMatch(/wrong response/);
    expect(dec.why).toContain(USER_A);
    expect(dec.why).toContain(ids.digestA);
    expect(dec.detail).toMatchObject({ username: USER_A, digest: 'bad_response' });
  });

  it('credentials made for another source address: the nonce is bound to the source, so a new challenge', async () => {
    const a = authorizer();
    const first = rejected(await decideInbound(a, request(DIGEST_NUMBER, STRANGER)), 401);
    const dec = rejected(await decideInbound(a, request(DIGEST_NUMBER, '198.51.100.78', credentials(first, DIGEST_NUMBER, A))), 401);
    expect(dec.detail).toMatchObject({ digest: 'bad_nonce' });
  });

  it('a correct response with an expired nonce: 401 stale=true, and the retry with the new nonce succeeds', async () => {
    let now = 1_700_000_000_000;
    const a = authorizer({ digest: { clock: { now: () => now }, nonceLifetimeMs: 60_000 } });
    const first = rejected(await decideInbound(a, request(DIGEST_NUMBER, STRANGER)), 401);
    const auth = credentials(first, DIGEST_NUMBER, A);
    now += 61_000;
    const stale = rejected(await decideInbound(a, request(DIGEST_NUMBER, STRANGER, auth)), 401);
    expect(stale.detail).toMatchObject({ digest: 'stale_nonce', username: USER_A });
    expect(stale.why).toMatch(/nonce expired/);
    expect(challengesOf(stale).length).toBe(2);
    for (const c of challengesOf(stale)) expect(c).toMatch(/stale=true/i);
    // Not counted as a failure: the client knew the password.
    expect(a.limiter.isBlocked(STRANGER)).toBe(false);
    accepted(await decideInbound(a, request(DIGEST_NUMBER, STRANGER, credentials(stale, DIGEST_NUMBER, A))));
  });

  it('an inactive agent: 480 after authentication, naming the number and the agent', async () => {
    const dec = rejected(await login(authorizer(), INACTIVE_NUMBER, STRANGER, A), 480);
    expect(dec.quiet).toBe(false);
    expect(dec.why).toContain(INACTIVE_NUMBER);
    expect(dec.why).toContain(ids.closed);
    expect(dec.why).toMatch(/not active/);
    expect(dec.detail).toMatchObject({ agentId: ids.closed, via: 'assignment_number', trunkId: ids.digestA });
  });
});

describe('failed-authentication rate limit', () => {
  it('after maxFailures bad logins the source is blocked: 403 even with good credentials, and the why says so', async () => {
    const a = authorizer({ limiter: { maxFailures: 3, blockMs: 60_000 } });
    const bad = { username: USER_A, password: 'guess' };
    const outcomes: Reject[] = [];
    for (let i = 0; i < 3; i++) outcomes.push(rejected(await login(a, DIGEST_NUMBER, STRANGER, bad), 403));
    expect(outcomes.map((o) => o.detail.blockedNow === true)).toEqual([false, false, true]);
    expect(a.limiter.isBlocked(STRANGER)).toBe(true);

    // Blocked: not even challenged, so no nonce for this source; credentials from a challenge
    // obtained just before the block are refused too.
    const noCreds = rejected(await decideInbound(a, request(DIGEST_NUMBER, STRANGER)), 403);
    expect(noCreds.why).toMatch(/blocked/);
    expect(noCreds.why).toContain(STRANGER);
    expect(noCreds.detail).toMatchObject({ blocked: true });

    const b = authorizer({ limiter: { maxFailures: 1, blockMs: 60_000 } });
    const challenge = rejected(await decideInbound(b, request(DIGEST_NUMBER, STRANGER)), 401);
    const good = credentials(challenge, DIGEST_NUMBER, A);
    rejected(await login(b, DIGEST_NUMBER, STRANGER, bad), 403);
    const blocked = rejected(await decideInbound(b, request(DIGEST_NUMBER, STRANGER, good)), 403);
    expect(blocked.why).toMatch(/blocked/);
    expect(blocked.detail).toMatchObject({ blocked: true });

    // Another source is not affected; ACL sources are decided before the limiter.
    accepted(await login(a, DIGEST_NUMBER, '198.51.100.99', A));
    accepted(await decideInbound(a, request(ALTERNATE_NUMBER, ACL_SOURCE)));
  });

  it('a successful login clears the count of earlier failures', async () => {
    const a = authorizer({ limiter: { maxFailures: 2, blockMs: 60_000 } });
    rejected(await login(a, DIGEST_NUMBER, STRANGER, { ...A, password: 'guess' }), 403);
    accepted(await login(a, DIGEST_NUMBER, STRANGER, A));
    const again = rejected(await login(a, DIGEST_NUMBER, STRANGER, { ...A, password: 'guess' }), 403);
    expect(again.detail.blockedNow).toBeUndefined();
    expect(a.limiter.isBlocked(STRANGER)).toBe(false);
  });
});

describe('inbound_auth_type none', () => {
  it('takes no calls: its inbound_acl matches no source, its username authenticates nothing, its numbers route nowhere', async () => {
    const a = authorizer();
    // The source in its CIDR is in no ACL trunk: challenged like any stranger.
    const dec = rejected(await decideInbound(a, request('+15550006001', NONE_SOURCE)), 401);
    expect(dec.detail.aclTrunks).toBeUndefined();
    // Its credentials are not a digest account.
    const cred = rejected(await login(a, '+15550006000', NONE_SOURCE, { username: USER_NONE, password: 'none-secret-1' }), 403);
    expect(cred.why).toContain(`"${USER_NONE}"`);
    // Its assignment numbers do not make an ACL miss a challenge (only digest trunks count).
    rejected(await decideInbound(a, request('+15550006000', ACL_SOURCE)), 404);
    rejected(await decideInbound(a, request('+15550006001', ACL_SOURCE)), 404);
  });
});

describe('organization isolation', () => {
  it('a digest trunk routes its own organization’s numbers only', async () => {
    const a = authorizer();
    rejected(await login(a, CARRIER_B, STRANGER, A), 404);
    rejected(await login(a, DIGEST_NUMBER_B, STRANGER, A), 404);
    rejected(await login(a, DIGEST_NUMBER, STRANGER, B), 404);
    rejected(await login(a, CARRIER_A, STRANGER, B), 404);
    const b = accepted(await login(a, CARRIER_B, STRANGER, B));
    expect(b.route).toMatchObject({ via: 'carrier_number', trunkId: ids.digestB });
    expect(b.route.orgId).not.toBe(accepted(await login(a, CARRIER_A, STRANGER, A)).route.orgId);
  });

  it('an ACL trunk routes neither another organization’s alternate_number nor its carrier numbers', async () => {
    const a = authorizer();
    rejected(await decideInbound(a, request(ALTERNATE_NUMBER_B, ACL_SOURCE)), 404);
    rejected(await decideInbound(a, request(ALTERNATE_NUMBER, ACL_SOURCE_B)), 404);
    // Another organization's carrier number is not routed by the ACL trunk; since that
    // organization has a digest trunk that would route it, the ACL source is challenged (401).
    for (const [number, source] of [
      [CARRIER_B, ACL_SOURCE],
      [CARRIER_A, ACL_SOURCE_B],
    ] as const) {
      const dec = await decideInbound(a, request(number, source));
      expect(dec.kind, `${number} from ${source}`).toBe('reject');
      expect((dec as Reject).status).toBe(401);
    }
    accepted(await decideInbound(a, request(ALTERNATE_NUMBER_B, ACL_SOURCE_B)));
  });

  it('one carrier number imported by two organizations goes to the agent of the trunk’s organization', async () => {
    const a = authorizer();
    expect(accepted(await decideInbound(a, request(SHARED_CARRIER, ACL_SOURCE))).route.agentId).toBe(ids.sharedA);
    expect(accepted(await decideInbound(a, request(SHARED_CARRIER, ACL_SOURCE_B))).route.agentId).toBe(ids.sharedB);
    expect(accepted(await login(a, SHARED_CARRIER, STRANGER, A)).route.agentId).toBe(ids.sharedA);
    expect(accepted(await login(a, SHARED_CARRIER, '198.51.100.79', B)).route.agentId).toBe(ids.sharedB);
  });
});

describe('number forms', () => {
  it('numberCandidates: as sent, decoded, without separators, with a leading +', () => {
    expect(numberCandidates('15550101000')).toEqual(['15550101000', '+15550101000']);
    expect(numberCandidates('1-555-010-1000')).toEqual(['1-555-010-1000', '15550101000', '+15550101000']);
    expect(numberCandidates('%2B1%20(555)%20010.1000')).toContain('+15550101000');
    expect(numberCandidates('*72#')).toEqual(['*72#']);
  });

  it.each(['15550101000', '1-555-010-1000', '+1 (555) 010-1000', '+1.555.010.1000', '%2B1%20555%20010%201000'])(
    '%s matches the E.164 carrier number, over ACL and over digest',
    async (dialled) => {
      const a = authorizer();
      const acl = accepted(await decideInbound(a, request(dialled, ACL_SOURCE)));
      expect(acl.route).toMatchObject({ via: 'carrier_number', number: CARRIER_A, agentId: ids.carrierA });
      const dig = accepted(await login(a, dialled, STRANGER, A));
      expect(dig.route).toMatchObject({ via: 'carrier_number', number: CARRIER_A, agentId: ids.carrierA });
    },
  );

  it('an assignment number and an alternate_number dialled without + still route', async () => {
    const a = authorizer();
    expect(accepted(await login(a, DIGEST_NUMBER.slice(1), STRANGER, A)).route).toMatchObject({ via: 'assignment_number', number: DIGEST_NUMBER });
    expect(accepted(await decideInbound(a, request(ALTERNATE_NUMBER.slice(1), ACL_SOURCE))).route).toMatchObject({ via: 'alternate_number', number: ALTERNATE_NUMBER });
  });
});

describe('the store is read per INVITE', () => {
  it('an assignment added through the API routes the very next INVITE; a deleted one stops routing', async () => {
    const a = authorizer();
    const number = '+15550007000';
    rejected(await decideInbound(a, request(number, ACL_SOURCE)), 404);
    const asg = await ok(d.api('POST', `/v1/sip-trunks/${ids.aclA}/assignments`, { agent_id: ids.front, alternate_number: number }));
    expect(accepted(await decideInbound(a, request(number, ACL_SOURCE))).route.via).toBe('alternate_number');
    await ok(d.api('DELETE', `/v1/sip-trunks/assignments/${asg.id}`), 204);
    rejected(await decideInbound(a, request(number, ACL_SOURCE)), 404);
  });

  it('a CIDR added to a trunk through the API matches at once', async () => {
    const a = authorizer();
    rejected(await decideInbound(a, request(ALTERNATE_NUMBER, '10.9.0.1')), 401);
    await ok(d.api('PATCH', `/v1/sip-trunks/${ids.aclA}`, { inbound_acl: ['10.1.0.0/16', '10.9.0.0/24'] }), 200);
    try {
      expect(accepted(await decideInbound(a, request(ALTERNATE_NUMBER, '10.9.0.1'))).trunk.id).toBe(ids.aclA);
    } finally {
      await ok(d.api('PATCH', `/v1/sip-trunks/${ids.aclA}`, { inbound_acl: ['10.1.0.0/16'] }), 200);
    }
  });
});
