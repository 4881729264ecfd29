/**
 * Voice sessions end to end over real sockets. A real daemon (HTTP, SQLite,
 * the /v1/connection server, the agent runtime with its real local engines: energy VAD, eSpeak-NG
 * WASM voice, local/echo), a real WebSocket client streaming audio at real-time pace, and, where
 * a remote vendor is needed, a fake that speaks that vendor's wire protocol on loopback: the
 * Deepgram-live STT WebSocket (transcripts the test scripts) and an OpenAI-compatible chat server
 * (for the fallback tests).
 *
 *   1  zero configuration: first message in the local voice, an answer through local/echo
 *   2  a scripted conversation: every server event type, in order; tool call round trip;
 *      barge-in (interruption, audio stops within one chunk, history keeps what was heard);
 *      end_call; the call record
 *   3  first-message interruption window (0 s: not interruptible; 5 s: interruptible)
 *   4  default_timeout (end and transfer), silence timeout (re-prompt, then silence_timeout)
 *   5  fallback LLM: primary answers 500; primary misses the first-token deadline
 *   6  a client tool that never answers; noise suppression on; summarize_calls
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../../helpers/daemon.ts';
import { expectCallTimes } from '../../helpers/call-times.ts';
import { startFakeListenServer, type FakeListenServer } from '../stt/fake-stt-servers.ts';
import { openAiSse, startFakeLlmServer, type FakeLlmServer } from '../llm/fake-llm-servers.ts';
import { rmsDb, silence, speechLike, turnAudio, VoiceClient, type ReceivedEvent } from './voice-client.ts';

const FAST_VAD = { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 30 };

async function createAgent(td: TestDaemon, body: Record<string, unknown>): Promise<string> {
  const res = await td.api('POST', '/v1/agents', { name: 'e2e agent', ...body });
  expect(res.status, res.text).toBe(201);
  return res.body.id as string;
}

/** A published version whose flow declares client tools. */
async function publishNodes(td: TestDaemon, agentId: string, nodes: unknown[]): Promise<string> {
  const put = await td.api('PUT', `/v1/agents/${agentId}/draft`, { nodes });
  expect(put.status, put.text).toBeLessThan(300);
  const v = await td.api('POST', `/v1/agents/${agentId}/versions`, { tag: 'v1' });
  expect(v.status, v.text).toBe(201);
  const pub = await td.api('POST', `/v1/agents/${agentId}/versions/${v.body.id}/publish`);
  expect(pub.status, pub.text).toBe(200);
  return v.body.id as string;
}

async function connect(td: TestDaemon, agentId: string, extra: Record<string, unknown> = {}): Promise<{ client: VoiceClient; sessionId: string }> {
  const tok = await td.api('POST', '/v1/session-token', { agent_id: agentId, ...extra });
  expect(tok.status, tok.text).toBe(200);
  const client = await VoiceClient.connect(td.url, tok.body.token as string);
  const started = await client.waitForType('session_started');
  client.startMic();
  return { client, sessionId: started.data.id as string };
}

/** Waits for the next agent turn after index `from` to be over: its text committed once heard. */
async function turnEnd(client: VoiceClient, from: number, ms = 15_000): Promise<ReceivedEvent> {
  return client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, ms, from);
}

/** Caller speaks `secs` of speech then enough silence for VAD to close the turn. */
async function say(client: VoiceClient, secs = 0.8): Promise<void> {
  await client.stream(speechLike(secs));
  await client.stream(silence(0.5));
}

describe('voice session with zero configuration', () => {
  let td: TestDaemon;
  beforeAll(async () => {
    td = await startTestDaemon({ sip: { enabled: false } });
  });
  afterAll(async () => {
    await td?.close();
  });

  it('speaks the first message in the local voice and answers through local/echo', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD });
    const { client, sessionId } = await connect(td, agentId);
    expect(client.events[0]!.type).toBe('session_started');

    const firstText = await client.waitForType('response_text');
    expect(firstText.data).toEqual({ turn_id: expect.any(String), text: 'Hello! How can I help you today?', is_final: false });
    // Committed once the caller has heard all of it.
    const committed = await turnEnd(client, 0);
    expect(committed.data).toEqual({ ...firstText.data, is_final: true });
    expect(committed.at).toBeGreaterThan(client.of('response_audio').at(-1)!.at);
    const firstAudio = turnAudio(client.events, firstText.data.turn_id as string);
    // Real speech: about 1.5-3 s for this sentence, with energy well above silence.
    expect(firstAudio.length / 24_000).toBeGreaterThan(1);
    expect(firstAudio.length / 24_000).toBeLessThan(5);
    expect(rmsDb(firstAudio)).toBeGreaterThan(-35);

    const mark = client.events.length;
    await say(client, 1.0);
    const transcript = await client.waitFor((e) => e.type === 'input_audio_transcript' && e.data.is_final === true, 5000, mark);
    expect(transcript.data.transcript).toMatch(/^\(speech, \d\.\d seconds\)$/);
    const reply = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 5000, mark);
    expect(reply.data.text).toBe(`You said: ${transcript.data.transcript}.`);
    await turnEnd(client, mark);
    expect(rmsDb(turnAudio(client.events, reply.data.turn_id as string))).toBeGreaterThan(-35);
    // Order of this turn: speech_started, speech_stopped, transcript, then the answer.
    const order = client.events.slice(mark).map((e) => e.type).filter((t, i, a) => a.indexOf(t) === i);
    expect(order.slice(0, 4)).toEqual(['speech_started', 'speech_stopped', 'input_audio_transcript', 'response_text']);

    client.close();
    await client.waitClosed();
    const rec = await waitForRecord(td, sessionId, (r) => r.termination_reason !== undefined);
    expect(rec.termination_reason).toBe('client_closed');
    expect(rec.transcript.entries.map((e: { role?: string }) => e.role)).toEqual(['assistant', 'user', 'assistant']);
  });
});

describe('dtmf extension message', () => {
  let td: TestDaemon;
  beforeAll(async () => {
    td = await startTestDaemon({ sip: { enabled: false } });
  });
  afterAll(async () => {
    await td?.close();
  });

  it('keys pressed reach the agent as one entry ending at #; a bad key closes 1007', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, first_message: 'Press a key.' });
    const { client } = await connect(td, agentId);
    await turnEnd(client, 0);
    const mark = client.events.length;
    for (const digit of ['1', '2', '#']) client.send({ type: 'dtmf', data: { digit } });
    expect((await turnEnd(client, mark, 8000)).data.text).toBe('You said: [The caller pressed 12#].');
    // Web sessions are not offered send_dtmf: no dtmf event ever reaches a public client.
    expect(client.of('dtmf')).toHaveLength(0);
    client.send({ type: 'dtmf', data: { digit: 'x' } });
    expect(await client.waitClosed()).toBe(1007);
    expect(client.closeReason).toMatch(/dtmf/);
  });
});

describe('noise suppression and call summary', () => {
  let td: TestDaemon;
  beforeAll(async () => {
    td = await startTestDaemon({ sip: { enabled: false } });
  });
  afterAll(async () => {
    await td?.close();
  });

  it('with noise_cancel_settings enabled the caller is still heard and answered; summarize_calls stores the analysis; the web session\'s record has every time', async () => {
    const agentId = await createAgent(td, {
      vad_settings: FAST_VAD,
      first_message: 'Hi.',
      noise_cancel_settings: { enabled: true, level: 100 },
      summarize_calls: true,
      analysis_fields: [
        { name: 'heard', choices: ['silence', 'speech'] },
        { name: 'language', description: 'what the caller spoke', choices: ['French', 'German'] },
      ],
    });
    const { client, sessionId } = await connect(td, agentId);
    await turnEnd(client, 0);
    const mark = client.events.length;
    await say(client, 1.0);
    const reply = await turnEnd(client, mark, 8000);
    expect(reply.data.text).toMatch(/^You said: \(speech, \d\.\d seconds\)\.$/);
    client.close();
    // local/echo's analysis of the transcript (its ANALYZE rule), stored after the end.
    const rec = await waitForRecord(td, sessionId, (r) => r.analyzed_at !== undefined);
    expect(rec.summary).toMatch(/^Summary: agent: Hi\.\nuser: \(speech, /);
    expect(rec.extracted_variables).toEqual([
      { name: 'heard', type: 'extracted', dataType: 'string', value: 'speech' },
      { name: 'language', type: 'extracted', description: 'what the caller spoke', dataType: 'string', value: null },
    ]);
    // A web session: every time and the reason, in the service's names.
    expect(rec).toMatchObject({ source: 'api', direction: 'web', status: 'ended', termination_reason: 'client_closed', outcome: 'ended_by_user' });
    expectCallTimes(rec);
    expect(rec.analyzed_at >= rec.ended_at).toBe(true);
    expect(rec.duration_seconds).toBeGreaterThanOrEqual(1); // the caller spoke for a second
  });
});

async function waitForRecord(td: TestDaemon, id: string, pred: (r: any) => boolean): Promise<any> {
  const end = Date.now() + 5000;
  for (;;) {
    const r = await td.api('GET', `/v1/calls/${id}`);
    if (r.status === 200 && pred(r.body)) return r.body;
    if (Date.now() > end) throw new Error(`call record ${id} never matched: ${r.text}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

describe('voice session with a streaming recognizer', () => {
  let td: TestDaemon;
  let stt: FakeListenServer;
  beforeAll(async () => {
    stt = await startFakeListenServer();
    td = await startTestDaemon({ sip: { enabled: false }, stt: { provider: 'stream', base_url: stt.baseUrl, api_key: 'stt-key', model: 'nova-3' }, session: { tool_timeout_secs: 3 } });
  });
  afterAll(async () => {
    await td?.close();
    await stt?.close();
  });

  it('runs a scripted conversation: every event type in order, a tool round trip, barge-in, end_call and the record', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, first_message: 'Hi {{name}}.', keyterms: ['callbridge'] });
    await publishNodes(td, agentId, [
      { id: 'start', type: 'start' },
      { id: 't1', type: 'tool', name: 'lookup_order', description: 'Look up an order', parameters: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] } },
    ]);
    const { client, sessionId } = await connect(td, agentId, { variables: [{ key: 'name', value: 'Ada' }] });
    const first = await client.waitForType('response_text');
    expect(first.data.text).toBe('Hi Ada.');
    await turnEnd(client, 0);
    const conn = stt.connections.at(-1)!;
    expect(conn.query.getAll('keyterm')).toEqual(['callbridge']);
    expect(conn.query.get('sample_rate')).toBe('24000');
    expect(conn.query.get('language')).toBe('en'); // default_language reaches the recognizer

    // 1: a tool call. The recognizer sends an interim hypothesis, then the final on Finalize.
    stt.finalizeTranscript = 'tool lookup_order order_id=42';
    let mark = client.events.length;
    const speaking = say(client);
    await client.waitForType('speech_started', 5000, mark);
    conn.sendResults('tool lookup', { isFinal: false });
    await speaking;
    const call = await client.waitForType('tool_call', 8000, mark);
    expect(call.data).toEqual({
      toolCallId: expect.any(String),
      toolName: 'lookup_order',
      arguments: [{ name: 'order_id', type: 'resolved', dataType: 'string', description: '', required: true, value: '42' }],
    });
    client.send({ type: 'tool_call_output', data: { toolCallId: call.data.toolCallId, output: 'shipped' } });
    const toolReply = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 8000, mark);
    expect(toolReply.data.text).toBe('The lookup_order tool returned: shipped.');
    await turnEnd(client, mark);
    const turn1 = client.events.slice(mark).map((e) => e.type);
    expect(turn1.indexOf('speech_started')).toBeLessThan(turn1.indexOf('speech_stopped'));
    const interim = client.events.slice(mark).find((e) => e.type === 'input_audio_transcript' && e.data.is_final === false);
    expect(interim?.data.transcript).toBe('tool lookup');
    expect(turn1.indexOf('speech_stopped')).toBeLessThan(turn1.indexOf('tool_call'));

    // 2: barge-in during a long answer.
    stt.finalizeTranscript = 'please tell me everything about the opening hours of every shop in the city and the parking rules and the holidays and the prices of all the tickets for the museum';
    mark = client.events.length;
    await say(client);
    const longText = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === false, 8000, mark);
    const longTurn = longText.data.turn_id as string;
    await client.waitFor((e) => e.type === 'response_audio' && e.data.turn_id === longTurn, 8000, mark);
    await new Promise((r) => setTimeout(r, 600));
    stt.finalizeTranscript = 'goodbye';
    const bargeMark = client.events.length;
    const talking = say(client);
    const interruption = await client.waitForType('interruption', 5000, bargeMark);
    expect(interruption.data).toEqual({});
    const afterCut = client.events.slice(client.events.indexOf(interruption)).filter((e) => e.type === 'response_audio' && e.data.turn_id === longTurn);
    await talking;
    // Nothing of the cut turn after the interruption: audio stops within one chunk.
    const lateAudio = client.events.slice(client.events.indexOf(interruption) + 1).filter((e) => e.type === 'response_audio' && e.data.turn_id === longTurn);
    expect(afterCut.length + lateAudio.length).toBeLessThanOrEqual(1);
    const heard = client.events.find((e) => e.type === 'response_text' && e.data.turn_id === longTurn && e.data.is_final === true);
    expect(heard, 'the cut turn is committed with what was heard').toBeDefined();
    // About a second was played of a ~12 s answer: the heard text is a short prefix of it.
    const full = `You said: ${'please tell me everything about the opening hours of every shop in the city and the parking rules and the holidays and the prices of all the tickets for the museum'}.`;
    expect(heard!.data.text.length).toBeGreaterThan(0);
    expect(heard!.data.text.length).toBeLessThan(full.length / 2);
    expect(full.startsWith(heard!.data.text)).toBe(true);

    // 3: "goodbye" -> end_call -> session_ended agent_hangup, close 1000.
    const ended = await client.waitForType('session_ended', 10_000, bargeMark);
    expect(ended.data).toEqual({ reason: 'agent_hangup' });
    expect(await client.waitClosed()).toBe(1000);

    const types = new Set(client.types());
    for (const t of ['session_started', 'response_audio', 'response_text', 'input_audio_transcript', 'speech_started', 'speech_stopped', 'session_ended', 'interruption', 'tool_call']) expect(types.has(t), t).toBe(true);
    expect(client.types()[0]).toBe('session_started');
    expect(client.types().at(-1)).toBe('session_ended');

    const rec = await waitForRecord(td, sessionId, (r) => r.termination_reason !== undefined);
    expect(rec.termination_reason).toBe('agent_hangup');
    expect(rec.outcome).toBe('ended_by_agent');
    expect(rec.transcript.entries.map((e: { type: string }) => e.type)).toContain('tool_call');
    const cut = rec.transcript.entries.find((e: { interrupted?: boolean }) => e.interrupted === true);
    expect(cut).toMatchObject({ role: 'assistant', type: 'message' });
    expect(cut?.message).toBe(heard!.data.text);
  });
});

describe('client tool timeout', () => {
  let td: TestDaemon;
  let stt: FakeListenServer;
  beforeAll(async () => {
    stt = await startFakeListenServer();
    td = await startTestDaemon({ sip: { enabled: false }, stt: { provider: 'stream', base_url: stt.baseUrl, api_key: 'k', model: 'nova-3' }, session: { tool_timeout_secs: 1 } });
  });
  afterAll(async () => {
    await td?.close();
    await stt?.close();
  });

  it('a tool_call left unanswered gives the model an error result after session.tool_timeout_secs', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, first_message: 'Hi.' });
    await publishNodes(td, agentId, [{ id: 't', type: 'tool', name: 'slow_tool', description: 'never answers', parameters: [] }]);
    const { client } = await connect(td, agentId);
    await turnEnd(client, 0);
    stt.finalizeTranscript = 'tool slow_tool';
    const mark = client.events.length;
    await say(client);
    const call = await client.waitForType('tool_call', 5000, mark);
    expect(call.data.toolName).toBe('slow_tool');
    const reply = await turnEnd(client, mark, 8000);
    expect(reply.data.text).toBe('The slow_tool tool returned: Error: the tool slow_tool did not answer in time..');
    expect(reply.at - call.at).toBeGreaterThan(900);
    // A late answer is ignored, the session goes on.
    client.send({ type: 'tool_call_output', data: { toolCallId: call.data.toolCallId, output: 'late' } });
    stt.finalizeTranscript = 'still here';
    const mark2 = client.events.length;
    await say(client);
    expect((await turnEnd(client, mark2, 8000)).data.text).toBe('You said: still here.');
    client.close();
  });
});

describe('first-message interruption window, timeouts', () => {
  let td: TestDaemon;
  beforeAll(async () => {
    td = await startTestDaemon({ sip: { enabled: false } });
  });
  afterAll(async () => {
    await td?.close();
  });

  const longFirst = 'Welcome to the city museum. Our opening hours are nine to five every day except Mondays, and tickets are available at the front desk.';

  it('0 s: the first message cannot be interrupted', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, first_message: longFirst, first_message_interruption_time: 0 });
    const { client } = await connect(td, agentId);
    await client.waitForType('response_audio');
    await say(client);
    await turnEnd(client, 0, 20_000);
    expect(client.of('interruption')).toHaveLength(0);
    expect(client.of('speech_started').length).toBeGreaterThan(0);
    client.close();
  });

  it('5 s: the first message is interrupted when the caller talks within the window', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, first_message: longFirst, first_message_interruption_time: 5 });
    const { client } = await connect(td, agentId);
    await client.waitForType('response_audio');
    await say(client);
    await client.waitForType('interruption', 5000);
    client.close();
  });

  it('default_timeout ends the session with reason timeout', async () => {
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, first_message: 'Hi.', timeout_settings: { default_timeout: 2, timeout_action: 'end_call' } });
    const { client, sessionId } = await connect(td, agentId);
    const t0 = performance.now();
    const ended = await client.waitForType('session_ended', 6000);
    expect(ended.data).toEqual({ reason: 'timeout' });
    expect(performance.now() - t0).toBeGreaterThan(1500);
    expect((await waitForRecord(td, sessionId, (r) => r.termination_reason !== undefined)).termination_reason).toBe('timeout');
  });

  it('default_timeout with transfer_call says the transfer message, then ends with reason transfer and the number', async () => {
    const agentId = await createAgent(td, {
      vad_settings: FAST_VAD,
      first_message: 'Hi.',
      timeout_settings: { default_timeout: 2, timeout_action: 'transfer_call', transfer_number: '+15551234567', transfer_message: 'Transferring you now.' },
    });
    const { client } = await connect(td, agentId);
    const ended = await client.waitForType('session_ended', 10_000);
    expect(ended.data).toEqual({ reason: 'transfer', transfer_number: '+15551234567' });
    const lastAudioTurn = client.of('response_audio').at(-1)!.data.turn_id;
    expect(turnAudio(client.events, lastAudioTurn).length / 24_000).toBeGreaterThan(0.5);
  });

  it('silence: re-prompts after silence_timeout_secs, then ends with silence_timeout on the second strike', async () => {
    const agentId = await createAgent(td, {
      vad_settings: { ...FAST_VAD, silence_timeout_secs: 1 },
      first_message: 'Hi.',
      timeout_settings: { silence_counter: 2, silence_timeout_action: 'end_call' },
    });
    const { client } = await connect(td, agentId);
    const reprompt = await client.waitFor((e) => e.type === 'response_text' && e.data.text === 'Are you still there?' && e.data.is_final === true, 8000);
    expect(turnAudio(client.events, reprompt.data.turn_id).length / 24_000).toBeGreaterThan(0.3);
    const ended = await client.waitForType('session_ended', 8000);
    expect(ended.data).toEqual({ reason: 'silence_timeout' });
    expect(client.of('response_text').filter((e) => e.data.text === 'Are you still there?' && e.data.is_final)).toHaveLength(1);
  });

  it('silence with transfer_call says silence_transfer_message (not transfer_message) and transfers to silence_transfer_number', async () => {
    const agentId = await createAgent(td, {
      vad_settings: { ...FAST_VAD, silence_timeout_secs: 1 },
      first_message: 'Hi.',
      // The SDK types' camelCase names for the silence action's own target and message.
      timeout_settings: {
        silenceCounter: 1,
        silenceTimeoutAction: 'transfer_call',
        transfer_number: '+15550000001',
        transfer_message: 'General transfer.',
        silenceTransferNumber: '+15550000002',
        silenceTransferMessage: 'Passing you to a colleague.',
      },
    });
    const { client } = await connect(td, agentId);
    const ended = await client.waitForType('session_ended', 10_000);
    expect(ended.data).toEqual({ reason: 'transfer', transfer_number: '+15550000002' });
    const said = client.of('response_text').filter((e) => e.data.is_final).map((e) => e.data.text);
    expect(said).toContain('Passing you to a colleague.');
    expect(said).not.toContain('General transfer.');
  });
});

describe('fallback LLM', () => {
  let td: TestDaemon;
  let llm: FakeLlmServer;
  beforeAll(async () => {
    llm = await startFakeLlmServer('openai');
    td = await startTestDaemon({
      sip: { enabled: false },
      llm: { providers: [{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'vendor', type: 'openai', base_url: llm.baseUrl, api_key: 'llm-key', models: ['primary'] }], first_token_timeout_ms: 500 },
    });
  });
  afterAll(async () => {
    await td?.close();
    await llm?.close();
  });

  it('the primary answers itself when it works', async () => {
    llm.enqueue({ steps: openAiSse.text(['From ', 'the primary.']) });
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, llm: 'vendor/primary', fallback_llm: 'local/echo', first_message: 'Hi.' });
    const { client } = await connect(td, agentId);
    await turnEnd(client, 0);
    const mark = client.events.length;
    await say(client);
    const reply = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 8000, mark);
    expect(reply.data.text).toBe('From the primary.');
    expect(llm.requests.at(-1)!.headers.authorization).toBe('Bearer llm-key');
    client.close();
  });

  it('after a barge-in the model\'s history holds only what the caller heard of its answer', async () => {
    const long = 'Our opening hours are nine to five on weekdays, ten to four on Saturdays, and we are closed on Sundays and public holidays, except in December when we open every day.';
    llm.enqueue({ steps: openAiSse.text([long]) }, { steps: openAiSse.text(['Sure.']) });
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, llm: 'vendor/primary', fallback_llm: 'local/echo', first_message: 'Hi.' });
    const { client } = await connect(td, agentId);
    await turnEnd(client, 0);
    const mark = client.events.length;
    await say(client);
    // The long answer starts playing; the caller cuts in after about a second of it.
    await client.waitFor((e) => e.type === 'response_audio', 8000, mark);
    await new Promise((r) => setTimeout(r, 1000));
    const before = llm.requests.length;
    await say(client);
    await client.waitForType('interruption', 5000, mark);
    await client.waitFor(() => llm.requests.length > before, 8000);
    const messages = llm.requests.at(-1)!.body.messages as Array<{ role: string; content: string }>;
    const assistant = messages.filter((m) => m.role === 'assistant').map((m) => m.content);
    // The first message, then the cut answer: a strict, non-empty prefix of what the model wrote.
    expect(assistant[0]).toBe('Hi.');
    expect(assistant).toHaveLength(2);
    expect(assistant[1]!.length).toBeGreaterThan(0);
    expect(assistant[1]!.length).toBeLessThan(long.length / 2);
    expect(long.startsWith(assistant[1]!)).toBe(true);
    client.close();
  });

  it('falls back to local/echo when the primary answers 500', async () => {
    llm.enqueue({ status: 500, errorBody: { error: { message: 'boom' } } });
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, llm: 'vendor/primary', fallback_llm: 'local/echo', first_message: 'Hi.' });
    const { client } = await connect(td, agentId);
    await turnEnd(client, 0);
    const mark = client.events.length;
    await say(client);
    const reply = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 8000, mark);
    expect(reply.data.text).toMatch(/^You said: \(speech, /);
    client.close();
  });

  it('falls back when the primary misses the first-token deadline', async () => {
    llm.enqueue({ delayMs: 3000, steps: openAiSse.text(['too late']) });
    const agentId = await createAgent(td, { vad_settings: FAST_VAD, llm: 'vendor/primary', fallback_llm: 'local/echo', first_message: 'Hi.' });
    const { client } = await connect(td, agentId);
    await turnEnd(client, 0);
    const mark = client.events.length;
    await say(client);
    const reply = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 8000, mark);
    expect(reply.data.text).toMatch(/^You said: \(speech, /);
    expect(client.events.slice(mark).some((e) => e.type === 'response_text' && String(e.data.text).includes('too late'))).toBe(false);
    client.close();
  });
});
