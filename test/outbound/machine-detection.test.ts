/**
 * An outbound run meets answering machines, over real sockets: the callees are SIPp
 * (test/interop/scenarios/uas-answer-play.xml), answering every call with a voicemail greeting
 * and beep by espeak-ng, streamed as PCMU RTP (bench/lib/amd-corpus.ts, as
 * test/bridge/machine-detection.test.ts). The run's machine_detection goes into each dial:
 *   hangup, retry on machine, max_attempts 2 -> each contact is called twice, every call ends
 *       machine_detected with machine_detection.result machine, the contact ends failed with
 *       last_outcome machine (src/domain/outbound.ts attemptOutcome);
 *   leave_message -> one call whose transcript has the message (variables filled in), the
 *       contact completed.
 * Both runs go at once against the same callees to keep the file short.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import alawmulaw from 'alawmulaw';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { espeakAvailable } from '../helpers/peer-availability.ts';
import { sippAvailable, startSipp, type SippProcess } from '../interop/sipp.ts';
import { composeAnswer, g711 } from '../../bench/lib/amd-corpus.ts';
import { agentOnTrunk, answered, createList, OUTBOUND_TEST_CONFIG, runCalls, startRun, untilRunStatus } from './harness.ts';

const sipp = sippAvailable();
const espeak = espeakAvailable();

async function voicemailGreeting(): Promise<Buffer> {
  const voice = { voice: 'en-us', wpm: 170, pitch: 50 };
  const { pcm } = await composeAnswer([
    { silenceMs: 400 },
    { speak: "Hi, you've reached Sam. I can't take your call right now, please leave a message after the tone.", ...voice },
    { silenceMs: 300 },
    { beepHz: 1000, beepMs: 400 },
    // Trailing silence keeps RTP flowing after the beep (the line stays open for the message).
    { silenceMs: 9000 },
  ]);
  return Buffer.from(alawmulaw.mulaw.encode(g711(pcm)));
}

const agentLines = (call: { transcript: { entries: Array<{ role?: string; message?: string }> } }) =>
  call.transcript.entries.filter((e) => e.role === 'assistant').map((e) => e.message);

describe.skipIf(sipp.skip || espeak.skip)(`an outbound run with answering-machine detection vs SIPp machines${espeak.ok ? '' : `: ${espeak.reason}`}`, () => {
  let d: TestDaemon;
  let machines: SippProcess;
  let agentId: string;
  let trunkId: string;
  beforeAll(async () => {
    machines = await startSipp({ scenario: 'uas-answer-play', audio: await voicemailGreeting(), calls: 100_000, timeoutMs: 60_000 });
    await machines.ready;
    d = await startTestDaemon(OUTBOUND_TEST_CONFIG);
    ({ agentId, trunkId } = await agentOnTrunk(d, machines.localPort));
  });
  afterAll(async () => {
    machines?.kill();
    await d?.close();
  });

  it('hangup retries a machine up to max_attempts (failed, last_outcome machine); leave_message completes after one call with the message', async () => {
    const hangupNumbers = [answered(801), answered(802)];
    const messageNumber = answered(811);
    const hangupList = await createList(d, agentId, trunkId, hangupNumbers);
    const messageList = await createList(d, agentId, trunkId, [messageNumber]);
    const hangupRun = await startRun(d, hangupList, { max_concurrent: 2, machine_detection: { mode: 'hangup' }, retry: { max_attempts: 2, backoff_secs: 0, on: ['machine'] } });
    const messageRun = await startRun(d, messageList, {
      max_concurrent: 1,
      machine_detection: { mode: 'leave_message', message: 'Hello {{customer}}, please call the clinic back.' },
      retry: { max_attempts: 2, backoff_secs: 0, on: ['machine'] },
    });

    const hung = await untilRunStatus(d, hangupList, hangupRun, 'completed', 40_000);
    expect(hung.counts).toMatchObject({ failed: 2, completed: 0, pending: 0 });
    const hangupContacts = (await d.api('GET', `/v1/outbound-lists/${hangupList}/runs/${hangupRun}/contacts`)).body as any[];
    for (const n of hangupNumbers) expect(hangupContacts.find((c) => c.phone_number === n), n).toMatchObject({ state: 'failed', attempts: 2, last_outcome: 'machine' });
    const hangupCalls = await runCalls(d, hangupRun);
    expect(hangupCalls.map((c) => c.to).sort()).toEqual([...hangupNumbers, ...hangupNumbers].sort());
    for (const listed of hangupCalls) {
      const call = (await d.api('GET', `/v1/calls/${listed.id}`)).body;
      expect(call.termination_reason, call.id).toBe('machine_detected');
      expect(call.machine_detection, call.id).toMatchObject({ result: 'machine' });
      expect(agentLines(call)).toEqual([]);
    }

    const left = await untilRunStatus(d, messageList, messageRun, 'completed', 40_000);
    expect(left.counts).toMatchObject({ completed: 1, failed: 0 });
    const [contact] = (await d.api('GET', `/v1/outbound-lists/${messageList}/runs/${messageRun}/contacts`)).body as any[];
    expect(contact).toMatchObject({ state: 'completed', attempts: 1, last_outcome: 'completed' });
    const messageCalls = await runCalls(d, messageRun);
    expect(messageCalls).toHaveLength(1);
    const call = (await d.api('GET', `/v1/calls/${messageCalls[0].id}`)).body;
    expect(call.termination_reason).toBe('voicemail_left');
    expect(call.machine_detection).toMatchObject({ result: 'machine', beep: true });
    expect(agentLines(call)).toEqual([`Hello c${messageNumber.slice(-4)}, please call the clinic back.`]);
  });
});
