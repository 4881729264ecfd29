/**
 * MemorySlots (src/bridge/call-slots.ts): the per-trunk and per-organization limits of a node on
 * SQLite, counted in memory, answer as the store's call_slots would for one node.
 */
import { describe, expect, it } from 'vitest';
import { CallSlots, MemorySlots } from '../../src/bridge/call-slots.ts';

const quiet = { warn: () => undefined };

describe('call limits counted in memory (SQLite)', () => {
  it('per trunk and per organization refusals name the limit; a released slot admits again; releasing twice is harmless', async () => {
    const slots = new CallSlots(new MemorySlots(), 'n1', { maxCallsPerTrunk: 2, maxCallsPerOrg: 3 }, quiet);
    const a = await slots.acquire('org-1', 'trunk-1');
    const b = await slots.acquire('org-1', 'trunk-1');
    expect(await slots.acquire('org-1', 'trunk-1')).toEqual({ refused: 'trunk', why: 'the concurrent call limit of trunk trunk-1 (bridge.max_calls_per_trunk 2) is reached' });
    const c = await slots.acquire('org-1', 'trunk-2');
    expect(await slots.acquire('org-1', 'trunk-3')).toEqual({ refused: 'org', why: 'the concurrent call limit of organization org-1 (bridge.max_calls_per_org 3) is reached' });
    expect(await slots.wouldRefuse('org-1', null)).toBe('org');
    expect(await slots.wouldRefuse('org-2', null)).toBeUndefined();
    expect(await slots.held()).toBe(3);
    if (!('held' in a) || !('held' in b) || !('held' in c)) throw new Error('expected three slots');
    a.held.release();
    a.held.release();
    await slots.settled();
    expect(await slots.held()).toBe(2);
    expect('held' in (await slots.acquire('org-1', 'trunk-1'))).toBe(true);
    // Forced: counted, never refused (an answered carrier dial's stream).
    expect('held' in (await slots.acquire('org-1', null, true))).toBe(true);
    expect(await slots.held()).toBe(4);
  });

  it('no limit configured: nothing is counted', async () => {
    const counter = new MemorySlots();
    const slots = new CallSlots(counter, 'n1', { maxCallsPerTrunk: 0, maxCallsPerOrg: 0 }, quiet);
    expect(slots.applies('trunk-1')).toBe(false);
    for (let i = 0; i < 5; i++) expect('held' in (await slots.acquire('org-1', 'trunk-1'))).toBe(true);
    expect(await counter.count({ nodeId: 'n1' })).toBe(0);
    // A per-trunk limit alone does not apply to a call without a trunk.
    expect(new CallSlots(counter, 'n1', { maxCallsPerTrunk: 1, maxCallsPerOrg: 0 }, quiet).applies(null)).toBe(false);
  });
});
