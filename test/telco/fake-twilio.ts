/**
 * A fake of the carrier's programmable-voice side (Twilio), speaking its documented wire formats
 * over real loopback sockets, for callbridge's inbound carrier path:
 *
 *   the voice webhook   POST, application/x-www-form-urlencoded (AccountSid, CallSid, From, To,
 *                       CallStatus, Direction, ...), X-Twilio-Signature = base64 HMAC-SHA1 with the
 *                       auth token over the URL followed by the POST parameters sorted by name,
 *                       each name followed by its value ("Webhooks security")
 *   the TwiML answer    parsed for <Connect><Stream url> and its <Parameter name value/>s, or <Reject>
 *   the media stream    a WebSocket client: connected, start (accountSid, streamSid, callSid,
 *                       tracks, mediaFormat audio/x-mulaw 8000 Hz mono, customParameters), then one
 *                       media message per 20 ms of real time (base64 mu-law, 160 bytes, track
 *                       inbound, chunk from 1, timestamp in ms), dtmf, stop; it receives media,
 *                       mark and clear ("Media Streams - WebSocket Messages")
 *
 * Like the carrier it plays what it receives from a buffer at 20 ms per frame, echoes each mark
 * once the audio sent before it has been played, and on `clear` empties the buffer and echoes
 * the marks that were still in it. G.711 and the signature are computed here independently of
 * callbridge's code (alawmulaw, node:crypto), so the fake is an oracle, not a mirror.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import alawmulaw from 'alawmulaw';
import WebSocket from 'ws';

const { mulaw } = alawmulaw;
const FRAME_SAMPLES = 160;
const FRAME_MS = 20;

export const sid = (prefix: string) => prefix + randomBytes(16).toString('hex');

/** Twilio's request signature, as its documentation describes it. */
export function twilioSign(authToken: string, url: string, params: Record<string, string>): string {
  const data = Object.keys(params)
    .sort()
    .reduce((acc, k) => acc + k + params[k], url);
  return createHmac('sha1', authToken).update(Buffer.from(data, 'utf-8')).digest('base64');
}

export interface WebhookResult {
  status: number;
  contentType: string;
  text: string;
  /** <Connect><Stream url> and its parameters, when the answer is one. */
  stream?: { url: string; parameters: Record<string, string> };
  /** <Reject reason>, when the answer is one. */
  reject?: string;
  /** The answer's X-Request-ID header, when it has one (a balancer's, or the daemon's request id). */
  requestId?: string;
}

const unescapeXml = (s: string) => s.replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
const attr = (tag: string, name: string) => {
  const m = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  return m ? unescapeXml(m[1]!) : undefined;
};

/** The parameters Twilio posts to a number's voice URL for an incoming call. */
export function incomingCallParams(o: { accountSid: string; callSid: string; from: string; to: string }): Record<string, string> {
  return {
    AccountSid: o.accountSid,
    ApiVersion: '2010-04-01',
    CallSid: o.callSid,
    CallStatus: 'ringing',
    Called: o.to,
    CalledCountry: 'US',
    Caller: o.from,
    CallerCountry: 'US',
    Direction: 'inbound',
    From: o.from,
    FromCountry: 'US',
    To: o.to,
    ToCountry: 'US',
  };
}

/** The <Connect><Stream url> of a TwiML document and its <Parameter>s, or undefined. */
export function parseConnectStream(text: string): { url: string; parameters: Record<string, string> } | undefined {
  const stream = /<Connect>\s*<Stream\b([^>]*)>([\s\S]*?)<\/Stream>\s*<\/Connect>/.exec(text);
  if (!stream) return undefined;
  const parameters: Record<string, string> = {};
  for (const p of stream[2]!.matchAll(/<Parameter\b([^>]*)\/>/g)) parameters[attr(p[1]!, 'name')!] = attr(p[1]!, 'value')!;
  return { url: attr(stream[1]!, 'url')!, parameters };
}

/** The number of a TwiML `<Dial>number</Dial>`, or undefined. */
export function parseDial(text: string): string | undefined {
  const m = /<Dial\b[^>]*>\s*([^<]+?)\s*<\/Dial>/.exec(text);
  return m ? unescapeXml(m[1]!) : undefined;
}

/** POSTs the voice webhook as Twilio does; `signature` overrides the computed one (null: none). */
export async function postVoiceWebhook(url: string, params: Record<string, string>, authToken: string, signature?: string | null, signedUrl = url): Promise<WebhookResult> {
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'TwilioProxy/1.1', 'i-twilio-idempotency-token': randomBytes(8).toString('hex') };
  const sig = signature === undefined ? twilioSign(authToken, signedUrl, params) : signature;
  if (sig !== null) headers['x-twilio-signature'] = sig;
  const res = await fetch(url, { method: 'POST', headers, body: new URLSearchParams(params).toString() });
  const text = await res.text();
  const out: WebhookResult = { status: res.status, contentType: res.headers.get('content-type') ?? '', text };
  const requestId = res.headers.get('x-request-id');
  if (requestId !== null) out.requestId = requestId;
  const stream = /<Connect>\s*<Stream\b([^>]*)>([\s\S]*?)<\/Stream>\s*<\/Connect>/.exec(text);
  if (stream) {
    const parameters: Record<string, string> = {};
    for (const p of stream[2]!.matchAll(/<Parameter\b([^>]*)\/>/g)) parameters[attr(p[1]!, 'name')!] = attr(p[1]!, 'value')!;
    out.stream = { url: attr(stream[1]!, 'url')!, parameters };
  }
  const reject = /<Reject\b([^>]*)\/?>/.exec(text);
  if (reject) out.reject = attr(reject[1]!, 'reason') ?? 'rejected';
  return out;
}

export interface ReceivedFrame {
  /** performance.now() at arrival. */
  at: number;
  pcm: Int16Array;
  bytes: number;
}

/** One media stream, as Twilio's side of a call. */
export class FakeStream {
  readonly ws: WebSocket;
  readonly streamSid = sid('MZ');
  /** Every message callbridge sent, in order, with its arrival time. */
  readonly received: Array<{ at: number; msg: any }> = [];
  /** Agent audio as received (media messages). */
  readonly frames: ReceivedFrame[] = [];
  /** Marks echoed back, and whether they were played or dropped by a clear. */
  readonly echoed: Array<{ name: string; played: boolean }> = [];
  readonly clears: number[] = [];
  closeCode: number | undefined;
  closeReason = '';
  readonly closed: Promise<void>;
  /** The X-Request-ID of the 101 answer that opened the socket, when it had one (a balancer's). */
  requestId: string | undefined;
  /** What callbridge sent, in Twilio's playout buffer: frames and marks in order. */
  #buffer: Array<{ frame: true } | { mark: string }> = [];
  #caller: Int16Array[] = [];
  #chunk = 0;
  #t0 = 0;
  #timer: NodeJS.Timeout | undefined;
  #next = 0;
  #seq = 0;

  private constructor(ws: WebSocket) {
    this.ws = ws;
    this.closed = new Promise((resolve) => ws.on('close', (code, reason) => {
      this.closeCode = code;
      this.closeReason = reason.toString();
      this.#stopClock();
      resolve();
    }));
    ws.on('message', (data) => this.#onMessage(JSON.parse(data.toString())));
  }

  /** Opens the stream's socket (as Twilio does once it runs <Connect><Stream>). */
  static async open(url: string): Promise<FakeStream> {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    const s = new FakeStream(ws);
    ws.once('upgrade', (res) => {
      const id = res.headers['x-request-id'];
      s.requestId = typeof id === 'string' ? id : undefined;
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return s;
  }

  send(msg: object): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  /** `connected` then `start`; then caller media every 20 ms (silence until say()). */
  start(o: { accountSid: string; callSid: string; customParameters: Record<string, string>; mediaFormat?: object }): void {
    this.send({ event: 'connected', protocol: 'Call', version: '1.0.0' });
    this.send({
      event: 'start',
      sequenceNumber: String(++this.#seq),
      start: {
        accountSid: o.accountSid,
        streamSid: this.streamSid,
        callSid: o.callSid,
        tracks: ['inbound'],
        mediaFormat: o.mediaFormat ?? { encoding: 'audio/x-mulaw', sampleRate: 8000, channels: 1 },
        customParameters: o.customParameters,
      },
      streamSid: this.streamSid,
    });
    this.#t0 = performance.now();
    this.#next = this.#t0;
    this.#tick();
  }

  /** Queues caller speech (8 kHz PCM), sent in 20 ms media messages at real-time pace. */
  say(pcm8k: Int16Array): void {
    for (let i = 0; i < pcm8k.length; i += FRAME_SAMPLES) {
      const f = new Int16Array(FRAME_SAMPLES);
      f.set(pcm8k.subarray(i, Math.min(pcm8k.length, i + FRAME_SAMPLES)));
      this.#caller.push(f);
    }
  }

  /** Resolves when every queued caller frame has been sent. */
  async said(): Promise<void> {
    while (this.#caller.length > 0) await new Promise((r) => setTimeout(r, 20));
  }

  dtmf(digit: string): void {
    this.send({ event: 'dtmf', streamSid: this.streamSid, sequenceNumber: String(++this.#seq), dtmf: { track: 'inbound_track', digit } });
  }

  /** The caller hung up: `stop`, then Twilio closes the socket. */
  stop(accountSid: string, callSid: string): void {
    this.send({ event: 'stop', sequenceNumber: String(++this.#seq), streamSid: this.streamSid, stop: { accountSid, callSid } });
    this.#stopClock();
    setTimeout(() => this.ws.close(1000), 50);
  }

  /** The carrier goes quiet without closing its socket (a network partition): no media, no marks. */
  goQuiet(): void {
    this.#stopClock();
  }

  close(): void {
    this.#stopClock();
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
  }

  async waitFor(check: () => boolean, ms: number, what: string): Promise<void> {
    const end = Date.now() + ms;
    while (!check()) {
      if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** One 20 ms step of the call: a caller frame out, one buffered frame (or mark) played. */
  #tick(): void {
    const now = performance.now();
    // Absolute deadlines: no drift; after a stall, catch up at most a few frames.
    let n = 0;
    while (this.#next <= now && n++ < 3) {
      this.#sendCallerFrame();
      this.#play();
      this.#next += FRAME_MS;
    }
    if (this.#next <= now) this.#next = now + FRAME_MS;
    this.#timer = setTimeout(() => this.#tick(), Math.max(1, this.#next - performance.now()));
  }

  #stopClock(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #sendCallerFrame(): void {
    const pcm = this.#caller.shift() ?? new Int16Array(FRAME_SAMPLES);
    const chunk = ++this.#chunk;
    this.send({
      event: 'media',
      sequenceNumber: String(++this.#seq),
      media: { track: 'inbound', chunk: String(chunk), timestamp: String((chunk - 1) * FRAME_MS), payload: Buffer.from(mulaw.encode(pcm)).toString('base64') },
      streamSid: this.streamSid,
    });
  }

  /** Plays one frame from the buffer; marks reached on the way are echoed as played. */
  #play(): void {
    while (this.#buffer.length > 0 && 'mark' in this.#buffer[0]!) this.#echoMark((this.#buffer.shift() as { mark: string }).mark, true);
    if (this.#buffer.length > 0) this.#buffer.shift();
    while (this.#buffer.length > 0 && 'mark' in this.#buffer[0]!) this.#echoMark((this.#buffer.shift() as { mark: string }).mark, true);
  }

  #echoMark(name: string, played: boolean): void {
    this.echoed.push({ name, played });
    this.send({ event: 'mark', sequenceNumber: String(++this.#seq), streamSid: this.streamSid, mark: { name } });
  }

  #onMessage(msg: any): void {
    const at = performance.now();
    this.received.push({ at, msg });
    if (msg.streamSid !== this.streamSid) throw new Error(`message for another stream: ${JSON.stringify(msg).slice(0, 200)}`);
    switch (msg.event) {
      case 'media': {
        const bytes = Buffer.from(msg.media.payload, 'base64');
        this.frames.push({ at, pcm: mulaw.decode(new Uint8Array(bytes)), bytes: bytes.length });
        this.#buffer.push({ frame: true });
        return;
      }
      case 'mark':
        this.#buffer.push({ mark: msg.mark.name });
        return;
      case 'clear': {
        this.clears.push(at);
        const marks = this.#buffer.filter((e): e is { mark: string } => 'mark' in e);
        this.#buffer = [];
        for (const m of marks) this.#echoMark(m.mark, false);
        return;
      }
      default:
        throw new Error(`unexpected message from callbridge: ${JSON.stringify(msg).slice(0, 200)}`);
    }
  }
}

/** RMS level in dBFS (a full-scale sine reads -3). */
export function levelDbfs(pcm: Int16Array): number {
  if (pcm.length === 0) return -Infinity;
  let sum = 0;
  for (const x of pcm) sum += x * x;
  return 10 * Math.log10(sum / pcm.length / (32768 * 32768));
}
