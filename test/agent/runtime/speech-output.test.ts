/**
 * Speech output alone, with a TTS that speaks each word as 200 ms of audio, on virtual time:
 * sentences to TTS in order and out paced, the text committed once heard, a barge-in aborting
 * everything at once and committing only what was heard, turns that cannot be cut, TTS failures.
 */
import { describe, expect, it } from 'vitest';
import type { SpeechEvent } from '../../../src/agent/runtime/events.ts';
import { SpeechOutput } from '../../../src/agent/runtime/speech-output.ts';
import { base64ToPcm16 } from '../../../src/media/pcm.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { EventLog, wordTts } from './harness.ts';

const WORD_MS = 200;

function output(failOn?: string) {
  const time = new VirtualTime();
  const events = new EventLog<SpeechEvent>(time);
  const { tts, requests } = wordTts(WORD_MS, failOn);
  const speech = new SpeechOutput({ tts, voice: { voiceId: 'v', language: 'en' }, clock: time, timers: time, chunkSamples: 960, leadMs: 200, emit: events.emit });
  return { time, events, requests, speech, t0: time.now() };
}

/** Which TTS request each audio chunk came from (its samples' value), chunk by chunk. */
const pieceOfChunks = (events: EventLog<SpeechEvent>) => events.of('audio').map((a) => base64ToPcm16(a.audio, { buffer: Buffer.alloc(0) })[0] ?? 0);

describe('SpeechOutput', () => {
  it('speaks sentences through TTS in order, paced, and commits the text once the caller has heard it all', async () => {
    const o = output();
    const turn = o.speech.open('reply');
    o.speech.append(turn, 'Hello there. How are');
    o.speech.speak(turn, 'Hello there.');
    o.speech.append(turn, ' you?');
    o.speech.speak(turn, 'How are you?');
    o.speech.finish(turn);
    await o.time.run(2000);
    expect(o.requests.map((r) => r.text)).toEqual(['Hello there.', 'How are you?']);
    expect(o.requests[0]).toMatchObject({ voiceId: 'v', language: 'en' });
    // 5 words = 1000 ms = 25 chunks of 40 ms: 5 at once (the 200 ms lead), then one per 40 ms
    // (the pacer wakes 1 ms after the lead is used up).
    const audio = o.events.of('audio');
    expect(audio).toHaveLength(25);
    expect(audio.map((a) => a.at - o.t0)).toEqual([0, 0, 0, 0, 0, ...Array.from({ length: 20 }, (_, i) => 40 * i + 1)]);
    expect(audio.map((a) => a.isFinal)).toEqual([...Array(24).fill(false), true]);
    expect(pieceOfChunks(o.events)).toEqual([...Array(10).fill(1), ...Array(15).fill(2)]);
    // Text: partial as it streams, final when the last chunk has played; then the turn is heard.
    const texts = o.events.of('text');
    expect(texts.map((t) => [t.text, t.isFinal])).toEqual([['Hello there. How are', false], ['Hello there. How are you?', false], ['Hello there. How are you?', true]]);
    expect(texts.at(-1)!.at - o.t0).toBe(1000);
    expect(o.events.types().slice(-2)).toEqual(['text', 'heard']);
    expect(o.events.types()[0]).toBe('turn_started');
    expect(o.speech.current).toBeUndefined();
  });

  it('a barge-in aborts the model stream and TTS, sends no more audio, and commits only what was heard', async () => {
    const o = output();
    const turn = o.speech.open('reply');
    o.speech.say(turn, 'Hello there.');
    o.speech.say(turn, 'How are you today?');
    o.speech.finish(turn);
    await o.time.run(500);
    const sent = o.events.of('audio').length;
    expect(o.speech.bargeIn()).toBe(true);
    // 500 ms played: the first sentence (400 ms) and none of the second's four words (100 of 800 ms).
    expect(o.events.list.slice(-2).map(({ at: _at, ...e }) => e)).toEqual([
      { type: 'interrupted', turn, heard: 'Hello there.' },
      { type: 'text', turnId: turn.turnId, text: 'Hello there.', isFinal: true },
    ]);
    expect(turn.signal.aborted).toBe(true);
    expect(o.requests.every((r) => r.signal.aborted)).toBe(true);
    expect(o.speech.current).toBeUndefined();
    await o.time.run(5000);
    expect(o.events.of('audio')).toHaveLength(sent);
    expect(o.events.of('heard')).toEqual([]);
    expect(o.time.pending).toBe(0);
    // Nothing left to cut.
    expect(o.speech.bargeIn()).toBe(false);
  });

  it('the first message can be cut only within its interruption window; a closing turn never', async () => {
    const o = output();
    const first = o.speech.open('first', { interruptibleForMs: 300 });
    o.speech.say(first, 'Welcome to the shop.');
    o.speech.finish(first);
    await o.time.run(300);
    expect(o.speech.bargeIn()).toBe(false);
    await o.time.run(1000);
    expect(o.events.of('heard').map((e) => e.turn)).toEqual([first]);

    const second = o.speech.open('first', { interruptibleForMs: 300 });
    o.speech.say(second, 'Welcome back.');
    o.speech.finish(second);
    await o.time.run(299);
    expect(o.speech.bargeIn()).toBe(true);

    const closing = o.speech.open('reply');
    o.speech.say(closing, 'Goodbye.');
    const then = () => {};
    o.speech.finishClosing(closing, then);
    await o.time.run(100);
    expect(o.speech.bargeIn()).toBe(false);
    await o.time.run(1000);
    const heard = o.events.of('heard').at(-1)!.turn;
    expect(heard).toBe(closing);
    expect([heard.kind, heard.then]).toEqual(['closing', then]);
  });

  it('a piece TTS cannot say is reported and skipped; the turn goes on', async () => {
    const o = output('FAIL');
    const turn = o.speech.open('reply');
    o.speech.say(turn, 'One.');
    o.speech.say(turn, 'FAIL here.');
    o.speech.say(turn, 'Three.');
    o.speech.finish(turn);
    await o.time.run(2000);
    expect(o.events.of('tts_failed').map((e) => e.text)).toEqual(['FAIL here.']);
    expect(pieceOfChunks(o.events)).toEqual([...Array(5).fill(1), ...Array(5).fill(3)]);
    expect(o.events.types().at(-1)).toBe('heard');
  });

  it('cut() stops the turn quietly and says what was heard', async () => {
    const o = output();
    const turn = o.speech.open('reprompt');
    o.speech.say(turn, 'Are you still there?');
    o.speech.finish(turn);
    await o.time.run(450);
    expect(o.speech.cut()).toEqual({ turn, heard: 'Are you' });
    expect(o.events.types().filter((t) => t === 'interrupted' || t === 'heard')).toEqual([]);
    expect(o.speech.cut()).toBeUndefined();
  });
});
