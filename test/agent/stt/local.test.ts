import { describe, expect, it } from 'vitest';
import { LocalUtteranceProvider, describeUtterance } from '../../../src/agent/providers/stt/local.ts';
import type { SttHandlers, Transcript } from '../../../src/agent/providers/types.ts';

function recorder() {
  const transcripts: Transcript[] = [];
  const errors: Error[] = [];
  const handlers: SttHandlers = { onTranscript: (t) => transcripts.push(t), onError: (e) => errors.push(e) };
  return { transcripts, errors, handlers };
}

const tick = () => new Promise((res) => setTimeout(res, 0));

describe('LocalUtteranceProvider', () => {
  it('describes each utterance by the duration of the frames written inside it', async () => {
    const r = recorder();
    const s = new LocalUtteranceProvider().open({ language: 'en', keyterms: [] }, r.handlers);
    for (let i = 0; i < 40; i++) s.write(new Int16Array(480)); // before the turn: not counted
    s.speechStarted();
    for (let i = 0; i < 77; i++) s.write(new Int16Array(480)); // 1.54 s
    s.speechEnded();
    for (let i = 0; i < 10; i++) s.write(new Int16Array(480)); // after the turn: not counted
    s.speechStarted();
    for (let i = 0; i < 25; i++) s.write(new Int16Array(480)); // 0.5 s
    s.speechEnded();
    s.speechStarted();
    s.speechEnded(); // nothing written
    await tick();
    expect(r.transcripts).toEqual([
      { text: '(speech, 1.5 seconds)', isFinal: true },
      { text: '(speech, 0.5 seconds)', isFinal: true },
      { text: '(speech, 0.0 seconds)', isFinal: true },
    ]);
    expect(r.errors).toEqual([]);
  });

  it('rounds to one decimal', () => {
    expect(describeUtterance(24_000 * 12)).toBe('(speech, 12.0 seconds)');
    expect(describeUtterance(6_000)).toBe('(speech, 0.3 seconds)'); // 0.25 s
    expect(describeUtterance(480 * 4)).toBe('(speech, 0.1 seconds)'); // 0.08 s
    expect(describeUtterance(480 * 2)).toBe('(speech, 0.0 seconds)'); // 0.04 s
  });

  it('emits nothing without a turn, nothing after close, and no interim results', async () => {
    const r = recorder();
    const s = new LocalUtteranceProvider().open({ language: 'en', keyterms: [] }, r.handlers);
    for (let i = 0; i < 50; i++) s.write(new Int16Array(480));
    s.speechEnded();
    s.speechStarted();
    s.write(new Int16Array(480));
    s.speechEnded();
    s.close();
    s.close();
    await tick();
    expect(r.transcripts).toEqual([]);
    expect(r.errors).toEqual([]);
  });
});
