/**
 * What the caller said goes to the agent (src/bridge/call-variables.ts): the session variables a
 * phone call brings. The rules alone first (names, cleaning, order, the user's variables winning),
 * then end to end with SIPp calling a real daemon: an ACL trunk whose header_variables is
 * ["X-Customer-Id", "Diversion"] into an agent whose first message uses {{caller_number}},
 * {{sip_x_customer_id}} and more; what the session used is read back from the call record's
 * transcript (the first message as spoken) and the session's stored variables. A header the
 * trunk does not list stays out, and a second organization's trunk, listing that header, applies
 * to its own calls only. Outbound: a dial through a SIPp UAS gets caller_number/called_number,
 * and a variable passed in the dial wins over ours.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callVariables, cleanValue, headerVariableName, MAX_CALL_VARIABLE_LENGTH, MAX_SESSION_VARIABLES, withCallVariables } from '../../src/bridge/call-variables.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { delay } from '../helpers/until.ts';
import { runSipp, sippAvailable, startSipp } from '../interop/sipp.ts';

describe('call variables: the rules', () => {
  it('names a header sip_ + lower case with every non-alphanumeric an underscore', () => {
    expect(headerVariableName('X-Customer-Id')).toBe('sip_x_customer_id');
    expect(headerVariableName('Diversion')).toBe('sip_diversion');
    expect(headerVariableName("P.Asserted~Id'x")).toBe('sip_p_asserted_id_x');
  });

  it('strips control characters and cuts values at the documented bound', () => {
    expect(cleanValue('a\r\nb\tc\u0000d\u007fe\u0085f')).toBe('abcdef');
    expect(cleanValue('  spaced  ')).toBe('spaced');
    expect(cleanValue('x'.repeat(1000))).toHaveLength(MAX_CALL_VARIABLE_LENGTH);
    // A cut inside a surrogate pair drops the lone half.
    const emoji = `${'x'.repeat(MAX_CALL_VARIABLE_LENGTH - 1)}\u{1F600}`;
    expect(cleanValue(emoji)).toBe('x'.repeat(MAX_CALL_VARIABLE_LENGTH - 1));
  });

  it('gives numbers, trunk and the listed headers present, several values joined with ", "', () => {
    const headers: Record<string, string[]> = { 'x-customer-id': ['C-1'], diversion: ['<sip:1@a>', '<sip:2@b>'], 'x-other': ['no'] };
    const vars = callVariables({
      callerNumber: '+15550001111',
      calledNumber: '800',
      trunk: { id: 't-1', name: 'main', header_variables: ['X-Customer-Id', 'Diversion', 'X-Absent'] },
      header: (n) => headers[n.toLowerCase()] ?? [],
    });
    expect(vars).toEqual([
      { key: 'caller_number', value: '+15550001111' },
      { key: 'called_number', value: '800' },
      { key: 'trunk_id', value: 't-1' },
      { key: 'trunk_name', value: 'main' },
      { key: 'sip_x_customer_id', value: 'C-1' },
      { key: 'sip_diversion', value: '<sip:1@a>, <sip:2@b>' },
    ]);
  });

  it('lets the user\'s variables win on a name clash and keeps within the session limit', () => {
    const ours = callVariables({ callerNumber: '1', calledNumber: '2' });
    expect(withCallVariables(ours, [{ key: 'called_number', value: 'mine' }])).toEqual([
      { key: 'caller_number', value: '1' },
      { key: 'called_number', value: 'mine' },
    ]);
    const full = Array.from({ length: MAX_SESSION_VARIABLES - 1 }, (_, i) => ({ key: `k${i}`, value: 'v' }));
    const merged = withCallVariables(ours, full);
    expect(merged).toHaveLength(MAX_SESSION_VARIABLES);
    expect(merged[0]).toEqual({ key: 'caller_number', value: '1' });
  });
});

/** Polls an async condition; fails naming `what` after `ms`. */
async function eventually(cond: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(100);
  }
}

const sipp = sippAvailable();
// Short numbers and values: the first message is spoken by the local TTS, and the transcript holds
// what was spoken before the caller hung up.
const NUMBER_A = '7101';
const NUMBER_B = '7102';
const CALLER = '2001';

describe.skipIf(sipp.skip)('call variables end to end (SIPp into a real daemon)', () => {
  let d: TestDaemon;
  let keyB: string;
  let trunkA: { id: string };
  let agentA: { id: string };
  let agentB: { id: string };

  beforeAll(async () => {
    d = await startTestDaemon({ rtp: { address: '127.0.0.1' } });
    agentA = (
      await d.api('POST', '/v1/agents', {
        name: 'Desk A',
        first_message: 'Customer {{sip_x_customer_id}} from {{caller_number}}.',
      })
    ).body;
    trunkA = (
      await d.api('POST', '/v1/sip-trunks', {
        pbx: 'generic',
        name: 'pbx a',
        inbound_auth_type: 'acl',
        inbound_acl: ['127.0.0.1/32'],
        header_variables: ['X-Customer-Id', 'Diversion'],
      })
    ).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkA.id}/assignments`, { agent_id: agentA.id, alternate_number: NUMBER_A })).status).toBe(201);
    // Another organization, its ACL trunk on the same source, mapping X-Not-Mapped (and not X-Customer-Id).
    keyB = await d.newOrgKey('org b');
    agentB = (await d.api('POST', '/v1/agents', { name: 'Desk B', first_message: 'Note {{sip_x_not_mapped}}.' }, { key: keyB })).body;
    const trunkB = (
      await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx b', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'], header_variables: ['X-Not-Mapped'] }, { key: keyB })
    ).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkB.id}/assignments`, { agent_id: agentB.id, alternate_number: NUMBER_B }, { key: keyB })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
  });

  async function call(number: string, key?: string) {
    const remote = `127.0.0.1:${d.daemon.sip!.port}`;
    const r = await runSipp({ scenario: 'inbound-acl-headers', remote, service: number, keys: { caller: CALLER, customer: 'C42', note: 'N7' }, durationMs: 6000 });
    expect(r.code, r.describe()).toBe(0);
    expect(r.failedCalls ?? 0, r.describe()).toBe(0);
    let rec: any;
    await eventually(async () => {
      const list = await d.api('GET', `/v1/calls?outbound=false&source=sip`, undefined, key ? { key } : {});
      rec = list.body.calls?.find((c: any) => c.to === number && c.ended_at);
      return rec !== undefined;
    }, `an ended call record to ${number}`);
    return rec;
  }

  it('the trunk\'s listed headers, the numbers and the trunk reach the first message; an unlisted header does not', async () => {
    const rec = await call(NUMBER_A);
    expect(rec).toMatchObject({ agent_id: agentA.id, sip_trunk_id: trunkA.id, from: CALLER, to: NUMBER_A });
    expect(rec.transcript.entries[0]).toMatchObject({ role: 'assistant', message: `Customer C42 from ${CALLER}.` });
    const session = (await d.daemon.store.sessions.get(rec.id))!;
    expect(session.variables).toEqual([
      { key: 'caller_number', value: CALLER },
      { key: 'called_number', value: NUMBER_A },
      { key: 'trunk_id', value: trunkA.id },
      { key: 'trunk_name', value: 'pbx a' },
      { key: 'sip_x_customer_id', value: 'C42' },
      { key: 'sip_diversion', value: '<sip:+15550000001@pbx.example>;reason=unconditional, <sip:+15550000002@pbx.example>;reason=user-busy' },
    ]);
  });

  it('another organization\'s trunk maps only its own list, for its own calls', async () => {
    const rec = await call(NUMBER_B, keyB);
    expect(rec.agent_id).toBe(agentB.id);
    expect(rec.transcript.entries[0]).toMatchObject({ role: 'assistant', message: 'Note N7.' });
    const keys = (await d.daemon.store.sessions.get(rec.id))!.variables.map((v) => v.key);
    expect(keys).toContain('sip_x_not_mapped');
    expect(keys).not.toContain('sip_x_customer_id');
    expect(keys).not.toContain('sip_diversion');
  });

  it('outbound: a dial sets caller_number and called_number; a variable passed in the dial wins', async () => {
    const server = await startSipp({ scenario: 'uas-challenge-407', rtpEcho: true, timeoutMs: 30_000 });
    try {
      await server.ready;
      const trunk = (
        await d.api('POST', '/v1/sip-trunks', {
          pbx: 'generic',
          name: 'carrier out',
          inbound_auth_type: 'none',
          outbound_host: `127.0.0.1:${server.localPort}`,
          outbound_sip_username: 'carrier-user',
          outbound_sip_password: 'carrier-secret',
          header_variables: ['X-Customer-Id'],
        })
      ).body;
      const agent = (
        await d.api('POST', '/v1/agents', { name: 'Caller', first_message: 'From {{caller_number}} to {{called_number}}, {{trunk_name}}.', timeout_settings: { default_timeout: 6 } })
      ).body;
      expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, number: '701' })).status).toBe(201);
      const r = await d.api('POST', `/v1/agents/${agent.id}/dial?number=702&sip_trunk_id=${trunk.id}&caller_id=701`, {
        variables: [{ key: 'trunk_name', value: 'my label' }],
      });
      expect(r.status, r.text).toBe(200);
      const uas = await server.result;
      expect(uas.code, uas.describe()).toBe(0);
      let rec: any;
      await eventually(async () => {
        rec = (await d.api('GET', `/v1/calls?outbound=true&agent_ids=${agent.id}`)).body.calls?.[0];
        return rec?.ended_at !== undefined && rec?.ended_at !== null;
      }, 'an ended outbound call record');
      expect(rec.transcript.entries[0]).toMatchObject({ role: 'assistant', message: 'From 701 to 702, my label.' });
      const vars = (await d.daemon.store.sessions.get(rec.id))!.variables;
      expect(vars).toEqual([
        { key: 'caller_number', value: '701' },
        { key: 'called_number', value: '702' },
        { key: 'trunk_id', value: trunk.id },
        { key: 'trunk_name', value: 'my label' },
      ]);
    } finally {
      server.kill();
    }
  });
});
