/**
 * How a session opens (src/agent/runtime/first-message.ts), with fake stages that record what
 * they were asked: the first message with the session's variables, cut-able only after
 * first_message_interruption_time; the dial's own message first; none (or an outbound call that
 * skips it): the silence timer at once. The joined runtime: test/agent/runtime/agent-runtime.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { openConversation } from '../../../src/agent/runtime/first-message.ts';
import type { SessionContext } from '../../../src/session/runtime-contract.ts';

function open(ctx: { direction?: string; firstMessage?: string; variables?: Array<{ key: string; value: string }>; agent: Record<string, unknown> }) {
  const did: string[] = [];
  const turn: { messageIndex?: number } = {};
  const stages = {
    speech: {
      open: (kind: string, o: { interruptibleForMs: number }) => (did.push(`open ${kind} ${o.interruptibleForMs}`), turn),
      say: (_t: unknown, text: string) => void did.push(`say ${text}`),
      finish: () => void did.push('finish'),
    },
    replies: { addAgent: (text: string) => (did.push(`history ${text}`), 3) },
    timeouts: { armSilence: () => void did.push('armSilence') },
  };
  const agent = { first_message: 'Hello {{name}}.', first_message_interruption_time: 1.5, enable_first_message_outbound: true, ...ctx.agent };
  openConversation({ direction: 'inbound', variables: [], ...ctx, agent } as unknown as SessionContext, stages as never);
  return { did, turn };
}

describe('openConversation', () => {
  it('speaks the first message with the variables filled in, cut-able only after the interruption time, and keeps it in the history', () => {
    const r = open({ variables: [{ key: 'name', value: 'Ada' }], agent: {} });
    expect(r.did).toEqual(['open first 1500', 'say Hello Ada.', 'finish', 'history Hello Ada.']);
    expect(r.turn.messageIndex).toBe(3);
  });

  it("the dial's own first message wins over the agent's", () => {
    expect(open({ firstMessage: 'Hi, this is the clinic.', agent: {} }).did).toContain('say Hi, this is the clinic.');
  });

  it('no first message, or an outbound call whose agent skips it: the silence timer starts at once', () => {
    expect(open({ agent: { first_message: '  ' } }).did).toEqual(['armSilence']);
    expect(open({ direction: 'outbound', agent: { enable_first_message_outbound: false } }).did).toEqual(['armSilence']);
    expect(open({ direction: 'outbound', agent: {} }).did[0]).toBe('open first 1500');
  });
});
