/**
 * The carrier's side of N concurrent media-stream calls for bench/bridge: the load generator of
 * its media-stream phase. It speaks Twilio's documented wire protocol over real loopback sockets,
 * computed here independently of callbridge's code (node:crypto, ws):
 *
 *   the voice webhook  POST <public_url>/v1/telco/twilio/voice, application/x-www-form-urlencoded
 *                      with the parameters Twilio posts for an incoming call (AccountSid, CallSid,
 *                      From, To, CallStatus ringing, Direction inbound, ...), X-Twilio-Signature =
 *                      base64 HMAC-SHA1 keyed with the account's auth token over the full URL
 *                      followed by every parameter sorted by name, each name then its value
 *                      ("Webhooks security"). The TwiML answer must be <Connect><Stream url> with
 *                      its <Parameter>s (the one-time token among them).
 *   the media stream   a WebSocket to that url: `connected`, `start` (accountSid, streamSid,
 *                      callSid, tracks [inbound], mediaFormat audio/x-mulaw 8000 Hz mono,
 *                      customParameters as the TwiML gave them), then one `media` per 20 ms of
 *                      real time (base64 of 160 mu-law bytes, track inbound, chunk from 1,
 *                      timestamp in ms) on a drift-free schedule (streams spread over the 20 ms),
 *                      and `stop` at the end, after which the socket is closed 1000.
 *   what comes back    `media` (the agent's audio), `mark` and `clear`. Like the carrier, each
 *                      stream plays what it received from a buffer at one frame per 20 ms, echoes
 *                      a mark once the audio before it was played, and on `clear` empties the
 *                      buffer and echoes the marks still in it.
 *
 * Figures (analyse()): per stream, the agent's media messages received inside the window, by
 * arrival time here. Talk spurts: a new one where arrivals pause > 100 ms beyond the 20 ms
 * (the bridge sends nothing while the agent is quiet). Within a spurt, message k is due at
 * ref + 20 ms * k, ref = the spurt's earliest (arrival - 20 ms * k) so far; off slot = more than
 * 5 ms after that; a message over 20 ms late is a pause (counted, and the schedule re-anchors on
 * it). A stream is HELD when its socket stayed open until this side sent `stop`, it received the
 * agent's audio in the window (a reply to the caller's audio: the first message is over before
 * the window), and >= 99 % of those messages were on their slot. The arrival times carry this
 * process's own lateness: `sendLate` (its media sends against their schedule) says how much.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';

const FRAME_MS = 20;
const ON_SLOT_MS = 5;
const SPURT_PAUSE_MS = 100;
const PAUSE_LATE_MS = 20;
/** A stream is paced when at least this share of its agent media in the window was on its slot. */
export const PACED_SHARE = 0.99;

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

/** X-Twilio-Signature of a POST of `params` to `url` (Twilio, "Webhooks security"). */
export function signTwilioRequest(authToken: string, url: string, params: ReadonlyArray<readonly [string, string]>): string {
  const data = [...params].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).reduce((acc, [k, v]) => acc + k + v, url);
  return createHmac('sha1', authToken).update(Buffer.from(data, 'utf8')).digest('base64');
}

const unescapeXml = (s: string) => s.replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
const attr = (tag: string, name: string) => {
  const m = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  return m ? unescapeXml(m[1]!) : undefined;
};

/** <Connect><Stream url> of a TwiML answer and its <Parameter>s, or undefined. */
export function connectStreamOf(twiml: string): { url: string; parameters: Record<string, string> } | undefined {
  const stream = /<Connect>\s*<Stream\b([^>]*)>([\s\S]*?)<\/Stream>\s*<\/Connect>/.exec(twiml);
  const url = stream ? attr(stream[1]!, 'url') : undefined;
  if (!stream || url === undefined) return undefined;
  const parameters: Record<string, string> = {};
  for (const p of stream[2]!.matchAll(/<Parameter\b([^>]*)\/>/g)) {
    const name = attr(p[1]!, 'name');
    if (name !== undefined) parameters[name] = attr(p[1]!, 'value') ?? '';
  }
  return { url, parameters };
}

interface Stream {
  index: number;
  callSid: string;
  streamSid: string;
  ws: WebSocket;
  /** performance.now() of media message 0 of the schedule. */
  startAt: number;
  sent: number;
  seq: number;
  phase: number;
  /** Closed before this side's `stop` (by callbridge or the network). */
  closedEarly: boolean;
  closeCode: number | undefined;
  stopped: boolean;
  /** The carrier's playout buffer: frames (true) and marks (names) in order. */
  buffer: Array<true | string>;
  /** Agent media arrivals inside the window. */
  at: number[];
  received: number;
  marksEchoed: number;
  clears: number;
}

export interface StreamCallersOptions {
  /** http.public_url + /v1/telco/twilio/voice: where the webhook goes and the URL signed. */
  webhookUrl: string;
  accountSid: string;
  authToken: string;
  /** The imported number called. */
  to: string;
  /** The callers' audio: 160-byte mu-law frames, played in a loop, each stream at its own phase. */
  payloads: readonly Buffer[];
}

export interface StreamFigures {
  placed: number;
  /** Streams held (see the header). */
  held: number;
  /** Streams closed before `stop`. */
  closedEarly: number;
  /** Streams that received no agent media in the window. */
  silent: number;
  /** Agent media messages in the window, and how many were more than 5 ms off their slot. */
  frames: number;
  offSlot: number;
  lateP99: number;
  pauses: number;
  spurts: number;
  marksEchoed: number;
  clears: number;
  /** This side's media sends inside the window: lateness against their schedule (ms). */
  sendLateP99: number;
  sendOnTime: number;
}

export class MediaStreamCallers {
  readonly streams: Stream[] = [];
  readonly #o: StreamCallersOptions;
  readonly #payloads: string[];
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  window: { from: number; to: number } = { from: Infinity, to: -Infinity };
  /** Send lateness (ms) of media sent inside the window. */
  readonly lateness: number[] = [];

  constructor(o: StreamCallersOptions) {
    this.#o = o;
    this.#payloads = o.payloads.map((p) => {
      if (p.length !== 160) throw new RangeError('media payloads must be 160 mu-law bytes (20 ms at 8 kHz)');
      return p.toString('base64');
    });
  }

  /** Places n calls over rampMs: each a signed webhook POST, then its stream opened and started. */
  async place(n: number, rampMs: number): Promise<void> {
    const t0 = performance.now();
    const pending: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      const at = t0 + (rampMs * i) / n;
      const wait = at - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      pending.push(this.#call(i));
    }
    await Promise.all(pending);
  }

  /** Active streams: open and started. */
  get open(): number {
    return this.streams.filter((s) => s.ws.readyState === WebSocket.OPEN && !s.closedEarly).length;
  }

  async #call(index: number): Promise<void> {
    const o = this.#o;
    const callSid = 'CA' + hex(16);
    const from = `+1555300${String(index).padStart(4, '0')}`;
    const params: Array<[string, string]> = [
      ['AccountSid', o.accountSid], ['ApiVersion', '2010-04-01'], ['CallSid', callSid], ['CallStatus', 'ringing'],
      ['Called', o.to], ['CalledCountry', 'US'], ['Caller', from], ['CallerCountry', 'US'], ['Direction', 'inbound'],
      ['From', from], ['FromCountry', 'US'], ['To', o.to], ['ToCountry', 'US'],
    ];
    const res = await fetch(o.webhookUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        'user-agent': 'TwilioProxy/1.1',
        'i-twilio-idempotency-token': hex(8),
        'x-twilio-signature': signTwilioRequest(o.authToken, o.webhookUrl, params),
      },
      body: new URLSearchParams(params).toString(),
    });
    const text = await res.text();
    const connect = res.status === 200 ? connectStreamOf(text) : undefined;
    if (connect === undefined) throw new Error(`stream call ${index}: the voice webhook answered ${res.status} without <Connect><Stream>: ${text.slice(0, 300)}`);
    const ws = new WebSocket(connect.url, { perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', (e) => reject(new Error(`stream call ${index}: ${connect.url}: ${e.message}`)));
    });
    const s: Stream = {
      index, callSid, streamSid: 'MZ' + hex(16), ws, startAt: 0, sent: 0, seq: 0, phase: Math.floor(Math.random() * this.#payloads.length),
      closedEarly: false, closeCode: undefined, stopped: false, buffer: [], at: [], received: 0, marksEchoed: 0, clears: 0,
    };
    ws.on('error', () => {});
    ws.on('close', (code) => {
      s.closeCode = code;
      if (!s.stopped) s.closedEarly = true;
    });
    ws.on('message', (data) => this.#onMessage(s, data.toString()));
    this.streams.push(s);
    this.#send(s, { event: 'connected', protocol: 'Call', version: '1.0.0' });
    this.#send(s, {
      event: 'start',
      sequenceNumber: String(++s.seq),
      start: {
        accountSid: o.accountSid,
        streamSid: s.streamSid,
        callSid,
        tracks: ['inbound'],
        mediaFormat: { encoding: 'audio/x-mulaw', sampleRate: 8000, channels: 1 },
        customParameters: connect.parameters,
      },
      streamSid: s.streamSid,
    });
    // Streams spread over the 20 ms (2 ms apart, as the SIP callers are).
    const now = performance.now();
    const slot = (index % 10) * 2;
    s.startAt = now + ((slot - (now % FRAME_MS) + FRAME_MS) % FRAME_MS);
    if (this.#timer === undefined) this.#loop();
  }

  #send(s: Stream, msg: object): void {
    if (s.ws.readyState === WebSocket.OPEN) s.ws.send(JSON.stringify(msg));
  }

  #onMessage(s: Stream, text: string): void {
    const now = performance.now();
    let msg: any;
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    switch (msg?.event) {
      case 'media':
        s.received++;
        s.buffer.push(true);
        if (now >= this.window.from && now <= this.window.to) s.at.push(now);
        return;
      case 'mark':
        if (typeof msg.mark?.name === 'string') s.buffer.push(msg.mark.name);
        return;
      case 'clear': {
        s.clears++;
        const marks = s.buffer.filter((e): e is string => e !== true);
        s.buffer = [];
        for (const m of marks) this.#echoMark(s, m);
        return;
      }
      default:
    }
  }

  #echoMark(s: Stream, name: string): void {
    s.marksEchoed++;
    this.#send(s, { event: 'mark', sequenceNumber: String(++s.seq), streamSid: s.streamSid, mark: { name } });
  }

  /** One frame of the carrier's playout: marks reached before and after it are echoed. */
  #play(s: Stream): void {
    while (s.buffer.length > 0 && s.buffer[0] !== true) this.#echoMark(s, s.buffer.shift() as string);
    if (s.buffer.length > 0) s.buffer.shift();
    while (s.buffer.length > 0 && s.buffer[0] !== true) this.#echoMark(s, s.buffer.shift() as string);
  }

  #loop = (): void => {
    if (this.#closed) return;
    const now = performance.now();
    let next = now + FRAME_MS;
    for (const s of this.streams) {
      if (s.stopped || s.ws.readyState !== WebSocket.OPEN) continue;
      let due = s.startAt + s.sent * FRAME_MS;
      let burst = 0;
      while (due <= now + 0.3) {
        if (now - due > 3 * FRAME_MS || burst >= 3) {
          // Stalled: skip the stale ones (chunks and timestamps go on, as after a loss).
          s.sent++;
          due += FRAME_MS;
          continue;
        }
        const chunk = s.sent + 1;
        this.#send(s, {
          event: 'media',
          sequenceNumber: String(++s.seq),
          media: { track: 'inbound', chunk: String(chunk), timestamp: String(s.sent * FRAME_MS), payload: this.#payloads[(s.phase + s.sent) % this.#payloads.length] },
          streamSid: s.streamSid,
        });
        this.#play(s);
        if (now >= this.window.from && now <= this.window.to) this.lateness.push(now - due);
        s.sent++;
        due += FRAME_MS;
        burst++;
      }
      if (due < next) next = due;
    }
    this.#timer = setTimeout(this.#loop, Math.max(0, next - performance.now()));
  };

  /** The caller hangs up on every stream: `stop`, then the socket closed 1000 (as Twilio does). */
  async stopAll(): Promise<void> {
    for (const s of this.streams) {
      if (s.ws.readyState !== WebSocket.OPEN) continue;
      this.#send(s, { event: 'stop', sequenceNumber: String(++s.seq), streamSid: s.streamSid, stop: { accountSid: this.#o.accountSid, callSid: s.callSid } });
      s.stopped = true;
    }
    await new Promise((r) => setTimeout(r, 50));
    await Promise.all(
      this.streams.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.stopped = true;
            if (s.ws.readyState === WebSocket.CLOSED) return resolve();
            s.ws.once('close', () => resolve());
            if (s.ws.readyState === WebSocket.OPEN) s.ws.close(1000);
            setTimeout(() => {
              s.ws.terminate();
              resolve();
            }, 3000).unref();
          }),
      ),
    );
  }

  /** Stops the send loop and drops every socket still open. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    for (const s of this.streams) {
      s.stopped = true;
      if (s.ws.readyState !== WebSocket.CLOSED) s.ws.terminate();
    }
  }

  /** The window's figures (see the header). Call after stopAll(). */
  analyse(placed: number): StreamFigures {
    let frames = 0;
    let offSlot = 0;
    let pauses = 0;
    let spurts = 0;
    let held = 0;
    let silent = 0;
    let closedEarly = 0;
    const late: number[] = [];
    for (const s of this.streams) {
      if (s.closedEarly) closedEarly++;
      if (s.at.length === 0) silent++;
      let streamOff = 0;
      let i = 0;
      while (i < s.at.length) {
        let j = i + 1;
        while (j < s.at.length && s.at[j]! - s.at[j - 1]! < FRAME_MS + SPURT_PAUSE_MS) j++;
        spurts++;
        let ref = Infinity;
        for (let k = i; k < j; k++) {
          const anchor = s.at[k]! - (k - i) * FRAME_MS;
          if (anchor < ref) ref = anchor;
          let l = anchor - ref;
          if (l > PAUSE_LATE_MS) {
            pauses++;
            ref = anchor;
            l = 0;
            streamOff++; // the message that ended the pause came more than a frame late
          } else if (l > ON_SLOT_MS) streamOff++;
          late.push(l);
        }
        i = j;
      }
      frames += s.at.length;
      offSlot += streamOff;
      if (!s.closedEarly && s.at.length > 0 && (s.at.length - streamOff) / s.at.length >= PACED_SHARE) held++;
    }
    const sorted = Float64Array.from(late).sort();
    const sends = Float64Array.from(this.lateness).sort();
    const q = (a: Float64Array, p: number) => (a.length === 0 ? Number.NaN : a[Math.min(a.length - 1, Math.max(0, Math.ceil(p * a.length) - 1))]!);
    return {
      placed,
      held,
      closedEarly,
      silent,
      frames,
      offSlot,
      lateP99: q(sorted, 0.99),
      pauses,
      spurts,
      marksEchoed: this.streams.reduce((n, s) => n + s.marksEchoed, 0),
      clears: this.streams.reduce((n, s) => n + s.clears, 0),
      sendLateP99: q(sends, 0.99),
      sendOnTime: sends.length ? sends.filter((x) => x <= ON_SLOT_MS).length / sends.length : 0,
    };
  }
}
