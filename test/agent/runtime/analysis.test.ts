/**
 * The post-call analysis alone: what the model is asked, how its answer is checked (a value not
 * among a field's choices is null), and that a failing, hanging or rambling model rejects, which
 * costs only the analysis. With local/echo, the deterministic answer the docs describe.
 */
import { describe, expect, it } from 'vitest';
import { ANALYSIS_TIMEOUT_MS, analyzeCall, parseAnalysis } from '../../../src/agent/runtime/analysis.ts';
import { EchoProvider } from '../../../src/agent/providers/llm/echo.ts';
import type { AnalysisField } from '../../../src/domain/agent.ts';
import type { TranscriptEntry } from '../../../src/session/runtime-contract.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { scriptedModel, text, type ModelStep } from './harness.ts';

const TRANSCRIPT: TranscriptEntry[] = [
  { role: 'agent', text: 'Hello, how can I help?', at: '2026-01-01T00:00:00.000Z' },
  { role: 'user', text: 'Where is order 42? I am quite happy to wait.', at: '2026-01-01T00:00:02.000Z' },
  { role: 'tool', text: 'lookup_order: shipped', at: '2026-01-01T00:00:03.000Z' },
];
const FIELDS: AnalysisField[] = [
  { name: 'outcome', description: 'how the call ended', choices: ['resolved', 'escalated'] },
  { name: 'sentiment', choices: ['happy', 'neutral', 'angry'] },
];

function analysis(step: ModelStep, fields = FIELDS) {
  const time = new VirtualTime();
  const { model, calls } = scriptedModel([step]);
  const done = analyzeCall(TRANSCRIPT, fields, { model, timers: time });
  // Settled either way, so a rejection is never unhandled while the test waits.
  const settled = done.then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error: error as Error }),
  );
  return { time, calls, settled };
}

describe('analyzeCall', () => {
  it('asks the model with the transcript and the fields, with no tools; keeps the summary and the choices it names', async () => {
    const a = analysis([text('```json\n{"summary": "  The caller asked '), text('where order 42 was; it had shipped. ", "fields": {"outcome": "resolved", "sentiment": "Happy "}}\n```')]);
    const { value } = await a.settled;
    const [system, user] = a.calls[0]!.messages;
    expect(system).toMatchObject({ role: 'system', content: expect.stringMatching(/^ANALYZE: /) });
    expect((system as { content: string }).content.split('\n').at(-1)).toBe(
      'FIELDS: [{"name":"outcome","description":"how the call ended","choices":["resolved","escalated"]},{"name":"sentiment","choices":["happy","neutral","angry"]}]',
    );
    expect(user).toEqual({ role: 'user', content: 'agent: Hello, how can I help?\nuser: Where is order 42? I am quite happy to wait.\ntool: lookup_order: shipped' });
    expect(a.calls[0]!.tools).toEqual([]);
    expect(value).toEqual({
      summary: 'The caller asked where order 42 was; it had shipped.',
      extracted_variables: [
        { name: 'outcome', type: 'extracted', description: 'how the call ended', dataType: 'string', value: 'resolved' },
        // Differing only in case and spaces: the choice as the agent wrote it.
        { name: 'sentiment', type: 'extracted', dataType: 'string', value: 'happy' },
      ],
    });
    expect(a.time.pending).toBe(0);
  });

  it('a value outside the choices, a missing field, a non-string value and a blank summary are null', () => {
    expect(parseAnalysis('{"summary": "  ", "fields": {"outcome": "refunded", "sentiment": 3}}', FIELDS)).toEqual({
      summary: null,
      extracted_variables: [
        { name: 'outcome', type: 'extracted', description: 'how the call ended', dataType: 'string', value: null },
        { name: 'sentiment', type: 'extracted', dataType: 'string', value: null },
      ],
    });
    expect(parseAnalysis('{"summary": "ok"}', FIELDS).extracted_variables.map((v) => v.value)).toEqual([null, null]);
    expect(parseAnalysis('{"summary": "ok", "fields": ["resolved"]}', FIELDS).extracted_variables.map((v) => v.value)).toEqual([null, null]);
    // A field the agent does not name is not kept.
    expect(parseAnalysis('{"summary": "ok", "fields": {"extra": "x"}}', []).extracted_variables).toEqual([]);
  });

  it('an answer that is no JSON object rejects; so does a failing model', async () => {
    expect((await analysis([text('The caller asked about an order.')]).settled).error?.message).toMatch(/not a JSON object/);
    expect((await analysis([text('{"summary": "cut short')]).settled).error?.message).toMatch(/not a JSON object/);
    expect((await analysis([text('["resolved"]')]).settled).error?.message).toMatch(/not a JSON object/);
    expect((await analysis(new Error('model down')).settled).error?.message).toBe('model down');
  });

  it('a model that does not answer is given up after the analysis timeout', async () => {
    const a = analysis('hang');
    const t0 = a.time.now();
    await a.time.run(ANALYSIS_TIMEOUT_MS - 1);
    expect(a.calls[0]!.signal.aborted).toBe(false);
    await a.time.run(1);
    const { error } = await a.settled;
    expect(a.calls[0]!.signal.aborted).toBe(true);
    expect(a.time.now() - t0).toBe(ANALYSIS_TIMEOUT_MS);
    expect(error).toBeDefined();
  });

  it('the caller\'s signal aborts it (daemon shutdown)', async () => {
    const time = new VirtualTime();
    const { model, calls } = scriptedModel(['hang']);
    const stop = new AbortController();
    const done = analyzeCall(TRANSCRIPT, FIELDS, { model, timers: time, signal: stop.signal });
    await Promise.resolve();
    stop.abort();
    await expect(done).rejects.toThrow(/aborted/);
    expect(calls[0]!.signal.aborted).toBe(true);
    expect(time.pending).toBe(0);
  });

  it('local/echo answers deterministically: the transcript as summary, each field the first choice said as a word, else null', async () => {
    const echo = new EchoProvider();
    const model = (messages: Parameters<typeof echo.answer>[0], tools: unknown[], signal: AbortSignal) => echo.stream({ model: 'echo', messages, tools: [], signal });
    const fields: AnalysisField[] = [
      ...FIELDS,
      // "ship" occurs only inside "shipped", "order" as a word: order.
      { name: 'topic', choices: ['ship', 'order'] },
      { name: 'language', choices: ['fr', 'de'] },
    ];
    const value = await analyzeCall(TRANSCRIPT, fields, { model, timers: new VirtualTime() });
    expect(value.summary).toBe('Summary: agent: Hello, how can I help?\nuser: Where is order 42? I am quite happy to wait.\ntool: lookup_order: shipped');
    expect(value.extracted_variables.map((v) => [v.name, v.value])).toEqual([
      ['outcome', null],
      ['sentiment', 'happy'],
      ['topic', 'order'],
      ['language', null],
    ]);
  });
});
