/**
 * The after-call summary alone: what the model is asked, what is stored, and that a failing or
 * hanging model costs only the summary.
 */
import { describe, expect, it } from 'vitest';
import { SUMMARY_TIMEOUT_MS, summarizeCall } from '../../../src/agent/runtime/summary.ts';
import type { TranscriptEntry } from '../../../src/session/runtime-contract.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { scriptedModel, testLogger, text, type ModelStep } from './harness.ts';

const TRANSCRIPT: TranscriptEntry[] = [
  { role: 'agent', text: 'Hello, how can I help?', at: '2026-01-01T00:00:00.000Z' },
  { role: 'user', text: 'Where is order 42?', at: '2026-01-01T00:00:02.000Z' },
  { role: 'tool', text: 'lookup_order: shipped', at: '2026-01-01T00:00:03.000Z' },
];

function summary(step: ModelStep) {
  const time = new VirtualTime();
  const { model, calls } = scriptedModel([step]);
  const { log, lines } = testLogger();
  const stored: string[] = [];
  const done = summarizeCall(TRANSCRIPT, { model, timers: time, log, store: (s) => stored.push(s) });
  return { time, calls, lines, stored, done };
}

describe('summarizeCall', () => {
  it('asks the model for a summary of the transcript, with no tools, and stores it trimmed', async () => {
    const s = summary([text('  The caller asked '), text('where order 42 was; it had shipped. ')]);
    await s.done;
    expect(s.calls[0]!.messages).toEqual([
      { role: 'system', content: expect.stringMatching(/^SUMMARIZE: Summarize this phone call in at most three sentences/) },
      { role: 'user', content: 'agent: Hello, how can I help?\nuser: Where is order 42?\ntool: lookup_order: shipped' },
    ]);
    expect(s.calls[0]!.tools).toEqual([]);
    expect(s.stored).toEqual(['The caller asked where order 42 was; it had shipped.']);
    expect(s.time.pending).toBe(0);
  });

  it('an empty summary is not stored; a failing model is logged and stores nothing', async () => {
    const empty = summary([text('   ')]);
    await empty.done;
    expect(empty.stored).toEqual([]);
    const failing = summary(new Error('model down'));
    await failing.done;
    expect(failing.stored).toEqual([]);
    expect(failing.lines.find((l) => l.msg === 'call summary failed')).toMatchObject({ level: 40 });
  });

  it('a model that does not answer is given up after the summary timeout', async () => {
    const s = summary('hang');
    const t0 = s.time.now();
    await s.time.run(SUMMARY_TIMEOUT_MS - 1);
    expect(s.calls[0]!.signal.aborted).toBe(false);
    await s.time.run(1);
    await s.done;
    expect(s.calls[0]!.signal.aborted).toBe(true);
    expect(s.time.now() - t0).toBe(SUMMARY_TIMEOUT_MS);
    expect(s.stored).toEqual([]);
    expect(s.lines.some((l) => l.msg === 'call summary failed')).toBe(true);
  });
});
