/**
 * Interop: baresip (Debian package, a real SIP phone standing in for a PBX) REGISTERs with
 * callbridge's daemon on loopback using the digest credentials of a trunk that has no
 * outbound_host, then `POST /v1/agents/{id}/dial` through that trunk rings baresip at its
 * registered Contact; baresip answers by itself (answermode=auto), the call is bridged to the
 * agent's voice session, and baresip hears the agent's first message (the embedded eSpeak voice)
 * before its own WAV ends and it hangs up.
 *
 * Checks: (1) baresip's REGISTER is challenged and then accepted (the daemon saw a REGISTER
 * without and one with Authorization; the trunk reads `registered`); (2) the daemon's INVITE goes
 * to the Contact baresip registered (Request-URI), with the dialled number in To; (3) baresip
 * reports the call established and what it heard has speech in it; (4) GET /v1/calls has the
 * call: outbound, on the trunk, started and ended.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { SipRequest } from '../../src/sip/message/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { baresipAvailable, readWavPcm16, rmsDbfs, startBaresip, toneWav, type BaresipProcess } from './baresip/baresip.ts';

const bs = baresipAvailable();
const USER = 'registering-pbx';
const PASSWORD = 'registrar-interop-secret';
const AGENT_NUMBER = '+15550003000';
const DIALLED = '+15557654321';
/** baresip's WAV: silence, so what it records is only what came from callbridge. */
const CALL_S = 6;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(bs.skip)(`callbridge as the registrar of baresip, then a dial through the trunk${bs.ok ? ` (${bs.version})` : `: skipped, ${bs.reason}`}`, () => {
  let d: TestDaemon;
  let agentId: string;
  let trunkId: string;
  let phone: BaresipProcess | undefined;
  const requests: SipRequest[] = [];
  /** Requests the daemon sent (a spy that calls through). */
  let sentRequests: () => SipRequest[] = () => [];

  beforeAll(async () => {
    await new LocalEspeakProvider().warmUp();
    // MD5 only: baresip 1.0.0 gives up on a SHA-256 challenge (callbridge-baresip.test.ts).
    d = await startTestDaemon({ sip: { digest_algorithms: 'MD5' } });
    const transport = d.daemon.sip!.ua.transport;
    transport.on('request', (inbound) => requests.push(inbound.message));
    const spy = vi.spyOn(transport, 'send');
    sentRequests = () => spy.mock.calls.map((c) => c[0]).filter((m): m is SipRequest => m instanceof SipRequest);
    const agent = await d.api('POST', '/v1/agents', { name: 'Calls the PBX', first_message: 'Hello from the agent, this is a test call.' });
    expect(agent.status, agent.text).toBe(201);
    agentId = agent.body.id;
    const trunk = await d.api('POST', '/v1/sip-trunks', { pbx: '3cx', name: 'registering PBX', inbound_auth_type: 'digest', inbound_sip_username: USER, inbound_sip_password: PASSWORD });
    expect(trunk.status, trunk.text).toBe(201);
    expect(trunk.body.outbound_host).toBe('');
    trunkId = trunk.body.id;
    const asg = await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: AGENT_NUMBER });
    expect(asg.status, asg.text).toBe(201);
  }, 30_000);

  afterAll(async () => {
    phone?.kill();
    await phone?.result;
    await d?.close();
  });

  it('baresip registers with the trunk credentials; a dial through the trunk rings it, it answers, and hears the agent', async () => {
    const port = d.daemon.sip!.port;
    phone = await startBaresip({
      account: { user: USER, password: PASSWORD, domain: `127.0.0.1:${port}` },
      registerSecs: 120,
      audio: toneWav(CALL_S, 440, 0),
      maxSeconds: 40,
      quitAfterCall: true,
    });
    await phone.ready;

    // (1) Registered: challenged, then accepted.
    const deadline = Date.now() + 10_000;
    let status = '';
    while (Date.now() < deadline) {
      status = (await d.api('GET', `/v1/sip-trunks/${trunkId}`)).body.inbound_registration_status;
      if (status === 'registered') break;
      await sleep(100);
    }
    const registers = requests.filter((r) => r.method === 'REGISTER');
    const context = () => `REGISTERs seen: ${registers.length}`;
    expect(status, context()).toBe('registered');
    expect(registers[0]!.getAll('Authorization'), context()).toEqual([]);
    expect(registers.some((r) => r.getAll('Authorization').join(',').includes(`username="${USER}"`)), context()).toBe(true);
    const contact = registers.at(-1)!.contacts[0]!.uri.toString();

    // (2) The dial rings baresip at its Contact.
    const since = Date.now();
    const dial = await d.api('POST', `/v1/agents/${agentId}/dial?sipTrunkId=${trunkId}&number=${encodeURIComponent(DIALLED)}`);
    expect(dial.status, dial.text).toBe(200);

    // (3) baresip answers, hears the agent, hangs up at the end of its WAV.
    const result = await phone.result;
    phone = undefined;
    expect(result.established, result.describe()).toBe(true);
    expect(result.terminated, result.describe()).toMatch(/terminated/);
    const invite = sentRequests().find((r) => r.method === 'INVITE');
    expect(invite, result.describe()).toBeDefined();
    expect(invite!.uri.toString()).toBe(contact);
    expect(invite!.to.uri.kind === 'sip' ? invite!.to.uri.user : '').toBe(DIALLED);
    const heard = readWavPcm16(result.received!);
    expect(heard.rate).toBe(8000);
    expect(rmsDbfs(heard.samples), result.describe()).toBeGreaterThan(-35);

    // (4) The call record: outbound through the trunk, answered and ended.
    let rec: any;
    for (const until = Date.now() + 5000; Date.now() < until; await sleep(100)) {
      const res = await d.api('GET', '/v1/calls?page_size=100');
      rec = (res.body.calls as any[]).find((c) => c.sip_trunk_id === trunkId && Date.parse(c.created_at) >= since - 1000);
      if (rec?.ended_at) break;
    }
    const json = JSON.stringify(rec, null, 1);
    expect(rec, 'no call on the trunk in GET /v1/calls').toBeDefined();
    expect(rec.direction, json).toBe('outbound');
    expect(rec.agent_id, json).toBe(agentId);
    expect(rec.to, json).toBe(DIALLED);
    expect(rec.started_at, json).toBeTruthy();
    expect(rec.ended_at, json).toBeTruthy();
  }, 60_000);
});
