/**
 * The conversation timers alone, on virtual time: silence_timeout_secs strikes counted up to
 * silence_counter (re-prompts, then silence_timeout_action), what clears and what pauses them,
 * and default_timeout with its action.
 */
import { describe, expect, it } from 'vitest';
import type { TimeoutSettings } from '../../../src/domain/agent.ts';
import type { TimerEvent } from '../../../src/agent/runtime/events.ts';
import { ConversationTimers } from '../../../src/agent/runtime/timers.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { EventLog, testLogger } from './harness.ts';

function timers(over: Partial<TimeoutSettings> = {}, silenceTimeoutSecs = 10) {
  const time = new VirtualTime();
  const events = new EventLog<TimerEvent>(time);
  const { log, lines } = testLogger();
  let idle = true;
  const t = new ConversationTimers({
    silenceTimeoutSecs,
    timeout: { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call', ...over },
    idle: () => idle,
    timers: time,
    log,
    emit: events.emit,
  });
  return { time, events, lines, t, t0: time.now(), setIdle: (v: boolean) => void (idle = v) };
}

describe('ConversationTimers', () => {
  it.each([
    [1, 'end_call'],
    [2, 'end_call'],
    [3, 'transfer_call'],
  ] as const)('silence_counter %i: re-prompts before the last strike, which applies silence_timeout_action (%s)', (counter, action) => {
    const s = timers({ silence_counter: counter, silence_timeout_action: action });
    for (let strike = 1; strike <= counter; strike++) {
      s.t.armSilence();
      s.time.advance(9_999);
      expect(s.events.list).toHaveLength(strike - 1);
      s.time.advance(1);
    }
    const expected: TimerEvent[] = [...Array.from({ length: counter - 1 }, (_, i): TimerEvent => ({ type: 'reprompt', strike: i + 1 })), { type: 'silence_timeout', strikes: counter, action }];
    expect(s.events.list.map(({ at: _at, ...e }) => e)).toEqual(expected);
    expect(s.events.list.at(-1)!.at - s.t0).toBe(counter * 10_000);
    expect(s.lines.find((l) => l.msg === 'caller silent: applying silence_timeout_action')).toMatchObject({ strikes: counter, action });
  });

  it('the caller speaking clears the strikes; the agent speaking pauses the count; a busy moment is no strike', () => {
    const s = timers({ silence_counter: 2 });
    s.t.armSilence();
    s.time.advance(10_000);
    expect(s.events.types()).toEqual(['reprompt']);
    // The caller answers: the next silence is the first strike again.
    s.t.callerActive();
    s.t.armSilence();
    s.time.advance(10_000);
    expect(s.events.of('reprompt').map((e) => e.strike)).toEqual([1, 1]);
    // The agent speaks (re-prompt): no silence runs until its turn is heard and the timer re-armed.
    s.t.armSilence();
    s.time.advance(5_000);
    s.t.agentSpeaking();
    s.time.advance(60_000);
    expect(s.events.list).toHaveLength(2);
    // A timer that fires while someone is speaking counts nothing.
    s.t.armSilence();
    s.setIdle(false);
    s.time.advance(10_000);
    expect(s.events.list).toHaveLength(2);
    s.setIdle(true);
    s.t.armSilence();
    s.time.advance(10_000);
    expect(s.events.types().at(-1)).toBe('silence_timeout');
  });

  it('silence_timeout_secs 0: the caller may stay silent for ever', () => {
    const s = timers({}, 0);
    s.t.armSilence();
    s.time.advance(100_000);
    expect(s.events.list).toEqual([]);
  });

  it('default_timeout fires once, at its time, with timeout_action, whatever is going on', () => {
    const s = timers({ default_timeout: 300, timeout_action: 'transfer_call' });
    s.setIdle(false);
    s.time.advance(299_999);
    expect(s.events.list).toEqual([]);
    s.time.advance(1);
    expect(s.events.list).toEqual([{ type: 'max_duration', action: 'transfer_call', at: s.t0 + 300_000 }]);
    expect(s.lines.find((l) => l.msg === 'default_timeout reached')).toMatchObject({ secs: 300, action: 'transfer_call' });
  });

  it('close() stops both timers, and nothing arms them again', () => {
    const s = timers({ default_timeout: 60 });
    s.t.armSilence();
    s.t.close();
    s.t.armSilence();
    expect(s.time.pending).toBe(0);
    s.time.advance(120_000);
    expect(s.events.list).toEqual([]);
  });
});
