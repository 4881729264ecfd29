/**
 * The carrier-number route of POST /v1/agents/{id}/dial (no sip_trunk_id): the agent's imported
 * carrier number (validated against a fake carrier speaking the carrier's REST protocol) belongs
 * to an account that `telco.outbound_trunks` maps to a SIP trunk; the call goes through that
 * trunk to a SIPp UAS (407 challenge, RTP echo), with the carrier number as the caller ID, and is
 * bridged; the agent's default_timeout ends it with BYE.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { sippAvailable, startSipp } from '../interop/sipp.ts';

const CARRIER_NUMBER = '+15557650001';

describe.skipIf(sippAvailable().skip)('dial from a carrier number', () => {
  let carrier: FakeCarrier;
  let d: TestDaemon;
  let trunkId: string;
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    // The trunk's id is what the setting names: create it, then restart with the setting.
    const first = await startTestDaemon({ telco: { api_base_url: carrier.url } });
    trunkId = (await first.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'carrier', inbound_auth_type: 'none', outbound_host: '127.0.0.1:9', outbound_sip_username: 'carrier-user', outbound_sip_password: 'carrier-secret' })).body.id;
    await first.stop();
    d = await startTestDaemon({ rtp: { address: '127.0.0.1' }, telco: { api_base_url: carrier.url, outbound_trunks: [{ account_sid: 'AC77', sip_trunk_id: trunkId }] } }, first.dataDir);
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  it('goes through the trunk of the number\'s carrier account, caller ID the carrier number', async () => {
    const uas = await startSipp({ scenario: 'uas-challenge-407', rtpEcho: true, timeoutMs: 30_000 });
    try {
      await uas.ready;
      expect((await d.api('PATCH', `/v1/sip-trunks/${trunkId}`, { outbound_host: `127.0.0.1:${uas.localPort}` })).status).toBe(200);
      carrier.addNumber('AC77', 'tok', CARRIER_NUMBER);
      const num = await d.api('POST', '/v1/telco/numbers', { phone_number: CARRIER_NUMBER, account_sid: 'AC77', auth_token: 'tok' });
      expect(num.status, num.text).toBe(201);
      const agent = (await d.api('POST', '/v1/agents', { name: 'Carrier caller', phone_number_id: num.body.id, first_message: 'Hello from the carrier line.', timeout_settings: { default_timeout: 2 } })).body;
      const r = await d.api('POST', `/v1/agents/${agent.id}/dial?number=%2B15550009999`);
      expect(r.status, r.text).toBe(200);
      const done = await uas.result;
      expect(done.code, done.describe()).toBe(0);
      const invite = done.requests('INVITE', 'received').at(-1)!;
      expect(invite.raw).toMatch(/^INVITE sip:\+15550009999@/);
      expect(invite.raw).toMatch(new RegExp(`^(From|f): <sip:\\${CARRIER_NUMBER}@`, 'm'));
      const end = Date.now() + 5000;
      let rec: any;
      for (;;) {
        rec = (await d.api('GET', `/v1/calls?outbound=true&agent_ids=${agent.id}`)).body.calls[0];
        if (rec?.ended_at) break;
        if (Date.now() > end) throw new Error('no ended record');
        await new Promise((res) => setTimeout(res, 100));
      }
      expect(rec).toMatchObject({ sip_trunk_id: trunkId, from: CARRIER_NUMBER, to: '+15550009999', party_number: '+15550009999', termination_reason: 'timeout', status: 'ended' });
      expect(rec.started_at).toBeDefined();
    } finally {
      uas.kill();
    }
  });

  it('an account with no trunk in telco.outbound_trunks answers 503 naming the setting', async () => {
    carrier.addNumber('AC88', 'tok', '+15557650002');
    const num = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15557650002', account_sid: 'AC88', auth_token: 'tok' });
    expect(num.status, num.text).toBe(201);
    const agent = (await d.api('POST', '/v1/agents', { name: 'Unmapped', phone_number_id: num.body.id })).body;
    const r = await d.api('POST', `/v1/agents/${agent.id}/dial?number=%2B15550009999`);
    expect(r.status).toBe(503);
    expect(r.body.error).toMatch(/account AC88: add it to telco.outbound_trunks/);
  });
});
