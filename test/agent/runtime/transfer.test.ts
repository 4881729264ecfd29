/**
 * The transfer decisions alone (src/agent/runtime/transfer.ts), with a fake speech output that
 * records what it was asked: which number and message each kind of transfer uses, where the
 * message is said, and how the session ends. The joined runtime's transfers:
 * test/agent/runtime/agent-runtime.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { TimeoutSettings } from '../../../src/domain/agent.ts';
import type { AgentTurn } from '../../../src/agent/runtime/events.ts';
import { SessionTransfers, transferMessage, transferNumber } from '../../../src/agent/runtime/transfer.ts';
import type { SessionEndReason } from '../../../src/session/protocol.ts';

const base: TimeoutSettings = { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call' };

function setup(over: Partial<TimeoutSettings>) {
  const did: string[] = [];
  const ends: Array<[SessionEndReason, string | undefined]> = [];
  const speech = {
    open: (kind: string) => {
      did.push(`open ${kind}`);
      return { turnId: kind } as unknown as AgentTurn;
    },
    say: (turn: AgentTurn, text: string) => void did.push(`say ${turn.turnId}: ${text}`),
    // The closing turn is heard at once here.
    finishClosing: (turn: AgentTurn, then: () => void) => {
      did.push(`finishClosing ${turn.turnId}`);
      then();
    },
    cut: () => {
      did.push('cut');
      return undefined;
    },
  };
  const transfers = new SessionTransfers({ settings: { ...base, ...over }, speech: speech as never, end: (reason, number) => void ends.push([reason, number]) });
  return { transfers, did, ends };
}

const reply = { turnId: 'reply' } as unknown as AgentTurn;

describe('transfer settings', () => {
  it('the silence action falls back to the general number and message; blanks count as none', () => {
    expect(transferNumber({ ...base, transfer_number: ' +15550001 ' }, 'silence')).toBe('+15550001');
    expect(transferNumber({ ...base, transfer_number: '+15550001', silence_transfer_number: '+15550002' }, 'silence')).toBe('+15550002');
    expect(transferNumber({ ...base, silence_transfer_number: '+15550002' }, 'timeout')).toBeUndefined();
    expect(transferNumber({ ...base, transfer_number: '  ' }, 'timeout')).toBeUndefined();
    expect(transferMessage({ ...base, transfer_message: 'Connecting.', silence_transfer_message: ' ' }, 'silence')).toBe('Connecting.');
    expect(transferMessage({ ...base, transfer_message: 'Connecting.', silence_transfer_message: 'Still there?' }, 'silence')).toBe('Still there?');
    expect(transferMessage(base, 'timeout')).toBe('');
  });
});

describe('SessionTransfers', () => {
  it("the model's transfer: the message in the reply turn, then the end with the number", () => {
    const s = setup({ transfer_number: '+15550001', transfer_message: 'Connecting you now.' });
    s.transfers.transfer(reply, 'timeout');
    expect(s.did).toEqual(['say reply: Connecting you now.', 'finishClosing reply']);
    expect(s.ends).toEqual([['transfer', '+15550001']]);
  });

  it('with no number the agent hangs up, after its turn when it has one', () => {
    const s = setup({});
    s.transfers.transfer(reply, 'timeout');
    expect(s.did).toEqual(['finishClosing reply']);
    s.transfers.transfer(undefined, 'timeout');
    expect(s.ends).toEqual([
      ['agent_hangup', undefined],
      ['agent_hangup', undefined],
    ]);
  });

  it("a timer's transfer cuts the agent and says the silence message in a closing turn", () => {
    const s = setup({ transfer_number: '+15550001', silence_transfer_message: 'Let me get someone.' });
    s.transfers.timerAction('silence', 'silence_timeout');
    expect(s.did).toEqual(['cut', 'open closing', 'say closing: Let me get someone.', 'finishClosing closing']);
    expect(s.ends).toEqual([['transfer', '+15550001']]);
  });

  it("a timer's transfer with no number ends with the timer's own reason, saying nothing", () => {
    const s = setup({});
    s.transfers.timerAction('timeout', 'timeout');
    expect(s.did).toEqual([]);
    expect(s.ends).toEqual([['timeout', undefined]]);
  });
});
