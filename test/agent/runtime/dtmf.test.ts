/**
 * DTMF collection alone, on virtual time: keys within the inter-digit pause are one entry, '#'
 * ends one at once, the first key of an entry is flagged (it cuts the agent).
 */
import { describe, expect, it } from 'vitest';
import { DTMF_INTER_DIGIT_MS, DtmfCollector } from '../../../src/agent/runtime/dtmf.ts';
import type { KeyEvent } from '../../../src/agent/runtime/events.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { EventLog } from './harness.ts';

function collector() {
  const time = new VirtualTime();
  const events = new EventLog<KeyEvent>(time);
  return { time, events, keys: new DtmfCollector({ timers: time, emit: events.emit }) };
}

describe('DtmfCollector', () => {
  it('keys less than the inter-digit pause apart are one entry, committed after the pause', () => {
    const { time, events, keys } = collector();
    const t0 = time.now();
    keys.press('1');
    time.advance(DTMF_INTER_DIGIT_MS - 1);
    keys.press('2');
    time.advance(DTMF_INTER_DIGIT_MS - 1);
    expect(events.of('entry')).toEqual([]);
    time.advance(1);
    expect(events.list).toEqual([
      { type: 'key', first: true, at: t0 },
      { type: 'key', first: false, at: t0 + DTMF_INTER_DIGIT_MS - 1 },
      { type: 'entry', digits: '12', text: '[The caller pressed 12]', at: t0 + 2 * DTMF_INTER_DIGIT_MS - 1 },
    ]);
  });

  it("'#' ends the entry at once; the next key starts a new one", () => {
    const { time, events, keys } = collector();
    keys.press('4');
    keys.press('#');
    expect(events.of('entry').map((e) => e.digits)).toEqual(['4#']);
    keys.press('7');
    time.advance(DTMF_INTER_DIGIT_MS);
    expect(events.types()).toEqual(['key', 'key', 'entry', 'key', 'entry']);
    expect(events.of('key').map((e) => e.first)).toEqual([true, false, true]);
    expect(time.pending).toBe(0);
  });

  it('close() drops an entry not yet committed', () => {
    const { time, events, keys } = collector();
    keys.press('5');
    keys.close();
    keys.press('6');
    time.advance(10_000);
    expect(events.types()).toEqual(['key']);
  });
});
