/** Partial-update rules as properties: only sent fields change; nested objects merge; keyterms replace. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { applyPatch, settingsForCreate, type AgentDefaults, type AgentInput, type AgentSettings } from '../../src/domain/agent.ts';

const DEFAULTS: AgentDefaults = {
  status: 'active',
  llm: 'local/echo',
  fallback_llm: 'local/echo',
  prompt: 'p',
  first_message: 'hi',
  first_message_interruption_time: 0,
  default_language: 'en',
  summarize_calls: false,
  analysis_fields: [],
  noise_cancel_settings: { enabled: false, level: 50 },
  vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 10 },
  enable_first_message_outbound: true,
  voice_settings: { id: 'v', provider: 'provider_1' },
  timeout_settings: { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call' },
  keyterms: ['default'],
};

const num = fc.double({ min: 0, max: 10, noNaN: true });
const patchArb: fc.Arbitrary<AgentInput> = fc.record(
  {
    prompt: fc.string(),
    first_message: fc.string(),
    summarize_calls: fc.boolean(),
    keyterms: fc.array(fc.string({ minLength: 1 }), { maxLength: 5 }),
    vad_settings: fc.record({ start_secs: num, stop_secs: num, silence_timeout_secs: num }, { requiredKeys: [] }),
    noise_cancel_settings: fc.record({ enabled: fc.boolean(), level: fc.integer({ min: 0, max: 100 }) }, { requiredKeys: [] }),
    timeout_settings: fc.record({ default_timeout: fc.integer({ min: 1, max: 7200 }), silence_counter: fc.integer({ min: 0, max: 9 }) }, { requiredKeys: [] }),
    voice_settings: fc.record({ id: fc.string({ minLength: 1 }), provider: fc.constant('provider_2' as const), speed: fc.double({ min: 0, max: 2, noNaN: true }) }, { requiredKeys: ['id', 'provider'] }),
  },
  { requiredKeys: [] },
);

describe('agent partial update', () => {
  it('changes exactly the sent fields and nothing else', () => {
    fc.assert(
      fc.property(patchArb, patchArb, (first, patch) => {
        const current: AgentSettings = applyPatch(DEFAULTS, first);
        const next = applyPatch(current, patch);
        for (const key of Object.keys(current) as Array<keyof AgentSettings>) {
          const sent = (patch as Record<string, unknown>)[key];
          if (sent === undefined) {
            expect(next[key]).toEqual(current[key]);
          } else if (key === 'vad_settings' || key === 'noise_cancel_settings' || key === 'timeout_settings') {
            expect(next[key]).toEqual({ ...current[key], ...(sent as object) });
          } else {
            expect(next[key]).toEqual(sent);
          }
        }
        // The input objects are never aliased into the result.
        expect(next).not.toBe(current);
        if (patch.keyterms) expect(next.keyterms).not.toBe(patch.keyterms);
      }),
      { numRuns: 500 },
    );
  });

  it('create: omitted or empty keyterms mean the default; nested fields merge over defaults', () => {
    expect(settingsForCreate(DEFAULTS, {}).keyterms).toEqual(['default']);
    expect(settingsForCreate(DEFAULTS, { keyterms: [] }).keyterms).toEqual(['default']);
    expect(settingsForCreate(DEFAULTS, { keyterms: ['x'] }).keyterms).toEqual(['x']);
    expect(settingsForCreate(DEFAULTS, { vad_settings: { stop_secs: 2 } }).vad_settings).toEqual({ start_secs: 0.2, stop_secs: 2, silence_timeout_secs: 10 });
    expect(Object.keys(settingsForCreate(DEFAULTS, {}))).not.toContain('status');
  });
});
