/**
 * The runtime's own building blocks, without vendors: the pacer on virtual time (what is sent
 * when, what has been heard, final flags, clear), the sentence splitter, the heard-text estimate
 * after a barge-in, client tools from flow nodes, {{variable}} substitution and input framing.
 */
import { describe, expect, it } from 'vitest';
import { AudioPacer } from '../../../src/agent/audio-pacer.ts';
import { FrameAssembler } from '../../../src/agent/frame-assembler.ts';
import { SentenceSplitter } from '../../../src/agent/sentence-splitter.ts';
import type { TtsProvider } from '../../../src/agent/providers/types.ts';
import { heardText, SpeechTurn } from '../../../src/agent/speech-turn.ts';
import { base64ToPcm16 } from '../../../src/media/pcm.ts';
import { substituteVariables } from '../../../src/agent/template.ts';
import { builtinToolSpecs, clientToolsFromNodes, toolCallArguments } from '../../../src/agent/tools.ts';
import { settle, VirtualTime } from '../../helpers/virtual-time.ts';
import { manualTts } from './harness.ts';

const CHUNK = 960; // 40 ms at 24 kHz

function pacer(leadMs = 200) {
  const clock = new VirtualTime();
  const t0 = clock.now();
  const sent: Array<{ at: number; samples: number; isFinal: boolean }> = [];
  let drainedAt: number | undefined;
  const p = new AudioPacer({
    clock,
    timers: clock,
    chunkSamples: CHUNK,
    leadMs,
    send: (pcm, isFinal) => sent.push({ at: clock.now() - t0, samples: pcm.length, isFinal }),
    onDrained: () => (drainedAt = clock.now() - t0),
  });
  return { clock, sent, p, drained: () => drainedAt };
}

function speechTurn(tts: TtsProvider) {
  const clock = new VirtualTime();
  const heard: number[] = [];
  const errors: string[] = [];
  const turn = new SpeechTurn({
    turnId: 't1',
    tts,
    voice: { voiceId: 'v', language: 'en' },
    clock,
    timers: clock,
    chunkSamples: CHUNK,
    leadMs: 200,
    sendAudio: (_turn, audio) => {
      const pcm = base64ToPcm16(audio, { buffer: Buffer.alloc(0) });
      if (pcm.length > 0) heard.push(pcm[0]!);
    },
    onDone: () => {},
    onTtsError: (_err, text) => errors.push(text),
  });
  return { clock, turn, heard, errors };
}

/** A turn with three pieces spoken to a manual TTS, once its requests have started. */
async function threePiecesSpoken() {
  const m = manualTts();
  const t = speechTurn(m.tts);
  for (const text of ['Piece 1.', 'Piece 2.', 'Piece 3.']) t.turn.speak(text);
  await settle();
  return { m, ...t };
}

describe('SpeechTurn', () => {
  it('starts the next piece while the current one streams, one ahead at most, and plays them in order', async () => {
    const { m, heard } = await threePiecesSpoken();
    // The vendor's time to first byte of piece 2 overlaps piece 1; piece 3 waits.
    expect(m.started).toEqual(['Piece 1.', 'Piece 2.']);
    // Piece 2 done first: its audio is held until piece 1 has gone out.
    m.chunk('Piece 2.');
    m.end('Piece 2.');
    await settle();
    expect(heard).toEqual([]);
    m.chunk('Piece 1.');
    await settle();
    expect(heard).toEqual([1]);
    m.chunk('Piece 1.');
    m.end('Piece 1.');
    await settle();
    expect(heard).toEqual([1, 1, 2]);
    expect(m.started).toEqual(['Piece 1.', 'Piece 2.', 'Piece 3.']);
    m.chunk('Piece 3.');
    m.end('Piece 3.');
    await settle();
    expect(heard).toEqual([1, 1, 2, 3]);
  });

  it('a barge-in aborts the piece playing and the one fetched ahead, and nothing more goes out', async () => {
    const { m, turn, heard, errors } = await threePiecesSpoken();
    m.chunk('Piece 1.');
    await settle();
    turn.cut();
    m.chunk('Piece 2.');
    await settle();
    expect([...m.signals.values()].map((s) => s.aborted)).toEqual([true, true]);
    expect(m.started).toEqual(['Piece 1.', 'Piece 2.']);
    expect(heard).toEqual([1]);
    expect(errors).toEqual([]);
  });

  it('a piece fetched ahead that fails is reported in its turn, and the turn goes on', async () => {
    const { m, heard, errors } = await threePiecesSpoken();
    m.fail('Piece 2.');
    await settle();
    expect(errors).toEqual([]);
    m.chunk('Piece 1.');
    m.end('Piece 1.');
    await settle();
    expect(errors).toEqual(['Piece 2.']);
    m.chunk('Piece 3.');
    m.end('Piece 3.');
    await settle();
    expect(heard).toEqual([1, 3]);
  });
});

describe('AudioPacer', () => {
  it('sends at most leadMs ahead of the playhead, then one chunk per chunk duration', () => {
    const { clock, sent, p } = pacer(200);
    p.push(new Int16Array(24_000)); // 1 s = 25 chunks
    // 200 ms lead = 5 chunks at once.
    expect(sent.length).toBe(5);
    clock.advance(40);
    expect(sent.length).toBe(6);
    clock.advance(400);
    expect(sent.length).toBe(16);
    expect(sent.every((s) => s.samples === CHUNK && !s.isFinal)).toBe(true);
  });

  it('flags the last chunk final and reports drained when the client has played everything', () => {
    const { clock, sent, p, drained } = pacer(200);
    p.push(new Int16Array(24_000 + 100)); // 25 chunks + 100 samples
    p.finish();
    clock.advance(2000);
    expect(sent.length).toBe(26);
    expect(sent.at(-1)).toEqual({ at: expect.any(Number), samples: 100, isFinal: true });
    expect(sent.filter((s) => s.isFinal)).toHaveLength(1);
    // 1000 ms + 100 samples (4.17 ms) of audio from t=0.
    expect(drained()).toBeCloseTo(1004.17, 1);
  });

  it('sends an empty final chunk when everything had already gone out', () => {
    const { clock, sent, p, drained } = pacer(200);
    p.push(new Int16Array(CHUNK * 2));
    expect(sent.length).toBe(2);
    p.finish();
    expect(sent.at(-1)).toMatchObject({ samples: 0, isFinal: true });
    clock.advance(100);
    expect(drained()).toBe(80);
  });

  it('a turn with no audio at all is drained at once and sends nothing', () => {
    const { sent, p, drained } = pacer();
    p.finish();
    expect(sent).toHaveLength(0);
    expect(drained()).toBe(0);
  });

  it('clear() drops what is queued, sends nothing more, and says how much was played', () => {
    const { clock, sent, p, drained } = pacer(200);
    p.push(new Int16Array(24_000));
    clock.advance(300);
    const before = sent.length;
    const played = p.clear();
    expect(played).toBe(300);
    clock.advance(5000);
    expect(sent.length).toBe(before);
    expect(drained()).toBeUndefined();
  });

  it('re-chunks odd-sized pushes into whole chunks', () => {
    const { clock, sent, p } = pacer(10_000);
    for (let i = 0; i < 10; i++) p.push(new Int16Array(333));
    p.finish();
    clock.advance(10);
    expect(sent.map((s) => s.samples)).toEqual([960, 960, 960, 450]);
    expect(sent.at(-1)!.isFinal).toBe(true);
  });
});

describe('SentenceSplitter', () => {
  it('cuts at sentence ends followed by whitespace, across streamed pieces', () => {
    const s = new SentenceSplitter();
    expect(s.push('Hello there')).toEqual([]);
    expect(s.push('. How are ')).toEqual(['Hello there.']);
    expect(s.push('you? I am fine')).toEqual(['How are you?']);
    expect(s.flush()).toBe('I am fine');
    expect(s.flush()).toBe('');
  });

  it('does not cut inside numbers', () => {
    const s = new SentenceSplitter();
    expect(s.push('It costs 3.50 dollars. Ok')).toEqual(['It costs 3.50 dollars.']);
  });

  it('cuts an over-long clause at a space', () => {
    const s = new SentenceSplitter();
    const pieces = s.push('word '.repeat(60));
    expect(pieces.length).toBe(1);
    expect(pieces[0]!.length).toBeLessThanOrEqual(200);
    expect(pieces[0]!.endsWith('word')).toBe(true);
  });
});

describe('heardText', () => {
  const pieces = [
    { text: 'Hello there.', startMs: 0, durMs: 900, complete: true },
    { text: 'How can I help you?', startMs: 900, durMs: 1000, complete: true },
  ];
  it('keeps whole pieces played and the cut one by its share of words', () => {
    expect(heardText(pieces, 0)).toBe('');
    expect(heardText(pieces, 899)).toBe('Hello');
    expect(heardText(pieces, 900)).toBe('Hello there.');
    expect(heardText(pieces, 1500)).toBe('Hello there. How can I');
    expect(heardText(pieces, 5000)).toBe('Hello there. How can I help you?');
  });

  it('estimates the length of a piece still being synthesized instead of taking what exists so far', () => {
    const text = Array.from({ length: 40 }, (_, i) => `w${i}`).join(' ');
    // 149 chars -> about 9.7 s: 500 ms heard is 2 of its 40 words (not 20, as 1000 ms would say).
    expect(heardText([{ text, startMs: 0, durMs: 1000, complete: false }], 500)).toBe('w0 w1');
    expect(heardText([{ text, startMs: 0, durMs: 1000, complete: true }], 500)).toBe(text.split(' ').slice(0, 20).join(' '));
  });
});

describe('tools', () => {
  const nodes = [
    { id: 'n1', type: 'start' },
    { id: 'n2', type: 'tool', name: 'lookup_order', description: 'Find an order', parameters: { type: 'object', properties: { order_id: { type: 'string', description: 'the id' } }, required: ['order_id'] } },
    { id: 'n3', type: 'tool', name: 'book', parameters: [{ name: 'date', type: 'string', required: true }, { name: 'shop', dataType: 'string', value: 'main-street' }] },
    { id: 'n4', type: 'tool', name: 'bad name!' },
    { id: 'n5', type: 'tool', name: 'end_call' },
  ];

  it('takes tool nodes with a valid, unique, non-built-in name and ignores other nodes', () => {
    const tools = clientToolsFromNodes(nodes);
    expect(tools.map((t) => t.spec.name)).toEqual(['lookup_order', 'book']);
    expect(tools[0]!.spec.parameters).toEqual({ type: 'object', properties: { order_id: { type: 'string', description: 'the id' } }, required: ['order_id'] });
    // A static parameter is not offered to the model.
    expect(tools[1]!.spec.parameters).toEqual({ type: 'object', properties: { date: { type: 'string', description: '' } }, required: ['date'] });
  });

  it('builds tool_call arguments: resolved from the model, static as set, extras kept', () => {
    const book = clientToolsFromNodes(nodes)[1]!;
    expect(toolCallArguments(book, { id: 'c1', name: 'book', arguments: '{"date":"2026-12-01","party":"4"}' })).toEqual([
      { name: 'date', type: 'resolved', dataType: 'string', description: '', required: true, value: '2026-12-01' },
      { name: 'shop', type: 'static', dataType: 'string', description: '', required: false, value: 'main-street' },
      { name: 'party', type: 'resolved', dataType: 'string', description: '', required: false, value: '4' },
    ]);
    expect(() => toolCallArguments(book, { id: 'c2', name: 'book', arguments: '[1]' })).toThrow(SyntaxError);
  });

  it('offers transfer_call only with a transfer number', () => {
    expect(builtinToolSpecs(false).map((t) => t.name)).toEqual(['end_call']);
    expect(builtinToolSpecs(true).map((t) => t.name)).toEqual(['end_call', 'transfer_call']);
  });
});

describe('substituteVariables', () => {
  it('replaces known variables and leaves unknown ones visible', () => {
    const vars = [{ key: 'name', value: 'Ada' }, { key: 'order.id', value: '42' }];
    expect(substituteVariables('Hi {{name}}, order {{ order.id }} {{missing}}', vars)).toBe('Hi Ada, order 42 {{missing}}');
    expect(substituteVariables('Hi {{name}}', [])).toBe('Hi {{name}}');
  });
});

describe('FrameAssembler', () => {
  it('cuts any chunking into 480-sample frames, in order, keeping the remainder', () => {
    const frames: number[][] = [];
    const f = new FrameAssembler((fr) => frames.push([fr.length, fr[0]!, fr[479]!]));
    const all = Int16Array.from({ length: 1500 }, (_, i) => i);
    f.push(all.subarray(0, 7));
    f.push(all.subarray(7, 1000));
    f.push(all.subarray(1000, 1500));
    expect(frames).toEqual([
      [480, 0, 479],
      [480, 480, 959],
      [480, 960, 1439],
    ]);
  });
});
