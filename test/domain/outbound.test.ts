import { describe, expect, it } from 'vitest';
import { attemptOutcome } from '../../src/domain/outbound.ts';

// An ended attempt's record as the store returns it (src/store/outbound-runs.ts endedAttempts).
const ended = (over: Partial<Parameters<typeof attemptOutcome>[0]>) => ({ status: 'ended' as const, end_status: 'completed' as const, started_at: '2026-01-01T00:00:00.000Z', termination_reason: 'agent_hangup', ...over });

describe('attemptOutcome: what an outbound run counts an ended call as', () => {
  it('a call answering-machine detection hung up on is machine (retried when retry.on names it)', () => {
    expect(attemptOutcome(ended({ termination_reason: 'machine_detected' }))).toBe('machine');
  });
  it('a message left on a machine is completed: the run delivered it', () => {
    expect(attemptOutcome(ended({ termination_reason: 'voicemail_left' }))).toBe('completed');
  });
  it('an answered call is completed; unanswered ones keep their end status', () => {
    expect(attemptOutcome(ended({}))).toBe('completed');
    expect(attemptOutcome(ended({ end_status: 'busy', started_at: null }))).toBe('busy');
    expect(attemptOutcome(ended({ end_status: 'no_answer', started_at: null }))).toBe('no_answer');
    expect(attemptOutcome(ended({ end_status: 'failed', started_at: null }))).toBe('failed');
  });
});
