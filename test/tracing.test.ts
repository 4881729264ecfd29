/**
 * Traces over real sockets (docs/tracing.md): a plain node:http OTLP/HTTP receiver, a daemon
 * pointed at it through the standard OTEL_* variables, a SIPp call whose caller speaks once, a
 * fake streaming STT and a fake OpenAI-compatible LLM (with keys that must never show). The
 * exporter posts OTLP/JSON, so the test reads the spans as sent: one trace for the call, its
 * session and its vendor requests, each span under the right parent, no secret anywhere.
 * First, a daemon with no endpoint: no SDK is registered and nothing reaches the receiver.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { trace, type ProxyTracerProvider } from '@opentelemetry/api';
import { startTestDaemon, type TestDaemon } from './helpers/daemon.ts';
import { startFakeListenServer, type FakeListenServer } from './agent/stt/fake-stt-servers.ts';
import { startFakeLlmServer, type FakeLlmServer } from './agent/llm/fake-llm-servers.ts';
import { placeBridgeCall } from './interop/bridge-harness.ts';
import { sippAvailable } from './interop/sipp.ts';
import { speechLike } from './helpers/speech-like.ts';
import { VoiceClient } from './agent/e2e/voice-client.ts';
import { startRawSipPeer } from './helpers/raw-sip.ts';
import { until } from './helpers/until.ts';

const NUMBER = '+15550007301';
const SECRETS = { llm: 'sk-llm-secret-4711', stt: 'stt-secret-4712', otlp: 'otlp-secret-4713' };

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
}

/** The OTLP/HTTP receiver: every POST's headers and JSON body. */
async function startOtlpReceiver(): Promise<{ url: string; posts: Array<{ path: string; headers: IncomingHttpHeaders; body: any }>; close(): Promise<void> }> {
  const posts: Array<{ path: string; headers: IncomingHttpHeaders; body: any }> = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      posts.push({ path: req.url ?? '', headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, posts, close: () => new Promise((r) => server.close(() => r())) };
}

const attr = (s: OtlpSpan, key: string): unknown => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v === undefined ? undefined : (v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.doubleValue));
};

describe.skipIf(sippAvailable().skip)('OpenTelemetry traces of a phone call', () => {
  let stt: FakeListenServer;
  let llm: FakeLlmServer;
  let rx: Awaited<ReturnType<typeof startOtlpReceiver>>;
  let callerSeq = 0;

  beforeAll(async () => {
    stt = await startFakeListenServer();
    llm = await startFakeLlmServer('openai');
    rx = await startOtlpReceiver();
  });
  afterAll(async () => {
    await stt?.close();
    await llm?.close();
    await rx?.close();
  });

  async function startDaemon(logLines?: string[]): Promise<{ d: TestDaemon; agentId: string }> {
    const d = await startTestDaemon(
      {
        rtp: { address: '127.0.0.1' },
        stt: { provider: 'stream', base_url: stt.baseUrl, api_key: SECRETS.stt, model: 'nova-3' },
        llm: { providers: [{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'vendor', type: 'openai', base_url: llm.baseUrl, api_key: SECRETS.llm, models: ['primary'] }] },
      },
      undefined,
      {},
      logLines,
    );
    const agentId = (await d.api('POST', '/v1/agents', { name: 'Traced', first_message: 'Hi.', llm: 'vendor/primary', vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 30 } })).body.id;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
    return { d, agentId };
  }

  /** One call: after the first message the caller says something (speak: true); its record once ended. */
  async function call(d: TestDaemon, agentId: string, o: { speak: boolean; hangupAfterMs: number }): Promise<any> {
    const caller = `+1555999${String(7300 + ++callerSeq).padStart(4, '0')}`;
    const c = await placeBridgeCall({ scenario: 'bridge-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, caller, hangupAfterMs: o.hangupAfterMs });
    try {
      if (o.speak) {
        await c.peer.waitFor(() => c.peer.spurts().length >= 1, 8000, 'the first message');
        stt.finalizeTranscript = 'what time is it';
        await c.peer.play(speechLike(0.6));
        await c.peer.waitFor(() => c.peer.spurts().length >= 2, 8000, "the agent's reply");
      }
      await c.proc.result;
      for (const end = Date.now() + 5000; ; await new Promise((r) => setTimeout(r, 50))) {
        const rec = ((await d.api('GET', `/v1/calls?outbound=false&agent_ids=${agentId}`)).body.calls as any[]).find((r) => r.from === caller);
        if (rec?.ended_at) return rec;
        if (Date.now() > end) throw new Error('the call record never ended');
      }
    } finally {
      await c.cleanup();
    }
  }

  it('with no OTLP endpoint set, no SDK is registered and nothing is exported', async () => {
    const { d, agentId } = await startDaemon();
    try {
      expect((trace.getTracerProvider() as ProxyTracerProvider).getDelegate().constructor.name).toBe('NoopTracerProvider');
      await call(d, agentId, { speak: false, hangupAfterMs: 1500 });
    } finally {
      await d.close();
    }
    expect(rx.posts).toEqual([]);
  });

  it('one trace per call: call -> session -> turns (their stages) and stt, llm and tts requests, W3C context across the voice socket, no secret', async () => {
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: rx.url,
      OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer ${SECRETS.otlp}`,
      OTEL_SERVICE_NAME: 'callbridge-test',
      OTEL_BSP_SCHEDULE_DELAY: '200',
    };
    Object.assign(process.env, env);
    const logLines: string[] = [];
    let started: Awaited<ReturnType<typeof startDaemon>>;
    try {
      started = await startDaemon(logLines);
    } finally {
      for (const k of Object.keys(env)) delete process.env[k];
    }
    const { d, agentId } = started;
    let rec: any;
    let webSessionId: string;
    /** The SIP Call-ID of the cancelled call (unset when the answer won the race with the CANCEL). */
    let cancelledCallId: string | undefined;
    try {
      rec = await call(d, agentId, { speak: true, hangupAfterMs: 5000 });
      // A web session: no phone leg, no traceparent from its client.
      const { token } = (await d.api('POST', '/v1/session-token', { agent_id: agentId })).body;
      const web = await VoiceClient.connect(d.url, token);
      webSessionId = ((await web.waitForType('session_started')).data as { id: string }).id;
      web.close();
      await web.waitClosed();
      // A caller who gives up while it rings: CANCEL, answered 487.
      const peer = await startRawSipPeer('127.0.0.1');
      try {
        const sipCallId = peer.invite(d.daemon.sip!.port, { user: NUMBER, from: '+15559990000' });
        await until(() => peer.for(sipCallId).some((r) => r.status === 180 || r.status === 183), 'a provisional response');
        peer.cancel(d.daemon.sip!.port, sipCallId);
        await until(() => peer.for(sipCallId).some((r) => r.status === 487 || r.status === 200), 'the final response to the INVITE');
        if (peer.for(sipCallId).some((r) => r.status === 487)) {
          peer.ackFailure(d.daemon.sip!.port, sipCallId);
          cancelledCallId = sipCallId;
        }
      } finally {
        await peer.close();
      }
    } finally {
      // The drain's last step flushes what is still queued.
      await d.close();
    }
    expect(llm.requests.length).toBeGreaterThanOrEqual(1);
    const on = logLines.map((l) => JSON.parse(l)).find((l) => l.msg.startsWith('tracing on'));
    expect(on).toMatchObject({ endpoint: `${rx.url}/v1/traces`, serviceName: 'callbridge-test' });
    expect(logLines.join('\n')).not.toContain(SECRETS.otlp);

    expect(rx.posts.length).toBeGreaterThan(0);
    for (const p of rx.posts) {
      expect(p.path).toBe('/v1/traces');
      expect(p.headers['content-type']).toContain('application/json');
      expect(p.headers.authorization).toBe(`Bearer ${SECRETS.otlp}`);
    }
    const resources = rx.posts.flatMap((p) => p.body.resourceSpans as any[]);
    expect(resources[0].resource.attributes).toContainEqual({ key: 'service.name', value: { stringValue: 'callbridge-test' } });
    const spans: OtlpSpan[] = resources.flatMap((r) => r.scopeSpans.flatMap((s: any) => s.spans));
    const byName = (n: string) => spans.filter((s) => s.name === n);

    const callSpans = byName('call');
    const callSpan = callSpans.find((c) => attr(c, 'callbridge.call.from') === rec.from);
    if (cancelledCallId !== undefined) {
      // The cancelled call: its own trace, 487, the caller's CANCEL as the reason.
      const cancelled = callSpans.find((c) => attr(c, 'sip.call_id') === cancelledCallId.slice(0, 64))!;
      expect([attr(cancelled, 'sip.final_status'), attr(cancelled, 'callbridge.call.end_reason'), attr(cancelled, 'callbridge.call.bridged')]).toEqual([487, 'caller side ended: cancelled', false]);
      expect(cancelled.traceId).not.toBe(callSpan!.traceId);
    }
    // The SIPp call and the raw peer's (cancelled, or answered when the 200 won the race).
    expect(callSpans).toHaveLength(2);
    expect(callSpan!.parentSpanId ?? '').toBe('');
    expect(attr(callSpan!, 'callbridge.call.direction')).toBe('inbound');
    expect(attr(callSpan!, 'callbridge.call.from')).toBe(rec.from);
    expect(attr(callSpan!, 'callbridge.call.id')).toBe(rec.id);
    expect(attr(callSpan!, 'callbridge.call.transport')).toBe('sip');
    expect(attr(callSpan!, 'sip.final_status')).toBe(200);
    expect(String(attr(callSpan!, 'sip.call_id')).length).toBeGreaterThan(0);
    expect(attr(callSpan!, 'callbridge.call.trunk_id')).toEqual(expect.any(String));
    expect(attr(callSpan!, 'callbridge.call.end_reason')).toBe('caller side ended: remote_bye');

    const sessions = byName('session');
    const session = sessions.find((x) => attr(x, 'callbridge.call.id') === rec.id);
    const webSession = sessions.find((x) => attr(x, 'callbridge.call.id') === webSessionId)!;
    // Any other session is the raw peer's call's (its session may start before the CANCEL lands): under that call.
    for (const other of sessions.filter((x) => x !== session && x !== webSession)) {
      expect(callSpans.find((c) => c.spanId === other.parentSpanId && c.traceId === other.traceId)).toBeDefined();
    }
    // A web session is the root of its own trace.
    expect(webSession.parentSpanId ?? '').toBe('');
    expect(webSession.traceId).not.toBe(callSpan!.traceId);
    expect(attr(webSession, 'callbridge.session.direction')).toBe('web');
    // The session server took the call's context from the upgrade's traceparent.
    expect(session!.traceId).toBe(callSpan!.traceId);
    expect(session!.parentSpanId).toBe(callSpan!.spanId);
    expect(attr(session!, 'callbridge.call.id')).toBe(rec.id);
    expect(attr(session!, 'callbridge.session.direction')).toBe('inbound');

    for (const kind of ['stt', 'llm', 'tts']) {
      const vendor = byName(kind).filter((s) => attr(s, 'callbridge.vendor.kind') === kind);
      const ofCall = vendor.filter((s) => s.traceId === callSpan!.traceId);
      expect(ofCall.length, kind).toBeGreaterThanOrEqual(1);
      for (const s of ofCall) expect(s.parentSpanId).toBe(session!.spanId);
      // The other sessions' (the web session's first message, the raw peer's call's) are under their own session.
      for (const s of vendor.filter((v) => !ofCall.includes(v))) expect(sessions.find((x) => x.spanId === s.parentSpanId && x.traceId === s.traceId)).toBeDefined();
    }
    // The turns, built from their timelines: the first message and the reply, under the session,
    // their stages under them.
    const turns = byName('turn').filter((t) => t.traceId === callSpan!.traceId);
    expect(turns.map((t) => attr(t, 'callbridge.turn.kind')).sort()).toEqual(['first', 'reply']);
    for (const t of turns) expect([t.traceId, t.parentSpanId]).toEqual([callSpan!.traceId, session!.spanId]);
    const reply = turns.find((t) => attr(t, 'callbridge.turn.kind') === 'reply')!;
    const stages = spans.filter((s) => s.parentSpanId === reply.spanId).map((s) => s.name);
    expect(stages).toEqual(expect.arrayContaining(['stt', 'turn_commit', 'llm', 'sentence', 'tts']));
    const llmSpan = byName('llm').find((s) => attr(s, 'callbridge.vendor.kind') === 'llm')!;
    expect([attr(llmSpan, 'callbridge.vendor.provider'), attr(llmSpan, 'callbridge.vendor.type'), attr(llmSpan, 'callbridge.vendor.model')]).toEqual(['vendor', 'openai', 'primary']);
    const sttSpan = byName('stt').find((s) => attr(s, 'callbridge.vendor.kind') === 'stt')!;
    expect([attr(sttSpan, 'callbridge.vendor.type'), attr(sttSpan, 'callbridge.vendor.model')]).toEqual(['stream', 'nova-3']);

    // Every span of this daemon is in one of the two traces; none carries a key, a token or a URL with one.
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([...callSpans.map((c) => c.traceId), webSession.traceId]));
    const text = JSON.stringify(spans);
    for (const secret of [...Object.values(SECRETS), d.key, 'token=', 'eyJ']) expect(text).not.toContain(secret);
  });
});
