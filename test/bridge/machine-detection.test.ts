/**
 * Answering-machine detection on real calls: POST /v1/agents/{id}/dial with our option
 * machineDetection, through a trunk whose far end is SIPp (uas-answer-play.xml), which answers
 * and streams espeak-ng audio as PCMU RTP (bench/lib/amd-corpus.ts: 8 kHz, G.711):
 *   (a) a person: "Hello?" then silence -> human; the first message is played to its end (the
 *       call record's transcript has it: an agent line is written once heard), then the agent's
 *       silence timeout ends the call;
 *   (b) a voicemail greeting with a beep, mode hangup -> the call ends machine_detected at once,
 *       the agent never spoke;
 *   (c) the same, mode leave_message -> the message (its variables filled in) is spoken after
 *       the beep (the outcome's beep: true is fixed when the message starts), then voicemail_left.
 * The record's machine_detection is read from GET /v1/calls/{id} and the list. Also the dial's
 * 400s for a bad option. Stage rules on virtual time: test/agent/runtime/machine-detection.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import alawmulaw from 'alawmulaw';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { espeakAvailable } from '../helpers/peer-availability.ts';
import { sippAvailable, startSipp } from '../interop/sipp.ts';
import { composeAnswer, g711 } from '../../bench/lib/amd-corpus.ts';

const sipp = sippAvailable();
const espeak = espeakAvailable();
const NUMBER = '+15550008101';

async function ulaw(parts: Parameters<typeof composeAnswer>[0]): Promise<Buffer> {
  const { pcm } = await composeAnswer(parts);
  return Buffer.from(alawmulaw.mulaw.encode(g711(pcm)));
}

describe.skipIf(sipp.skip || espeak.skip)(`answering-machine detection on outbound calls vs SIPp${espeak.ok ? '' : `: ${espeak.reason}`}`, () => {
  let d: TestDaemon;
  let agentId: string;
  let human: Buffer;
  let machine: Buffer;
  beforeAll(async () => {
    d = await startTestDaemon({ rtp: { address: '127.0.0.1' } });
    // A silence timeout of 1 s with one strike: the human's call ends once the first message was heard.
    const agent = await d.api('POST', '/v1/agents', {
      name: 'Dialer',
      first_message: 'Hi, this is the clinic.',
      vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 1 },
      timeout_settings: { default_timeout: 60, timeout_action: 'end_call', silence_counter: 1, silence_timeout_action: 'end_call' },
    });
    expect(agent.status, agent.text).toBe(201);
    agentId = agent.body.id;
    const voice = { voice: 'en-us', wpm: 170, pitch: 50 };
    // Trailing silence keeps RTP flowing after the answer's words (the callee's line stays open).
    human = await ulaw([{ silenceMs: 400 }, { speak: 'Hello?', ...voice }, { silenceMs: 9000 }]);
    machine = await ulaw([
      { silenceMs: 400 },
      { speak: "Hi, you've reached Sam. I can't take your call right now, please leave a message after the tone.", ...voice },
      { silenceMs: 300 },
      { beepHz: 1000, beepMs: 400 },
      { silenceMs: 9000 },
    ]);
  });
  afterAll(async () => {
    await d?.close();
  });

  async function dialTo(audio: Buffer, machineDetection: Record<string, unknown>, extra: { variables?: unknown[] } = {}) {
    const uas = await startSipp({ scenario: 'uas-answer-play', audio, timeoutMs: 25_000 });
    await uas.ready;
    const trunk = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: `callee ${uas.localPort}`, inbound_auth_type: 'none', outbound_host: `127.0.0.1:${uas.localPort}` });
    expect(trunk.status, trunk.text).toBe(201);
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.body.id}/assignments`, { agent_id: agentId, alternate_number: `${NUMBER}${uas.localPort}` })).status).toBe(201);
    const r = await d.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent(NUMBER)}&sipTrunkId=${trunk.body.id}`, { machineDetection, ...extra });
    expect(r.status, r.text).toBe(200);
    const result = await uas.result;
    expect(result.code, result.describe()).toBe(0);
    // The call's end is stored with the BYE; read it back.
    const list = (await d.api('GET', `/v1/calls?outbound=true&agent_ids=${agentId}`)).body.calls as Array<{ id: string; sip_trunk_id?: string }>;
    const id = list.find((c) => c.sip_trunk_id === trunk.body.id)!.id;
    for (let i = 0; i < 50; i++) {
      const call = (await d.api('GET', `/v1/calls/${id}`)).body;
      if (call.status === 'ended') return { call, listed: list.find((c) => c.id === id)! };
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error('the call record never ended');
  }

  const agentLines = (call: { transcript: { entries: Array<{ role?: string; message?: string }> } }) =>
    call.transcript.entries.filter((e) => e.role === 'assistant').map((e) => e.message);

  it('a person says hello: human, then the first message is heard', async () => {
    const { call } = await dialTo(human, { mode: 'hangup' });
    expect(call.machine_detection).toMatchObject({ result: 'human', beep: false });
    expect(call.machine_detection.decided_after_ms).toBeLessThan(3000);
    expect(agentLines(call)).toEqual(['Hi, this is the clinic.']);
    expect(call.termination_reason).toBe('silence_timeout');
  });

  it('a voicemail greeting, mode hangup: the call ends machine_detected and the agent never spoke', async () => {
    const { call, listed } = await dialTo(machine, { mode: 'hangup' });
    expect(call.termination_reason).toBe('machine_detected');
    expect(call.machine_detection).toMatchObject({ result: 'machine' });
    expect(call.machine_detection.decided_after_ms).toBeLessThan(5000);
    expect(listed).toMatchObject({ machine_detection: call.machine_detection });
    expect(agentLines(call)).toEqual([]);
  });

  it('a voicemail greeting, mode leave_message: the message after the beep, then voicemail_left', async () => {
    const { call } = await dialTo(machine, { mode: 'leave_message', message: 'Hello {{name}}, please call the clinic back.' }, { variables: [{ key: 'name', value: 'Sam' }] });
    expect(call.termination_reason).toBe('voicemail_left');
    expect(call.machine_detection).toMatchObject({ result: 'machine', beep: true });
    expect(agentLines(call)).toEqual(['Hello Sam, please call the clinic back.']);
  });

  it('a bad machineDetection is a 400 naming it', async () => {
    const dial = (q: string, body: unknown) => d.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent(NUMBER)}${q}`, body);
    const bad = await dial('', { machineDetection: { mode: 'guess' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/machineDetection/);
    expect((await dial('', { machineDetection: { mode: 'hangup', message: 'hi' } })).body.error).toMatch(/message applies to mode leave_message/);
    expect((await dial('&machineDetection=hangup', { machineDetection: { mode: 'leave_message' } })).body.error).toMatch(/querystring names mode hangup/);
    expect((await dial('&machineDetection=sometimes', {})).status).toBe(400);
  });
});
