/**
 * Answering-machine detection in the joined runtime (src/agent/runtime/machine-detection.ts), on
 * virtual time with the real energy VAD, a scripted model and recognizer and a TTS of 200 ms per
 * word: an outbound session whose dial asked for detection holds its first message until the
 * callee is judged; a human hears it after their "hello?"; a machine is hung up on, or, with
 * leave_message, hears the message after its beep (or after its greeting and a silence) and the
 * session ends. The real-socket version (SIPp answering POST dial): test/bridge/machine-detection.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { EnergyVad } from '../../../src/agent/providers/vad/energy.ts';
import { AgentRuntime, type RuntimeDeps } from '../../../src/agent/runtime/index.ts';
import { BEEP_WAIT_MS } from '../../../src/agent/runtime/machine-detection.ts';
import type { ServerEvent, SessionEndReason } from '../../../src/session/protocol.ts';
import type { SessionContext } from '../../../src/session/runtime-contract.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { concat, silence, voice } from '../vad/signals.ts';
import { agentFixture, fakeStt, feedAudio, scriptedModel, testLogger, text } from './harness.ts';

/** A 24 kHz sine at about -12 dBFS (a voicemail beep). */
function beep(secs: number, hz = 1000): Int16Array {
  const out = new Int16Array(Math.round(24_000 * secs));
  for (let i = 0; i < out.length; i++) out[i] = Math.round(8000 * Math.sin((2 * Math.PI * hz * i) / 24_000));
  return out;
}

function outbound(ctx: Partial<SessionContext>, deps: Partial<RuntimeDeps> = {}) {
  const time = new VirtualTime();
  const sent: Array<ServerEvent & { at: number }> = [];
  const ended: Array<{ reason: SessionEndReason; at: number }> = [];
  const { model, calls } = scriptedModel([[text('How can I help?')]]);
  const stt = fakeStt(() => undefined);
  const { log } = testLogger();
  const rt = new AgentRuntime(
    { sessionId: 's1', orgId: 'o1', agent: agentFixture(), versionId: null, nodes: [], callerId: '+15550000000', variables: [{ key: 'name', value: 'Ada' }], direction: 'outbound', clientAnswersTools: false, ...ctx },
    { send: (e) => void sent.push({ ...e, at: time.now() }), end: (reason) => void ended.push({ reason, at: time.now() }) },
    { stt: stt.provider, tts: () => wordTts200(), model: () => model, createVad: (s) => new EnergyVad(s), createNoiseSuppressor: () => undefined, toolTimeoutMs: 10_000, logger: log, clock: time, timers: time, ...deps },
  );
  const t0 = time.now();
  const play = (pcm: Int16Array) => feedAudio(time, pcm, (f) => rt.inputAudio(f));
  const of = <T extends ServerEvent['type']>(type: T) => sent.filter((e) => e.type === type) as Array<Extract<ServerEvent, { type: T }> & { at: number }>;
  const finals = () => of('response_text').filter((e) => e.data.is_final).map((e) => e.data.text);
  return { time, rt, sent, ended, calls, stt, t0, play, of, finals };
}

function wordTts200() {
  return {
    name: 'words',
    async *synthesize(req: { text: string; signal: AbortSignal }) {
      for (const _w of req.text.split(/\s+/)) {
        if (req.signal.aborted) return;
        yield new Int16Array(4800).fill(100);
      }
    },
  };
}

describe('answering-machine detection in the runtime', () => {
  it('a human: "hello?" then silence -> human; the first message only then, and the hello is kept but not answered', async () => {
    const s = outbound({ machineDetection: { mode: 'hangup' } });
    await s.play(concat(silence(0.5), voice(0.6, { levelDb: -20 })));
    // Nothing of the agent while the callee is being judged.
    expect(s.of('response_audio')).toEqual([]);
    await s.play(silence(1.0));
    const [decision] = s.of('machine_detection');
    expect(decision?.data).toEqual({ result: 'human', decided_after_ms: expect.any(Number), beep: false });
    // Decided at the VAD's end of the hello: 0.5 + 0.6 + stop_secs 0.8 after the answer (+ a frame).
    expect(decision!.data.decided_after_ms).toBeGreaterThanOrEqual(1800);
    expect(decision!.data.decided_after_ms).toBeLessThanOrEqual(2000);
    const firstAudio = s.of('response_audio')[0];
    expect(firstAudio?.at).toBeGreaterThanOrEqual(decision!.at);
    s.stt.transcript('Hello?');
    await s.time.run(3000);
    expect(s.finals()).toEqual(['Hello there. How can I help?']);
    expect(s.calls).toHaveLength(0);
    expect(s.rt.transcript().map((e) => [e.role, e.text])).toEqual([
      ['user', 'Hello?'],
      ['agent', 'Hello there. How can I help?'],
    ]);
    expect(s.rt.machineDetection()).toEqual(decision!.data);
    expect(s.ended).toEqual([]);
    s.rt.close();
  });

  it('a machine, mode hangup: a greeting longer than 2 s ends the session machine_detected, and the agent never spoke', async () => {
    const s = outbound({ machineDetection: { mode: 'hangup' } });
    await s.play(concat(silence(0.4), voice(3.5, { levelDb: -20, syllableHz: 4, syllableFloor: 0.3 })));
    expect(s.ended.map((e) => e.reason)).toEqual(['machine_detected']);
    const outcome = s.rt.machineDetection();
    expect(outcome).toMatchObject({ result: 'machine', beep: false });
    // 0.4 s of lead, then greeting 2 s + stop_secs 0.8 of VAD turn: about 3.2 s after the answer.
    expect(outcome!.decided_after_ms).toBeGreaterThanOrEqual(3100);
    expect(outcome!.decided_after_ms).toBeLessThanOrEqual(3400);
    expect(s.of('response_audio')).toEqual([]);
    expect(s.of('response_text')).toEqual([]);
  });

  it('a machine, mode leave_message, with a beep: the message (variables filled in) right after the beep, then voicemail_left', async () => {
    const s = outbound({ machineDetection: { mode: 'leave_message', message: 'Hi {{name}}, please call us back.' } });
    const greetingEnd = 0.4 + 3.5;
    await s.play(concat(silence(0.4), voice(3.5, { levelDb: -20, syllableHz: 4, syllableFloor: 0.3 }), silence(0.3)));
    expect(s.of('machine_detection')[0]?.data.result).toBe('machine');
    // Still greeting (the VAD turn open) or waiting for the beep: nothing said yet.
    expect(s.of('response_audio')).toEqual([]);
    const beepAt = s.time.now();
    await s.play(beep(0.4));
    await s.play(silence(0.2));
    const first = s.of('response_audio')[0];
    expect(first, 'the message starts after the beep').toBeDefined();
    // The beep ended at beepAt + 400 ms; the detector hears its end within a block (20 ms) or two.
    expect(first!.at).toBeGreaterThanOrEqual(beepAt + 400);
    expect(first!.at).toBeLessThanOrEqual(beepAt + 460);
    expect(first!.at - s.t0).toBeGreaterThan(greetingEnd * 1000);
    await s.time.run(3000);
    expect(s.finals()).toEqual(['Hi Ada, please call us back.']);
    expect(s.ended.map((e) => e.reason)).toEqual(['voicemail_left']);
    expect(s.rt.machineDetection()).toMatchObject({ result: 'machine', beep: true });
    expect(s.rt.transcript().filter((e) => e.role === 'agent').map((e) => e.text)).toEqual(['Hi Ada, please call us back.']);
  });

  it('leave_message with no beep: the message after the greeting ends and BEEP_WAIT_MS of silence', async () => {
    const s = outbound({ machineDetection: { mode: 'leave_message', message: 'Please call back.' } });
    await s.play(concat(silence(0.4), voice(3.5, { levelDb: -20, syllableHz: 4, syllableFloor: 0.3 })));
    const speechEnd = s.time.now();
    await s.play(silence(4));
    const stopped = s.of('speech_stopped')[0]!;
    // The VAD ends the greeting stop_secs after it, then BEEP_WAIT_MS of waiting for a beep.
    expect(stopped.at - speechEnd).toBeGreaterThanOrEqual(780);
    const first = s.of('response_audio')[0]!;
    expect(first.at - stopped.at).toBeGreaterThanOrEqual(BEEP_WAIT_MS);
    expect(first.at - stopped.at).toBeLessThanOrEqual(BEEP_WAIT_MS + 40);
    await s.time.run(2000);
    expect(s.ended.map((e) => e.reason)).toEqual(['voicemail_left']);
    expect(s.rt.machineDetection()).toMatchObject({ result: 'machine', beep: false });
  });

  it('a voicemail phrase in the transcript decides machine before the greeting is long', async () => {
    const s = outbound({ machineDetection: { mode: 'hangup' } });
    await s.play(concat(silence(0.4), voice(1.0, { levelDb: -20 })));
    s.stt.transcript("Hi, you've reached Sam", false);
    await s.time.run(20);
    expect(s.ended.map((e) => e.reason)).toEqual(['machine_detected']);
    expect(s.rt.machineDetection()!.decided_after_ms).toBeLessThan(1600);
  });

  it('silence: unknown after 5 s, and then the first message (the conversation goes on)', async () => {
    const s = outbound({ machineDetection: { mode: 'hangup' } });
    await s.play(silence(5.2));
    expect(s.of('machine_detection').map((e) => e.data)).toEqual([{ result: 'unknown', decided_after_ms: 5000, beep: false }]);
    await s.time.run(2000);
    expect(s.finals()).toEqual(['Hello there. How can I help?']);
    expect(s.ended).toEqual([]);
    s.rt.close();
  });

  it('the session.amd_* settings: the cap, the greeting length and the wait for a beep', async () => {
    const capped = outbound({ machineDetection: { mode: 'hangup' } }, { machineDetection: { greetingMs: 2000, maxMs: 2000, beepWaitMs: 1500 } });
    await capped.play(silence(2.2));
    expect(capped.of('machine_detection').map((e) => e.data)).toEqual([{ result: 'unknown', decided_after_ms: 2000, beep: false }]);
    capped.rt.close();
    // A 3.5 s greeting under a 4 s limit is a human's; a 0.5 s wait for the beep.
    const lenient = outbound({ machineDetection: { mode: 'hangup' } }, { machineDetection: { greetingMs: 4000, maxMs: 8000, beepWaitMs: 500 } });
    await lenient.play(concat(silence(0.4), voice(3.5, { levelDb: -20, syllableHz: 4, syllableFloor: 0.3 }), silence(1)));
    expect(lenient.of('machine_detection')[0]?.data.result).toBe('human');
    lenient.rt.close();
    const quick = outbound({ machineDetection: { mode: 'leave_message', message: 'Call back.' } }, { machineDetection: { greetingMs: 2000, maxMs: 5000, beepWaitMs: 500 } });
    await quick.play(concat(silence(0.4), voice(3.5, { levelDb: -20, syllableHz: 4, syllableFloor: 0.3 }), silence(2)));
    const stopped = quick.of('speech_stopped')[0]!;
    const first = quick.of('response_audio')[0]!;
    expect(first.at - stopped.at).toBeGreaterThanOrEqual(500);
    expect(first.at - stopped.at).toBeLessThanOrEqual(540);
    quick.rt.close();
  });

  it('off, or an inbound call: no detection, the first message at once', async () => {
    for (const ctx of [{ machineDetection: { mode: 'off' as const } }, { direction: 'inbound' as const, machineDetection: { mode: 'hangup' as const } }]) {
      const s = outbound(ctx);
      await s.time.run(100);
      expect(s.of('response_audio').length).toBeGreaterThan(0);
      expect(s.of('machine_detection')).toEqual([]);
      expect(s.rt.machineDetection()).toBeUndefined();
      s.rt.close();
    }
  });
});
