/**
 * The runtime with its stages joined, on virtual time, with fakes for every vendor (a scripted
 * model and recognizer, a TTS of 200 ms per word) and the real energy VAD: the rules that join
 * stages. A conversation, barge-in on the first message, a key entry, the silence and default
 * timeouts with their actions, model and recognizer failures, close(). Each runs its seconds of
 * conversation in milliseconds; the real-time versions over sockets are test/agent/e2e.
 */
import { describe, expect, it } from 'vitest';
import type { Agent } from '../../../src/domain/agent.ts';
import { EnergyVad } from '../../../src/agent/providers/vad/energy.ts';
import { AgentRuntime, REPROMPT_TEXT, type RuntimeDeps } from '../../../src/agent/runtime/index.ts';
import { APOLOGY_TEXT } from '../../../src/agent/runtime/reply-loop.ts';
import type { ServerEvent, SessionEndReason } from '../../../src/session/protocol.ts';
import type { SessionContext } from '../../../src/session/runtime-contract.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { concat, silence, voice } from '../vad/signals.ts';
import { agentFixture, fakeStt, feedAudio, scriptedModel, testLogger, text, toolCall, wordTts, type ModelStep } from './harness.ts';

function session(over: Partial<Agent>, steps: ModelStep[], finalText: () => string | undefined = () => 'I need a taxi', ctx: Partial<SessionContext> = {}, deps: Partial<RuntimeDeps> = {}) {
  const time = new VirtualTime();
  const sent: Array<ServerEvent & { at: number }> = [];
  const ended: Array<{ reason: SessionEndReason; details?: { transferNumber?: string } }> = [];
  const { model, calls } = scriptedModel(steps);
  const stt = fakeStt(finalText);
  const { tts, requests } = wordTts(200);
  const { log } = testLogger();
  const rt = new AgentRuntime(
    { sessionId: 's1', orgId: 'o1', agent: agentFixture(over), versionId: null, nodes: [], callerId: '+15550000000', variables: [], direction: 'web', clientAnswersTools: true, ...ctx },
    {
      send: (e) => void sent.push({ ...e, at: time.now() }),
      end: (reason, details) => void ended.push(details === undefined ? { reason } : { reason, details }),
    },
    {
      stt: stt.provider,
      tts: () => tts,
      model: () => model,
      createVad: (s) => new EnergyVad(s),
      createNoiseSuppressor: () => undefined,
      toolTimeoutMs: 10_000,
      logger: log,
      clock: time,
      timers: time,
      ...deps,
    },
  );
  const types = (from = 0) => sent.slice(from).map((e) => e.type);
  const finals = () => sent.filter((e) => e.type === 'response_text' && e.data.is_final).map((e) => (e.data as { text: string }).text);
  const speak = (secs = 1, lead = 0.4) => feedAudio(time, concat(silence(lead), voice(secs, { levelDb: -20 }), silence(1.2)), (f) => rt.inputAudio(f));
  return { time, rt, sent, ended, calls, stt, requests, types, finals, speak, t0: time.now() };
}

describe('AgentRuntime', () => {
  it('a phone call: a flow tool goes to the webhook, not to the client, and the transcript has the call and its output', async () => {
    const asked: unknown[] = [];
    const toolWebhook: RuntimeDeps['toolWebhook'] = (req) => (asked.push(req), Promise.resolve({ ok: true, output: 'shipped' }));
    const nodes = [{ id: 'n1', type: 'tool', name: 'lookup_order', parameters: [{ name: 'order_id', type: 'string' }] }];
    const s = session({}, [[toolCall('c1', 'lookup_order', { order_id: '42' })], [text('It shipped.')]], undefined, { direction: 'inbound', clientAnswersTools: false, nodes }, { toolWebhook });
    await s.time.run(1300);
    await s.speak();
    await s.time.run(2000);
    expect(asked).toEqual([{ orgId: 'o1', callId: 's1', agentId: expect.any(String), toolCallId: 'c1', name: 'lookup_order', arguments: { order_id: '42' } }]);
    expect(s.types()).not.toContain('tool_call');
    const tools = s.rt.transcript().filter((e) => e.role === 'tool');
    expect(tools).toEqual([
      { role: 'tool', text: 'lookup_order({"order_id":"42"})', at: expect.any(String), toolCall: { callId: 'c1', toolName: 'lookup_order', arguments: '{"order_id":"42"}', startedAt: expect.any(String) } },
      {
        role: 'tool',
        text: 'lookup_order: shipped',
        at: expect.any(String),
        toolCall: { callId: 'c1', toolName: 'lookup_order', arguments: '{"order_id":"42"}', output: 'shipped', startedAt: expect.any(String), endedAt: expect.any(String) },
        toolCallOutput: 'shipped',
      },
    ]);
    expect(s.finals()).toContain('It shipped.');
  });

  it('a conversation: the first message heard, the caller answered, the record kept', async () => {
    const s = session({}, [[text('Sure. Where to?')]]);
    await s.time.run(1300);
    expect(s.finals()).toEqual(['Hello there. How can I help?']);
    const mark = s.sent.length;
    await s.speak();
    await s.time.run(1000);
    // The turn's events in order, then the answer spoken and committed once heard.
    expect(s.types(mark).filter((t, i, a) => a.indexOf(t) === i)).toEqual(['speech_started', 'speech_stopped', 'input_audio_transcript', 'response_text', 'response_audio']);
    expect(s.finals()).toEqual(['Hello there. How can I help?', 'Sure. Where to?']);
    expect(s.calls[0]!.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'assistant', content: 'Hello there. How can I help?' },
      { role: 'user', content: 'I need a taxi' },
    ]);
    // A fixed text (the first message) is one piece; the model's answer is cut into sentences.
    expect(s.requests.map((r) => r.text)).toEqual(['Hello there. How can I help?', 'Sure.', 'Where to?']);
    expect(s.rt.transcript().map((e) => [e.role, e.text])).toEqual([
      ['agent', 'Hello there. How can I help?'],
      ['user', 'I need a taxi'],
      ['agent', 'Sure. Where to?'],
    ]);
    expect(s.ended).toEqual([]);
  });

  it('barge-in: the caller cuts the first message within its window; only what was heard is kept', async () => {
    const s = session({ first_message_interruption_time: 5 }, [[text('Yes?')]]);
    await s.speak();
    const started = s.sent.findIndex((e) => e.type === 'speech_started');
    expect(s.types(started).slice(0, 3)).toEqual(['speech_started', 'interruption', 'response_text']);
    // Speech started 580 ms in: the first sentence (400 ms) had been heard, none of the second.
    expect(s.sent[started]!.at - s.t0).toBe(580);
    expect(s.finals()[0]).toBe('Hello there.');
    expect(s.sent.slice(started).filter((e) => e.type === 'response_audio' && (e.data as { turn_id: string }).turn_id === (s.sent[0]!.data as { turn_id: string }).turn_id)).toEqual([]);
    await s.time.run(1000);
    expect(s.calls[0]!.messages.slice(1)).toEqual([
      { role: 'assistant', content: 'Hello there.' },
      { role: 'user', content: 'I need a taxi' },
    ]);
    expect(s.rt.transcript()[0]).toMatchObject({ role: 'agent', text: 'Hello there.', interrupted: true });
  });

  it('the first message cannot be cut when its window is 0: the caller is answered after it', async () => {
    const s = session({ first_message_interruption_time: 0 }, [[text('Yes?')]]);
    await s.speak(0.3);
    expect(s.types()).not.toContain('interruption');
    await s.time.run(2000);
    expect(s.finals()).toEqual(['Hello there. How can I help?', 'Yes?']);
  });

  it('a key cuts the agent and the entry is the caller’s turn', async () => {
    const s = session({ first_message_interruption_time: 5 }, [[text('Checking.')]]);
    await s.time.run(100);
    s.rt.dtmf('4');
    s.rt.dtmf('2');
    s.rt.dtmf('#');
    await s.time.run(1000);
    expect(s.types()).toContain('interruption');
    expect(s.calls[0]!.messages.at(-1)).toEqual({ role: 'user', content: '[The caller pressed 42#]' });
    expect(s.finals().at(-1)).toBe('Checking.');
  });

  it('silence: re-prompts after silence_timeout_secs, ends with silence_timeout at silence_counter; then the analysis, when asked', async () => {
    const s = session(
      { summarize_calls: true, analysis_fields: [{ name: 'answered', choices: ['yes', 'no'] }], vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 10 } },
      [[text('{"summary": "The caller never spoke.", "fields": {"answered": "no"}}')]],
    );
    // First message: 6 words, heard at 1.2 s; the silence counts from there.
    await s.time.runTo(s.t0 + 1200 + 10_000);
    const reprompt = () => s.sent.filter((e) => e.type === 'response_text' && e.data.text === REPROMPT_TEXT).map((e) => [e.at - s.t0, (e.data as { is_final: boolean }).is_final]);
    expect(reprompt()).toEqual([[11_200, false]]);
    // The re-prompt (4 words, 0.8 s) is heard, then 10 s more: the second strike.
    await s.time.run(800);
    expect(reprompt()).toEqual([[11_200, false], [12_000, true]]);
    await s.time.run(9_999);
    expect(s.ended).toEqual([]);
    await s.time.run(1);
    expect(s.ended).toEqual([{ reason: 'silence_timeout' }]);
    // Nothing is analysed at the end itself: the server asks once it stored the end.
    expect(s.calls).toHaveLength(0);
    expect(await s.rt.analyze(new AbortController().signal)).toEqual({
      summary: 'The caller never spoke.',
      extracted_variables: [{ name: 'answered', type: 'extracted', dataType: 'string', value: 'no' }],
    });
    expect(s.stt.calls).toEqual(['close']);
  });

  it('default_timeout with transfer_call cuts the agent, says the transfer message, then transfers', async () => {
    const s = session(
      { timeout_settings: { default_timeout: 1, timeout_action: 'transfer_call', transfer_number: ' +15550001111 ', transfer_message: 'Transferring you now.', silence_counter: 2, silence_timeout_action: 'end_call' } },
      [],
    );
    await s.time.run(1000);
    // Cut quietly (no interruption: the caller did not speak), and not interruptible now.
    expect(s.types()).not.toContain('interruption');
    await s.speak(0.5, 0.1);
    expect(s.types()).not.toContain('interruption');
    await s.time.run(2000);
    expect(s.finals()).toEqual(['Transferring you now.']);
    expect(s.ended).toEqual([{ reason: 'transfer', details: { transferNumber: '+15550001111' } }]);
  });

  it('model failures: the agent apologises and the session goes on; three in a row end it with error', async () => {
    const s = session({ first_message: '' }, [new Error('down'), new Error('down'), new Error('down')]);
    for (let i = 0; i < 3; i++) {
      s.rt.dtmf('#');
      await s.time.run(2000);
    }
    expect(s.finals()).toEqual([APOLOGY_TEXT, APOLOGY_TEXT]);
    expect(s.ended).toEqual([{ reason: 'error' }]);
  });

  it('a recognizer failure ends the session with error; close() afterwards changes nothing', async () => {
    const s = session({}, []);
    s.stt.fail(new Error('socket lost'));
    expect(s.ended).toEqual([{ reason: 'error' }]);
    const n = s.sent.length;
    s.rt.close();
    s.rt.dtmf('1');
    await s.speak();
    expect(s.sent.length).toBe(n);
    expect(s.time.pending).toBe(0);
  });

  it('outbound calls skip the first message unless enable_first_message_outbound', async () => {
    const s = session({ enable_first_message_outbound: false }, [], undefined, { direction: 'outbound' });
    await s.time.run(2000);
    expect(s.types()).toEqual([]);
  });
});
