/**
 * The wiring of a session's stages alone (src/agent/runtime/stages.ts): providers resolved before
 * the recognizer opens, what the model is given (the prompt with the session's variables, the
 * transfer tool only with a number, the flow's client tools), the voice taken from the agent, and
 * each stage's events reaching its route. The joined runtime: agent-runtime.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { EnergyVad } from '../../../src/agent/providers/vad/energy.ts';
import { buildStages, voiceOf, type RuntimeDeps, type StageRoutes } from '../../../src/agent/runtime/stages.ts';
import type { Agent } from '../../../src/domain/agent.ts';
import type { SessionContext } from '../../../src/session/runtime-contract.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { agentFixture, fakeStt, scriptedModel, testLogger, text, wordTts } from './harness.ts';

function wire(over: Partial<Agent> = {}, ctx: Partial<SessionContext> = {}, deps: Partial<RuntimeDeps> = {}) {
  const time = new VirtualTime();
  const { model, calls } = scriptedModel([[text('Fine.')]]);
  const stt = fakeStt();
  let sttOpened = 0;
  const provider = { ...stt.provider, open: (...a: Parameters<typeof stt.provider.open>) => (sttOpened++, stt.provider.open(...a)) };
  const { tts } = wordTts(200);
  const { log } = testLogger();
  const events: string[] = [];
  const routes: StageRoutes = {
    caller: (e) => void events.push(`caller ${e.type}`),
    key: (e) => void events.push(`key ${e.type}`),
    reply: (e) => void events.push(`reply ${e.type}`),
    speech: (e) => void events.push(`speech ${e.type}`),
    timer: (e) => void events.push(`timer ${e.type}`),
    ended: () => false,
  };
  const context: SessionContext = { sessionId: 's1', orgId: 'o1', agent: agentFixture(over), versionId: null, nodes: [], callerId: '+15550000000', variables: [], direction: 'web', clientAnswersTools: true, ...ctx };
  const full: RuntimeDeps = { stt: provider, tts: () => tts, model: () => model, createVad: (s) => new EnergyVad(s), createNoiseSuppressor: () => undefined, toolTimeoutMs: 10_000, logger: log, clock: time, timers: time, ...deps };
  return { build: () => buildStages(context, full, log, routes), calls, events, time, sttOpened: () => sttOpened };
}

describe('buildStages', () => {
  it('resolves the voice before the recognizer opens: a TTS provider that does not resolve throws with no STT connection', () => {
    const w = wire({}, {}, { tts: () => { throw new Error('no TTS provider provider_9'); } });
    expect(() => w.build()).toThrow(/provider_9/);
    expect(w.sttOpened()).toBe(0);
    const ok = wire();
    ok.build();
    expect(ok.sttOpened()).toBe(1);
  });

  it("gives the model the session's prompt with its variables, and the transfer tool only with a number", async () => {
    const withNumber = wire({ prompt: 'Help {{name}}.', timeout_settings: { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call', transfer_number: '+15550001' } }, { variables: [{ key: 'name', value: 'Ada' }] });
    const s = withNumber.build();
    s.replies.addUser('hi');
    void s.replies.run(s.speech.open('reply'));
    await withNumber.time.run(10);
    expect(withNumber.calls[0]!.messages[0]).toMatchObject({ role: 'system' });
    expect(JSON.stringify(withNumber.calls[0]!.messages[0])).toContain('Help Ada.');
    expect(withNumber.calls[0]!.tools).toContain('transfer_call');
    expect(withNumber.events).toContain('reply text');

    const without = wire();
    const t = without.build();
    t.replies.addUser('hi');
    void t.replies.run(t.speech.open('reply'));
    await without.time.run(10);
    expect(without.calls[0]!.tools).not.toContain('transfer_call');
  });

  it("takes the TTS voice from the agent's voice_settings, only the options set", () => {
    const a = agentFixture({ default_language: 'de', voice_settings: { id: 'v1', provider: 'provider_1', speed: 1.2 } });
    expect(voiceOf(a)).toEqual({ voiceId: 'v1', language: 'de', speed: 1.2 });
  });
});
