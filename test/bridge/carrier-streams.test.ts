/**
 * The carrier's entry points alone (src/bridge/carrier-streams.ts), with fake stream transports
 * and an in-memory registry: a stream is refused while the node is full, a final status callback
 * ends the live stream of its own account only, and a carrier dial needs the carrier configured.
 * The same paths with a fake carrier over HTTP and WebSockets: test/telco/twilio-*.test.ts,
 * test/bridge/carrier-dial*.test.ts.
 */
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import type { BridgeMetrics } from '../../src/bridge/bridge-metrics.ts';
import { BridgedCalls } from '../../src/bridge/bridged-calls.ts';
import { CallRecordWriter } from '../../src/bridge/call-record-writer.ts';
import { CallSlots, MemorySlots } from '../../src/bridge/call-slots.ts';
import { CarrierStreams } from '../../src/bridge/carrier-streams.ts';
import type { SessionOpener } from '../../src/bridge/session-opener.ts';
import { DomainError } from '../../src/domain/errors.ts';
import { MediaTicker } from '../../src/media/media-ticker.ts';
import type { Store } from '../../src/store/index.ts';
import type { CarrierCallStatus } from '../../src/telco/twilio-call-status.ts';
import type { StartedStream, StreamTransport } from '../../src/telco/twilio-stream-socket.ts';

const log = pino({ level: 'silent' });

function setup(o: { maxCalls?: number } = {}) {
  const slots = new CallSlots(new MemorySlots(), 'node-1', { maxCallsPerTrunk: 0, maxCallsPerOrg: 0 }, log);
  const records = new CallRecordWriter({ markAnswered: () => true, end: () => true, setRecording: () => true, setSip: () => true }, true);
  const metrics = { callStarted: vi.fn(), callEnded: vi.fn(), failure: vi.fn(), quality: vi.fn() };
  const calls = new BridgedCalls({ slots, maxCalls: o.maxCalls ?? 0, records, metrics: metrics as unknown as BridgeMetrics });
  // The agent lookup never answers: a stream stays ringing, live, for the status callbacks.
  const store = { agents: { get: () => new Promise(() => undefined) }, telcoNumbers: {}, client: { dialect: 'sqlite' } } as unknown as Store;
  const sessions = { recordsCalls: true, open: vi.fn(), connectUrl: (t: string) => t } as unknown as SessionOpener;
  const streams = new CarrierStreams({ store, sessions, logger: log, calls, records, ticker: new MediaTicker(), metrics: metrics as unknown as BridgeMetrics });
  return { streams, calls, metrics };
}

function stream(callSid: string, accountSid = 'AC1') {
  const closed: Array<[number, string]> = [];
  const transport: StreamTransport = { sendMedia: () => undefined, sendMark: () => undefined, sendClear: () => undefined, close: (code, reason) => void closed.push([code, reason]) };
  const started: StartedStream = { streamSid: `MZ-${callSid}`, transport, grant: { orgId: 'org', agentId: 'agent', numberId: 'number', callSid, accountSid, from: '+15550000001', to: '+15550000002' } };
  return { started, closed };
}

const ended = (callSid: string, accountSid: string): CarrierCallStatus => ({ accountSid, callSid, callId: undefined, progress: { kind: 'ended', status: 'completed', dial: 'completed' }, durationSecs: 3, sipResponseCode: undefined });

describe('carrier entry points', () => {
  it('refuses an inbound stream while the node is at bridge.max_calls (1013, counted)', () => {
    const s = setup({ maxCalls: 1 });
    s.streams.handleMediaStream(stream('CA1').started);
    expect(s.calls.active).toBe(1);
    const second = stream('CA2');
    s.streams.handleMediaStream(second.started);
    expect(second.closed).toEqual([[1013, 'too many calls']]);
    expect(s.metrics.failure).toHaveBeenCalledWith('limit_global');
    expect(s.calls.active).toBe(1);
  });

  it('a final status callback ends the live stream of its CallSid, only from the same account', async () => {
    const s = setup();
    const live = stream('CA1', 'AC1');
    s.streams.handleMediaStream(live.started);
    await s.streams.status(ended('CA1', 'AC-other'));
    expect(live.closed).toEqual([]);
    await s.streams.status(ended('CA1', 'AC1'));
    expect(live.closed).toEqual([[1000, 'call completed at the carrier']]);
    expect(s.calls.active).toBe(0);
  });

  it('dial: 503 when the carrier call API is not configured', async () => {
    const err = await setup().streams.dial({ orgId: 'org', agentId: 'agent', telcoNumberId: 'number', number: '+15550000003' } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect((err as DomainError).message).toMatch(/not configured/);
  });
});
