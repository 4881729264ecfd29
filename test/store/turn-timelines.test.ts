/**
 * The agent turns' timelines of a call (src/store/turn-timelines.ts, migration 18) on both
 * backends: appended in batches, read back in order with their epoch-ms fractions, scoped by the
 * call's organization, kept once per turn, and deleted with the call's organization.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import type { TurnTimeline } from '../../src/domain/turn-latency.ts';
import { TurnTimelineWriter } from '../../src/store/turn-timeline-writer.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';
import { until } from '../helpers/until.ts';

const T0 = 1_765_000_000_123.456;

forEachStoreBackend((backend) =>
  describe('turn timelines', () => {
    let t: TestStore;
    let s: Store;
    let orgId = '';
    let otherOrgId = '';
    beforeAll(async () => {
      t = await openTestStore(backend);
      s = t.store;
      orgId = (await s.organizations.createKey('latency')).org.id;
      otherOrgId = (await s.organizations.createKey('other')).org.id;
    });
    afterAll(async () => {
      await t?.dispose();
    });

    async function call(org = orgId): Promise<string> {
      const id = randomUUID();
      await s.calls.insert({ id, org_id: org, agent_id: null, sip_trunk_id: null, direction: 'web', from: 'caller', to: 'agent', created_at: new Date().toISOString() });
      return id;
    }
    const first: TurnTimeline = { index: 0, turnId: randomUUID(), kind: 'first', marks: { tts_first_sentence: T0, tts_first_audio: T0 + 150.25, audio_out_first: T0 + 171.5 } };
    const reply: TurnTimeline = {
      index: 1,
      turnId: randomUUID(),
      kind: 'reply',
      marks: { speech_end: T0 + 5000, transcript_final: T0 + 5301.2, llm_request: T0 + 5301.6, llm_first_token: T0 + 5501.9, tts_first_sentence: T0 + 5514, tts_first_audio: T0 + 5664.2, audio_out_first: T0 + 5685.2 },
      bargeInAt: T0 + 6200.7,
    };

    it('reads back what was added, in turn order, with sub-millisecond marks; only for the call\'s organization', async () => {
      const id = await call();
      await s.turnTimelines.add([{ callId: id, turn: reply }]);
      await s.turnTimelines.add([{ callId: id, turn: first }]);
      expect(await s.turnTimelines.list(orgId, id)).toEqual([first, reply]);
      expect(await s.turnTimelines.list(otherOrgId, id)).toEqual([]);
      // A turn is stored once: a repeat keeps the first.
      await s.turnTimelines.add([{ callId: id, turn: { ...first, kind: 'reply' } }]);
      expect((await s.turnTimelines.list(orgId, id)).map((x) => x.kind)).toEqual(['first', 'reply']);
    });

    it('stores nothing for a call that does not exist; rows go with the call\'s organization', async () => {
      await s.turnTimelines.add([{ callId: randomUUID(), turn: first }]);
      const other = await call(otherOrgId);
      await s.turnTimelines.add([{ callId: other, turn: first }]);
      expect(await s.turnTimelines.list(otherOrgId, other)).toHaveLength(1);
      await s.client.run('DELETE FROM organizations WHERE id = ?', [otherOrgId]);
      expect(await s.client.all('SELECT call_id FROM call_turn_timelines WHERE call_id = ?', [other])).toEqual([]);
    });

    it('the writer batches the turns completed in one event-loop turn into one write and drains before close', async () => {
      const id = await call();
      const errors: unknown[] = [];
      const writer = new TurnTimelineWriter(() => s.turnTimelines, (err) => errors.push(err));
      writer.turnComplete(id, first);
      writer.turnComplete(id, reply);
      await writer.drain();
      expect(await s.turnTimelines.list(orgId, id)).toEqual([first, reply]);
      const failing = new TurnTimelineWriter(() => undefined, (err) => errors.push(err));
      failing.turnComplete(id, first);
      await until(() => errors.length === 1, 'the failed write reported');
      expect(String(errors[0])).toMatch(/store is not open/);
    });
  }),
);
