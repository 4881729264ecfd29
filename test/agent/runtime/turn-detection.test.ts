/**
 * Turn detection alone: caller audio through the real energy VAD and a scripted recognizer, on
 * virtual time. When a turn starts and stops (start_secs, stop_secs), when it is committed (the
 * final transcript, or the grace deadline), emulated starts, key entries joining the turn.
 */
import { describe, expect, it } from 'vitest';
import { EnergyVad } from '../../../src/agent/providers/vad/energy.ts';
import type { CallerEvent } from '../../../src/agent/runtime/events.ts';
import { FINAL_TRANSCRIPT_GRACE_MS, TurnDetector } from '../../../src/agent/runtime/turn-detection.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { concat, silence, voice } from '../vad/signals.ts';
import { EventLog, fakeStt, feedAudio } from './harness.ts';

function detector(opts: { stopSecs?: number; finalText?: () => string | undefined } = {}) {
  const time = new VirtualTime();
  const events = new EventLog<CallerEvent>(time);
  const stt = fakeStt(opts.finalText);
  let noiseClosed = false;
  const d = new TurnDetector({
    vad: new EnergyVad({ startSecs: 0.2, stopSecs: opts.stopSecs ?? 0.8 }),
    noise: { process: (f) => f, close: () => void (noiseClosed = true) },
    stt: stt.provider,
    sttOptions: { language: 'en', keyterms: [] },
    timers: time,
    emit: events.emit,
  });
  return { time, events, stt, d, noiseClosed: () => noiseClosed };
}

/** 200 ms of line silence, `speechSecs` of a talker at -20 dBFS, then `afterSecs` of silence. */
async function utterance(t: ReturnType<typeof detector>, speechSecs = 1, afterSecs = 1.2) {
  const t0 = t.time.now();
  await feedAudio(t.time, concat(silence(0.2), voice(speechSecs, { levelDb: -20 }), silence(afterSecs)), (f) => t.d.audio(f));
  return { speechFrom: t0 + 200, speechTo: t0 + 200 + speechSecs * 1000 };
}

describe('TurnDetector', () => {
  it.each([0.4, 0.8])('a turn starts after start_secs of speech and stops after stop_secs = %f s of silence; the final transcript commits it', async (stopSecs) => {
    const t = detector({ stopSecs, finalText: () => 'I need a taxi' });
    const { speechFrom, speechTo } = await utterance(t, 1, stopSecs + 0.4);
    expect(t.events.types()).toEqual(['speech_started', 'speech_stopped', 'transcript', 'user_turn']);
    const [started] = t.events.of('speech_started');
    // Decided on the frame that completes 200 ms of voicing (stamped at that frame's start).
    expect(started!.at - speechFrom).toBe(180);
    expect(started!.emulated).toBe(false);
    const [stopped] = t.events.of('speech_stopped');
    expect(stopped!.at - speechTo).toBe(stopSecs * 1000 - 20);
    expect(t.stt.calls).toEqual(['speechStarted', 'speechEnded']);
    // The recognizer answered at once: the turn is committed with its words, under its turn id.
    const [transcript] = t.events.of('transcript');
    const [turn] = t.events.of('user_turn');
    expect(transcript).toMatchObject({ text: 'I need a taxi', isFinal: true, at: stopped!.at });
    expect(turn).toMatchObject({ text: 'I need a taxi', turnId: transcript!.turnId, at: stopped!.at });
    // Every frame went to the recognizer, speech or not.
    expect(t.stt.frames()).toBe((0.2 + 1 + stopSecs + 0.4) * 50);
  });

  it('a pause shorter than stop_secs does not end the turn', async () => {
    const t = detector({ stopSecs: 0.8 });
    await feedAudio(t.time, concat(silence(0.2), voice(0.6, { levelDb: -20 }), silence(0.5), voice(0.6, { levelDb: -20 }), silence(1)), (f) => t.d.audio(f));
    expect(t.events.types()).toEqual(['speech_started', 'speech_stopped']);
  });

  it('a recognizer that sends no final transcript: the turn is committed after the grace period, empty', async () => {
    const t = detector();
    await utterance(t);
    const [stopped] = t.events.of('speech_stopped');
    expect(t.events.of('user_turn')).toEqual([]);
    await t.time.runTo(stopped!.at + FINAL_TRANSCRIPT_GRACE_MS);
    expect(t.events.of('user_turn')).toEqual([{ type: 'user_turn', text: '', turnId: expect.any(String), at: stopped!.at + FINAL_TRANSCRIPT_GRACE_MS }]);
    // Turn ids are fresh per user turn.
    await utterance(t);
    await t.time.run(FINAL_TRANSCRIPT_GRACE_MS);
    const ids = t.events.of('user_turn').map((e) => e.turnId);
    expect(new Set(ids).size).toBe(2);
  });

  it('a transcript VAD did not hear emulates the start; its final ends and commits the turn', () => {
    const t = detector();
    t.stt.transcript('hello', false);
    t.stt.transcript('hello there', true);
    expect(t.events.list.map(({ at: _at, ...e }) => e)).toEqual([
      { type: 'speech_started', emulated: true },
      { type: 'transcript', text: 'hello', turnId: expect.any(String), isFinal: false },
      { type: 'transcript', text: 'hello there', turnId: expect.any(String), isFinal: true },
      { type: 'speech_stopped' },
      { type: 'user_turn', text: 'hello there', turnId: expect.any(String) },
    ]);
    // An emulated start is not told to the recognizer (it started the turn itself).
    expect(t.stt.calls).toEqual([]);
  });

  it('a key entry is the whole turn when the caller is quiet, and joins the spoken words when not', async () => {
    const t = detector({ finalText: () => 'my account is' });
    t.d.addText('[The caller pressed 1]');
    expect(t.events.of('user_turn').map((e) => e.text)).toEqual(['[The caller pressed 1]']);
    await feedAudio(t.time, concat(silence(0.2), voice(0.6, { levelDb: -20 })), (f) => t.d.audio(f));
    expect(t.d.speaking).toBe(true);
    t.d.addText('[The caller pressed 42#]');
    expect(t.events.of('user_turn')).toHaveLength(1);
    await feedAudio(t.time, silence(1), (f) => t.d.audio(f));
    expect(t.events.of('user_turn').map((e) => e.text)).toEqual(['[The caller pressed 1]', '[The caller pressed 42#] my account is']);
  });

  it('a recognizer failure is reported; close() closes the recognizer and the noise suppressor, and nothing is emitted after', async () => {
    const t = detector({ finalText: () => 'late' });
    t.stt.fail(new Error('socket lost'));
    expect(t.events.list).toEqual([{ type: 'failed', error: new Error('socket lost'), at: expect.any(Number) }]);
    await feedAudio(t.time, concat(silence(0.2), voice(0.6, { levelDb: -20 })), (f) => t.d.audio(f));
    t.d.close();
    t.d.close();
    await feedAudio(t.time, silence(3), (f) => t.d.audio(f));
    t.d.addText('[The caller pressed 9]');
    expect(t.events.types()).toEqual(['failed', 'speech_started']);
    expect(t.stt.calls).toEqual(['speechStarted', 'close']);
    expect(t.noiseClosed()).toBe(true);
    expect(t.time.pending).toBe(0);
  });
});
