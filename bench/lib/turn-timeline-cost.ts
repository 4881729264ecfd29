/**
 * bench/session, section 1d: what recording each agent turn's timeline costs (docs/latency.md).
 * In this process, on virtual time: a real AgentRuntime (energy VAD, the stages) with the runtime
 * tests' fakes for the recognizer, the model and a 200 ms-per-word TTS (test/agent/runtime/
 * harness.ts), one caller turn after another (0.5 s of voice, 1.2 s of silence, the reply spoken
 * to its end). Two sessions of the same turns, in alternating blocks: one without observers (the
 * runtime records nothing), one with the daemon's own observers (the metrics' histograms on a
 * registry of their own, and the store writer into a real SQLite store, its batches drained inside
 * the measured time). Figure: CPU of this process per turn with the timeline; baseline: without.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { EnergyVad } from '../../src/agent/providers/vad/energy.ts';
import { AgentRuntime } from '../../src/agent/runtime/index.ts';
import { createTurnLatencyMetrics } from '../../src/agent/turn-latency-metrics.ts';
import type { TurnTimelineObserver } from '../../src/domain/turn-latency.ts';
import { openStore, type Store } from '../../src/store/index.ts';
import { TurnTimelineWriter } from '../../src/store/turn-timeline-writer.ts';
import { agentFixture, fakeStt, feedAudio, scriptedModel, testLogger, text, wordTts } from '../../test/agent/runtime/harness.ts';
import { concat, silence, voice } from '../../test/agent/vad/signals.ts';
import { VirtualTime } from '../../test/helpers/virtual-time.ts';

export interface TimelineCost {
  /** CPU µs per turn, without and with the timeline. */
  withoutUs: number;
  withUs: number;
  turns: number;
  /** Timelines the store holds at the end: every turn of the "with" session (warm-up and first message too). */
  stored: number;
}

const BLOCKS = 4;
const WARMUP_TURNS = 5;

/** One session: its turns are run block by block (runBlock), its CPU summed by the caller. */
async function session(id: string, turns: number, observers: readonly TurnTimelineObserver[]) {
  const time = new VirtualTime();
  const { model } = scriptedModel(Array.from({ length: turns }, () => [text('Sure. It is on its way.')]));
  const stt = fakeStt(() => 'Where is my order?');
  const { tts } = wordTts(200);
  const { log } = testLogger();
  const rt = new AgentRuntime(
    { sessionId: id, orgId: 'o1', agent: agentFixture({ vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 0 } }), versionId: null, nodes: [], callerId: 'bench', variables: [], direction: 'web', clientAnswersTools: true },
    { send: () => undefined, end: () => undefined },
    { stt: stt.provider, tts: () => tts, model: () => model, createVad: (s) => new EnergyVad(s), createNoiseSuppressor: () => undefined, toolTimeoutMs: 10_000, logger: log, clock: time, timers: time, turnTimelineObservers: observers },
  );
  await time.run(3000); // the first message, heard
  const caller = concat(voice(0.5, { levelDb: -20 }), silence(1.2));
  return {
    async runTurns(n: number): Promise<void> {
      for (let i = 0; i < n; i++) {
        await feedAudio(time, caller, (f) => rt.inputAudio(f));
        await time.run(3000); // the reply, spoken to its end
      }
    },
    close: () => rt.close(),
  };
}

export async function measureTurnTimelineCost(turns: number): Promise<TimelineCost> {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-bench-timeline-'));
  let store: Store | undefined;
  try {
    store = await openStore(dir, '');
    const org = (await store.organizations.createKey('bench')).org.id;
    const callId = '00000000-0000-4000-8000-0000000000aa';
    await store.calls.insert({ id: callId, org_id: org, agent_id: null, sip_trunk_id: null, direction: 'web', from: 'bench', to: 'agent', created_at: new Date().toISOString() });
    const opened = store;
    const writer = new TurnTimelineWriter(() => opened.turnTimelines, (err) => {
      throw err;
    });
    const without = await session('00000000-0000-4000-8000-0000000000bb', turns, []);
    const withTimeline = await session(callId, turns, [writer, createTurnLatencyMetrics(new Registry())]);
    // Warm-up (JIT, the store's statements), not counted: one block of each.
    await without.runTurns(WARMUP_TURNS);
    await withTimeline.runTurns(WARMUP_TURNS);
    await writer.drain();
    const cpu = { without: 0, with: 0 };
    const perBlock = Math.ceil(turns / BLOCKS);
    const timed = async (fn: () => Promise<void>) => {
      const t0 = process.cpuUsage();
      await fn();
      const d = process.cpuUsage(t0);
      return d.user + d.system;
    };
    for (let done = 0; done < turns; done += perBlock) {
      const n = Math.min(perBlock, turns - done);
      cpu.without += await timed(() => without.runTurns(n));
      cpu.with += await timed(async () => {
        await withTimeline.runTurns(n);
        await writer.drain();
      });
    }
    without.close();
    withTimeline.close();
    await writer.drain();
    const kinds = (await store.turnTimelines.list(org, callId)).map((t) => t.kind);
    const stored = kinds.length;
    return { withoutUs: cpu.without / turns, withUs: cpu.with / turns, turns, stored };
  } finally {
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
