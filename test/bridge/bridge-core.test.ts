/**
 * The bridge core alone: a fake call leg and a fake voice link, no daemon, no SIP peer, no socket.
 * Each test plays the session's side (the link's events) and the caller's side (the leg's), and
 * checks what the core did to the other: answer, media, DTMF, hang-up, transfer, the call record
 * and the `bridged call ended` line. The end-to-end tests (smoke, dtmf, upstream, interop) run
 * the same rules over real SIP and WebSockets.
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BridgeCore, type BridgeCoreOptions, type CallRecorderSink } from '../../src/bridge/bridge-core.ts';
import type { CallLeg, LegEnd, LegMediaOptions, RefusalCause } from '../../src/bridge/call-leg.ts';
import { CallRecordWriter, type CallRecords } from '../../src/bridge/call-record-writer.ts';
import type { InboundSession } from '../../src/bridge/inbound-session.ts';
import type { TransferFallback } from '../../src/bridge/transfer-handler.ts';
import { dispatchServerMessage, type VoiceLink, type VoiceLinkEvents } from '../../src/bridge/voice-link.ts';
import type { BridgeMetrics } from '../../src/bridge/bridge-metrics.ts';
import type { BridgeMedia, BridgeMediaCallbacks, BridgeMediaStats } from '../../src/media/bridge-media.ts';

class FakeMedia implements BridgeMedia {
  readonly pushed: number[][] = [];
  /** Agent samples waiting to be played: what an interruption must drop. */
  queued = 0;
  clears = 0;
  stops = 0;
  constructor(readonly callbacks: BridgeMediaCallbacks) {}
  push(audio: Int16Array): void {
    this.pushed.push([...audio]);
    this.queued += audio.length;
  }
  clear(): void {
    this.clears++;
    this.queued = 0;
  }
  lateFrames(): number {
    return 0;
  }
  stop(): Promise<BridgeMediaStats> {
    this.stops++;
    return Promise.resolve({
      rtp: { packetsReceived: 98, packetsLost: 2, jitterMs: 3 },
      inbound: { depthMs: 60, concealedFrames: 1 },
      outbound: { framesSent: 40, silenceSent: 10, framesLate: 0, maxLateMs: 0, queuedMs: 0, droppedMs: 0, lateTicksSkipped: 0 },
      inboundTickMs: 0.01,
    } as unknown as BridgeMediaStats);
  }
}

/** A call leg with the life of a SIP call: reject and hangup end it at once, with a reason. */
class FakeLeg implements CallLeg {
  readonly id = 'leg-1';
  readonly from = '+15550000001';
  readonly to = '+15550000002';
  readonly route = { orgId: 'org', agentId: 'agent', trunkId: 'trunk' };
  readonly trunkId = 'trunk';
  readonly codec = 'PCMU';
  state: 'ringing' | 'answered' | 'ended';
  refused: { cause: RefusalCause; why: string } | undefined;
  hangups = 0;
  answers = 0;
  readonly keysSent: string[] = [];
  readonly transfers: string[] = [];
  /** What the leg's own transfer does: hand the caller over (leg ends) or leave it up. */
  transferWorks = false;
  /** Holds each key until released (DTMF takes time on the wire). */
  keyGate: Promise<void> = Promise.resolve();
  media: FakeMedia | undefined;
  mediaOptions: LegMediaOptions | undefined;
  readonly #hangup: Array<(end: LegEnd) => void> = [];
  readonly #dtmf: Array<(digit: string) => void> = [];

  constructor(readonly direction: 'inbound' | 'outbound') {
    this.state = direction === 'inbound' ? 'ringing' : 'answered';
  }
  get closed(): boolean {
    return this.state === 'ended';
  }
  answer(): boolean {
    if (this.state !== 'ringing' || this.direction !== 'inbound') return false;
    this.answers++;
    this.state = 'answered';
    return true;
  }
  refuse(cause: RefusalCause, why: string): void {
    if (this.state !== 'ringing') return;
    this.refused = { cause, why };
    this.end('rejected');
  }
  hangup(): void {
    if (this.state === 'ended') return;
    this.hangups++;
    this.end('local');
  }
  /** The caller (or the network) ends the leg. */
  end(reason: string): void {
    if (this.state === 'ended') return;
    this.state = 'ended';
    for (const l of this.#hangup) l({ reason });
  }
  onHangup(listener: (end: LegEnd) => void): void {
    this.#hangup.push(listener);
  }
  onDtmf(listener: (digit: string) => void): void {
    this.#dtmf.push(listener);
  }
  press(digit: string): void {
    for (const l of this.#dtmf) l(digit);
  }
  async sendDtmf(digit: string): Promise<void> {
    await this.keyGate;
    this.keysSent.push(digit);
  }
  startMedia(options: LegMediaOptions, callbacks: BridgeMediaCallbacks): BridgeMedia {
    if (this.media !== undefined) throw new Error('media started twice');
    this.mediaOptions = options;
    this.media = new FakeMedia(callbacks);
    return this.media;
  }
  async transfer(target: string): Promise<void> {
    this.transfers.push(target);
    await Promise.resolve(); // a REFER takes a round trip
    if (this.transferWorks) this.end('transferred');
  }
  quality() {
    return { packetsReceived: 0, packetsLost: 0, jitterMs: 0 };
  }
}

class FakeLink implements VoiceLink {
  open = true;
  audioInWorker = false;
  readonly framesSent: number[][] = [];
  readonly keys: string[] = [];
  closedWith: [number, string] | undefined;
  constructor(
    readonly url: string,
    readonly recording: boolean,
    readonly session: VoiceLinkEvents,
  ) {}
  sendInputAudio(frame: Int16Array): void {
    this.framesSent.push([...frame]);
  }
  sendDtmf(digit: string): void {
    this.keys.push(digit);
  }
  finalCounts(): Promise<{ framesIn: number; audioOut: number } | undefined> {
    return Promise.resolve(this.audioInWorker ? { framesIn: 7, audioOut: 5 } : undefined);
  }
  close(code: number, reason: string): void {
    this.closedWith ??= [code, reason];
    this.open = false;
  }
}

const URL = 'ws://voice.test/v1/connection?token=t';
const opened: InboundSession = { open: async () => ({ sessionId: 'session-1', connectUrl: URL }) };
/** Lets promise chains (DTMF, the transfer, the end-of-call figures) run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

function setup(o: { direction?: 'inbound' | 'outbound'; sessionServerRecords?: boolean; fallback?: TransferFallback; recorder?: BridgeCoreOptions['recorder'] } = {}) {
  const leg = new FakeLeg(o.direction ?? 'inbound');
  const links: FakeLink[] = [];
  const calls = { markAnswered: vi.fn<CallRecords['markAnswered']>(() => true), end: vi.fn<CallRecords['end']>(() => true), setRecording: vi.fn<CallRecords['setRecording']>(() => true), setSip: vi.fn<CallRecords['setSip']>(() => true) };
  const metrics = { callStarted: vi.fn<BridgeMetrics['callStarted']>(), callEnded: vi.fn<BridgeMetrics['callEnded']>(), failure: vi.fn<BridgeMetrics['failure']>(), quality: vi.fn<BridgeMetrics['quality']>() };
  const logs: Array<Record<string, any>> = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line)) });
  const onDone = vi.fn();
  const core = new BridgeCore({
    leg,
    log,
    openLink: (url, recording, events) => {
      const link = new FakeLink(url, recording, events);
      links.push(link);
      return link;
    },
    records: new CallRecordWriter(calls, o.sessionServerRecords ?? false),
    recorder: o.recorder,
    metrics,
    transferFallback: o.fallback,
    onDone,
  });
  return { core, leg, links, calls, metrics, logs, onDone, link: () => links[0]! };
}

/** An inbound call whose session has started: answered, media running. */
async function bridged(o: Parameters<typeof setup>[0] = {}) {
  const s = setup(o);
  await s.core.start(opened);
  s.link().session.started();
  return { ...s, media: s.leg.media! };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('bridge core: answer and media', () => {
  it('rings while the session connects and answers on session_started', async () => {
    const s = setup();
    await s.core.start(opened);
    expect(s.links).toHaveLength(1);
    expect(s.link().url).toBe(URL);
    expect(s.leg.state).toBe('ringing');
    expect(s.leg.media).toBeUndefined();
    s.link().session.started();
    expect(s.leg.state).toBe('answered');
    expect(s.leg.mediaOptions).toEqual({ sendSilence: true, keepAgentFrames: false });
    expect(s.metrics.callStarted).toHaveBeenCalledWith('inbound');
    expect(s.calls.markAnswered).toHaveBeenCalledWith('session-1', expect.any(String));
    expect(s.logs.find((l) => l.msg === 'call answered and bridged to its voice session')).toMatchObject({ sessionId: 'session-1', codec: 'PCMU' });
  });

  it('an answered outbound leg is not answered again; its end is the callee side', async () => {
    const s = setup({ direction: 'outbound' });
    s.core.attach('session-2', URL);
    s.link().session.started();
    expect(s.leg.answers).toBe(0);
    expect(s.leg.media).toBeDefined();
    s.leg.end('remote_bye');
    expect(s.calls.end).toHaveBeenCalledWith('session-2', expect.objectContaining({ termination_reason: 'callee side ended: remote_bye' }));
  });

  it('moves audio both ways: caller frames to input_audio, response_audio to the leg', async () => {
    const s = setup();
    await s.core.start(opened);
    s.link().session.audio(new Int16Array([9, 9])); // before the answer: nowhere to play it
    s.link().session.started();
    const { media } = s.leg;
    media!.callbacks.onInputFrame(new Int16Array([1, 2, 3]), null, 0);
    media!.callbacks.onInputFrame(null, null, 20); // the jitter buffer had nothing: nothing sent
    s.link().session.audio(new Int16Array([4, 5]));
    expect(s.link().framesSent).toEqual([[1, 2, 3]]);
    expect(media!.pushed).toEqual([[4, 5]]);
  });

  it('a link whose worker moves the audio gets no frames from here', async () => {
    const s = setup();
    await s.core.start(opened);
    s.link().audioInWorker = true;
    s.link().session.started();
    s.leg.media!.callbacks.onInputFrame(new Int16Array([1]), null, 0);
    expect(s.link().framesSent).toEqual([]);
  });

  it('an interruption clears the agent audio queued on the leg', async () => {
    const { link, media } = await bridged();
    link().session.audio(new Int16Array(480));
    link().session.audio(new Int16Array(480));
    expect(media.queued).toBe(960);
    link().session.interruption();
    expect(media.clears).toBe(1);
    expect(media.queued).toBe(0);
  });

  it('an interruption a worker link already acted on is not cleared again', async () => {
    const { link, media } = await bridged();
    link().audioInWorker = true;
    link().session.interruption();
    expect(media.clears).toBe(0);
  });

  it('records both sides each tick and stores the recording with the record', async () => {
    const ticks: Array<[number[] | null, number[] | null]> = [];
    const sink: CallRecorderSink = { tick: (c, a) => void ticks.push([c && [...c], a && [...a]]), close: () => '/rec/session-1.wav' };
    const { core, link, media, leg, calls } = await bridged({ recorder: () => sink });
    expect(link().recording).toBe(true);
    expect(leg.mediaOptions?.keepAgentFrames).toBe(true);
    media.callbacks.onInputFrame(new Int16Array([1]), new Int16Array([2]), 0);
    media.callbacks.onInputFrame(null, null, 20);
    leg.end('remote_bye');
    expect(ticks).toEqual([[[1], [2]], [null, null]]);
    expect(calls.setRecording).toHaveBeenCalledWith('session-1', '/rec/session-1.wav');
    expect(core).toBeDefined();
  });
});

describe('bridge core: DTMF', () => {
  it('keys the caller presses go to the session', async () => {
    const { leg, link } = await bridged();
    leg.press('5');
    leg.press('#');
    expect(link().keys).toEqual(['5', '#']);
  });

  it('keys the agent presses are played one after another, in order, up to the first invalid one', async () => {
    const { leg, link } = await bridged();
    let release!: () => void;
    leg.keyGate = new Promise((resolve) => (release = resolve));
    link().session.dtmf('12');
    link().session.dtmf('3x4');
    await settle();
    expect(leg.keysSent).toEqual([]);
    release();
    await settle();
    expect(leg.keysSent).toEqual(['1', '2', '3']);
  });
});

describe('bridge core: the end of the call', () => {
  it('session_ended hangs up the leg and closes the link', async () => {
    const { leg, link, onDone, metrics, logs } = await bridged();
    link().session.ended('agent_hangup', undefined);
    expect(leg.hangups).toBe(1);
    expect(link().closedWith).toEqual([1000, 'call ended']);
    expect(onDone).toHaveBeenCalledTimes(1);
    expect(metrics.callEnded).toHaveBeenCalledWith('inbound');
    await settle();
    expect(logs.find((l) => l.msg === 'bridged call ended')).toMatchObject({ why: 'caller side ended: local', framesIn: 0, audioOut: 0, packetsReceived: 98, packetsLost: 2 });
  });

  it('the caller hanging up closes the link and stops the media; one quality report', async () => {
    const { core, leg, link, media, metrics, logs } = await bridged();
    leg.end('remote_bye');
    expect(link().closedWith).toEqual([1000, 'call ended']);
    expect(media.stops).toBe(1);
    link().session.closed(1000, 'call ended');
    await settle();
    expect(metrics.quality).toHaveBeenCalledTimes(1);
    expect(metrics.quality.mock.calls[0]![0]).toMatchObject({ jitterBufferDepthMs: 60, lossRatio: 0.02, frames: { sent: 50, late: 0, skipped: 0 } });
    expect(logs.filter((l) => l.msg === 'bridged call ended')).toHaveLength(1);
    expect(core.trunkId).toBe('trunk');
  });

  it('a worker link reports its own counts in the quality line', async () => {
    const { leg, link, logs } = await bridged();
    link().audioInWorker = true;
    leg.end('remote_bye');
    await settle();
    expect(logs.find((l) => l.msg === 'bridged call ended')).toMatchObject({ framesIn: 7, audioOut: 5 });
  });

  it('the session closing ends the call with the close code and reason', async () => {
    const { leg, link, calls } = await bridged();
    link().session.closed(1011, 'agent failed');
    expect(leg.hangups).toBe(1);
    expect(calls.end).toHaveBeenCalledTimes(1);
    expect(calls.end.mock.calls[0]).toEqual(['session-1', expect.objectContaining({ termination_reason: 'voice session closed (1011 agent failed)' })]);
  });

  it('writes the call record once, with the first reason, when the bridge keeps it', async () => {
    const { leg, link, calls } = await bridged();
    leg.end('remote_bye');
    link().session.closed(1000, '');
    link().session.ended('client_closed', undefined);
    link().session.failed(new Error('late'));
    expect(calls.end).toHaveBeenCalledTimes(1);
    const [id, end] = calls.end.mock.calls[0]!;
    expect(id).toBe('session-1');
    expect(end).toMatchObject({ termination_reason: 'caller side ended: remote_bye', ended_at: expect.any(String) });
    expect(end).not.toHaveProperty('end_status');
  });

  it('leaves the record to a session server that keeps it', async () => {
    const { leg, calls } = await bridged({ sessionServerRecords: true });
    leg.end('remote_bye');
    expect(calls.markAnswered).not.toHaveBeenCalled();
    expect(calls.end).not.toHaveBeenCalled();
  });

  it('a session server that keeps the record: a call that ends before its session started is ended by the bridge, if still unanswered', async () => {
    // The caller hangs up while the session socket connects.
    const connecting = setup({ sessionServerRecords: true });
    await connecting.core.start(opened);
    connecting.leg.end('cancelled');
    await settle();
    expect(connecting.calls.end).toHaveBeenCalledTimes(1);
    expect(connecting.calls.end.mock.calls[0]![0]).toBe('session-1');
    expect(connecting.calls.end.mock.calls[0]![1]).toMatchObject({ termination_reason: 'caller side ended: cancelled', end_status: 'failed', unconnected_only: true });
    expect(connecting.calls.markAnswered).not.toHaveBeenCalled();

    // The caller hangs up while the session is being created: its record is told once it exists.
    let created!: () => void;
    const creating = setup({ sessionServerRecords: true });
    const start = creating.core.start({ open: () => new Promise((resolve) => (created = () => resolve({ sessionId: 'session-2', connectUrl: URL }))) });
    await settle();
    creating.leg.end('cancelled');
    expect(creating.calls.end).not.toHaveBeenCalled();
    created();
    await start;
    await settle();
    expect(creating.links).toHaveLength(0);
    expect(creating.calls.end.mock.calls.map((c) => [c[0], c[1].termination_reason, c[1].unconnected_only])).toEqual([['session-2', 'caller side ended: cancelled', true]]);
  });
});

describe('bridge core: transfer', () => {
  it('session_ended with a transfer: the agent media stops and the leg transfers; the session close does not end the call', async () => {
    const { leg, link, media, calls } = await bridged();
    leg.transferWorks = true;
    link().session.ended('transfer', '+15550009999');
    link().session.closed(1000, '');
    expect(media.stops).toBe(1);
    await settle();
    expect(leg.transfers).toEqual(['+15550009999']);
    expect(leg.hangups).toBe(0);
    expect(calls.end.mock.calls[0]![1]).toMatchObject({ termination_reason: 'caller side ended: transferred' });
  });

  it('a refused transfer falls back to a new leg and relays audio until the caller hangs up', async () => {
    const relay = { close: vi.fn() };
    const target = { id: 'leg-2', hangup: vi.fn(), relay: vi.fn(() => relay) };
    const fallback = vi.fn<TransferFallback>(async () => target);
    const { leg, link, logs } = await bridged({ fallback });
    link().session.ended('transfer', '+15550009999');
    link().session.closed(1000, '');
    await settle();
    expect(leg.transfers).toEqual(['+15550009999']);
    expect(fallback).toHaveBeenCalledWith('+15550009999');
    expect(target.relay).toHaveBeenCalledTimes(1);
    expect(leg.state).toBe('answered');
    expect(logs.find((l) => l.msg === 'transfer fallback: target reached on a new leg, relaying audio')).toMatchObject({ legCallId: 'leg-2' });
    leg.end('remote_bye');
    expect(relay.close).toHaveBeenCalledTimes(1);
  });

  it('a refused transfer whose target does not answer hangs up', async () => {
    const { leg, link } = await bridged({ fallback: async () => undefined });
    link().session.ended('transfer', '+15550009999');
    await settle();
    expect(leg.hangups).toBe(1);
  });

  it('a target reached after the caller left is hung up', async () => {
    const target = { id: 'leg-2', hangup: vi.fn(), relay: vi.fn(() => ({ close() {} })) };
    let reach!: () => void;
    const { leg, link } = await bridged({ fallback: () => new Promise((resolve) => (reach = () => resolve(target))) });
    link().session.ended('transfer', '+15550009999');
    await settle();
    leg.end('remote_bye');
    reach();
    await settle();
    expect(target.hangup).toHaveBeenCalledTimes(1);
    expect(target.relay).not.toHaveBeenCalled();
  });

  it('a transfer without a number is a hang-up', async () => {
    const { leg, link } = await bridged();
    link().session.ended('transfer', undefined);
    expect(leg.transfers).toEqual([]);
    expect(leg.hangups).toBe(1);
  });
});

describe('bridge core: refusals', () => {
  it('a session that does not start within the connect timeout refuses the call', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const s = setup();
    await s.core.start(opened);
    vi.advanceTimersByTime(9_999);
    expect(s.leg.state).toBe('ringing');
    vi.advanceTimersByTime(1);
    expect(s.leg.refused).toEqual({ cause: 'service_unavailable', why: 'voice session timeout' });
    expect(s.link().closedWith).toEqual([1000, 'call ended']);
    expect(s.metrics.failure).toHaveBeenCalledWith('not_bridged');
    expect(s.calls.end.mock.calls[0]![1]).toMatchObject({ end_status: 'failed' });
    expect(s.onDone).toHaveBeenCalledTimes(1);
  });

  it('a session that started in time is not refused later', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { leg } = await bridged();
    vi.advanceTimersByTime(60_000);
    expect(leg.refused).toBeUndefined();
    expect(leg.state).toBe('answered');
  });

  it('a session the voice server refuses refuses the call', async () => {
    const s = setup();
    await s.core.start(opened);
    s.link().session.refused(401);
    expect(s.leg.refused).toEqual({ cause: 'service_unavailable', why: 'voice session refused' });
  });

  it('a session that cannot be opened refuses the call without a link', async () => {
    const s = setup();
    await s.core.start({ open: () => Promise.reject(new Error('upstream down')) });
    expect(s.leg.refused).toEqual({ cause: 'service_unavailable', why: 'voice session unavailable' });
    expect(s.links).toEqual([]);
    expect(s.logs.find((l) => l.msg === 'could not open a voice session for the call')).toBeDefined();
  });

  it('a call with nothing to bridge to is refused with its cause', async () => {
    const s = setup();
    await s.core.start({ refuse: 'agent_unavailable', why: 'agent a is gone or inactive' });
    expect(s.leg.refused).toEqual({ cause: 'agent_unavailable', why: 'agent a is gone or inactive' });
    expect(s.onDone).toHaveBeenCalledTimes(1);
  });

  it('a caller who hangs up while the session opens gets no link', async () => {
    const s = setup();
    let open!: () => void;
    const started = s.core.start({ open: () => new Promise((resolve) => (open = () => resolve({ sessionId: 's', connectUrl: URL }))) });
    s.leg.end('cancelled');
    open();
    await started;
    expect(s.links).toEqual([]);
    expect(s.metrics.failure).toHaveBeenCalledWith('not_bridged');
  });
});

describe('voice link: the protocol messages the core acts on', () => {
  it('maps session messages to events and ignores the rest', () => {
    const seen: unknown[] = [];
    const events = new Proxy({} as VoiceLinkEvents, { get: (_t, name) => (...args: unknown[]) => void seen.push([name, ...args]) });
    for (const msg of [
      { type: 'session_started', data: { id: 's' } },
      { type: 'interruption', data: {} },
      { type: 'dtmf', data: { digits: '12#' } },
      { type: 'session_ended', data: { reason: 'transfer', transfer_number: '+1555' } },
      { type: 'session_ended', data: {} },
      { type: 'transcript', data: { text: 'hi' } },
    ]) dispatchServerMessage(msg, events);
    expect(seen).toEqual([['started'], ['interruption'], ['dtmf', '12#'], ['ended', 'transfer', '+1555'], ['ended', 'unknown', undefined]]);
  });
});
