/**
 * A client of the voice WebSocket protocol for end-to-end tests: opens /v1/connection with a
 * session token, records every server event with its arrival time, waits for events, and
 * streams PCM16 24 kHz audio as `input_audio` in 20 ms frames at real-time pace (as a phone or a
 * browser would).
 */
import WebSocket from 'ws';

export interface ReceivedEvent {
  type: string;
  data: any;
  /** performance.now() at arrival. */
  at: number;
}

export class VoiceClient {
  readonly events: ReceivedEvent[] = [];
  closeCode: number | undefined;
  closeReason = '';
  readonly #ws: WebSocket;
  readonly #waiters = new Set<() => void>();
  readonly #micQueue: Int16Array[] = [];
  #micDone: Array<() => void> = [];
  #micTimer: unknown;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on('message', (raw) => {
      const msg = JSON.parse(raw.toString()) as { type: string; data: unknown };
      this.events.push({ type: msg.type, data: msg.data, at: performance.now() });
      for (const w of this.#waiters) w();
    });
    ws.on('close', (code, reason) => {
      this.stopMic();
      this.closeCode = code;
      this.closeReason = reason.toString();
      for (const w of this.#waiters) w();
    });
  }

  static async connect(baseUrl: string, token: string): Promise<VoiceClient> {
    const ws = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/connection?token=${encodeURIComponent(token)}`);
    const client = new VoiceClient(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    });
    return client;
  }

  get open(): boolean {
    return this.#ws.readyState === WebSocket.OPEN;
  }

  types(): string[] {
    return this.events.map((e) => e.type);
  }

  of(type: string): ReceivedEvent[] {
    return this.events.filter((e) => e.type === type);
  }

  /** Resolves with the first event (from index `from`) matching, or rejects after `ms`. */
  waitFor(pred: (e: ReceivedEvent) => boolean, ms = 10_000, from = 0): Promise<ReceivedEvent> {
    return this.#until(() => this.events.slice(from).find(pred), ms, 'an event matching the predicate');
  }

  waitForType(type: string, ms = 10_000, from = 0): Promise<ReceivedEvent> {
    return this.#until(() => this.events.slice(from).find((e) => e.type === type), ms, `a ${type} event`);
  }

  waitClosed(ms = 10_000): Promise<number> {
    return this.#until(() => this.closeCode, ms, 'the socket to close');
  }

  #until<T>(probe: () => T | undefined, ms: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const check = () => {
        const v = probe();
        if (v !== undefined) {
          clearTimeout(timer);
          this.#waiters.delete(check);
          resolve(v);
        }
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out after ${ms} ms waiting for ${what}; got: ${this.types().join(', ')}`));
      }, ms);
      this.#waiters.add(check);
      check();
    });
  }

  send(obj: unknown): void {
    this.#ws.send(JSON.stringify(obj));
  }

  sendRaw(data: string | Buffer): void {
    this.#ws.send(data);
  }

  /**
   * Starts the microphone: from now on a 20 ms frame goes out every 20 ms (drift-free), as from a
   * phone or a browser: what `stream()` queued, else quiet line noise (about -66 dBFS). Real
   * clients never stop sending, and the VAD learns the line's noise floor from it.
   */
  startMic(): void {
    if (this.#micTimer !== undefined) return;
    const start = performance.now();
    let n = 0;
    const tick = () => {
      if (!this.open) return;
      const behind = Math.floor((performance.now() - start) / 20) - n;
      for (let k = 0; k <= behind; k++, n++) this.#sendFrame();
      this.#micTimer = setTimeout(tick, Math.max(0, start + n * 20 - performance.now()));
    };
    tick();
  }

  #sendFrame(): void {
    let frame = this.#micQueue.shift();
    if (frame === undefined) {
      frame = new Int16Array(480);
      for (let i = 0; i < 480; i++) frame[i] = Math.round((Math.random() - 0.5) * 32);
    }
    if (this.#micQueue.length === 0) {
      const done = this.#micDone;
      this.#micDone = [];
      for (const d of done) d();
    }
    this.send({ type: 'input_audio', data: { audio: Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength).toString('base64') } });
  }

  /** Queues audio on the microphone (started if needed); resolves once all of it has been sent. */
  stream(pcm: Int16Array): Promise<void> {
    this.startMic();
    for (let i = 0; i < pcm.length; i += 480) {
      const f = new Int16Array(480);
      f.set(pcm.subarray(i, Math.min(i + 480, pcm.length)));
      this.#micQueue.push(f);
    }
    return new Promise<void>((resolve) => this.#micDone.push(resolve));
  }

  stopMic(): void {
    clearTimeout(this.#micTimer as NodeJS.Timeout);
    this.#micTimer = undefined;
  }

  close(code = 1000): void {
    this.stopMic();
    this.#ws.close(code);
  }
}

/** `secs` of digital silence at 24 kHz. */
export function silence(secs: number): Int16Array {
  return new Int16Array(Math.round(secs * 24_000));
}

/**
 * A speech-like signal: a 150 Hz voice with harmonics, syllables at 4 Hz (amplitude envelope),
 * at about -16 dBFS: loud and voiced enough for any energy VAD, like a caller talking.
 */
export function speechLike(secs: number, seed = 1): Int16Array {
  const n = Math.round(secs * 24_000);
  const out = new Int16Array(n);
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  for (let i = 0; i < n; i++) {
    const t = i / 24_000;
    const f0 = 150 + 20 * Math.sin(2 * Math.PI * 0.7 * t);
    let v = 0;
    for (let h = 1; h <= 6; h++) v += Math.sin(2 * Math.PI * f0 * h * t) / h;
    const env = 0.55 + 0.45 * Math.sin(2 * Math.PI * 4 * t);
    out[i] = Math.round((v * 0.3 * env + (rand() - 0.5) * 0.01) * 32767 * 0.5);
  }
  return out;
}

/** RMS of PCM16 in dBFS (-Infinity for digital silence). */
export function rmsDb(pcm: Int16Array): number {
  let sum = 0;
  for (const x of pcm) sum += x * x;
  return 10 * Math.log10(sum / Math.max(1, pcm.length) / (32768 * 32768));
}

/** The samples of every response_audio of a turn, concatenated. */
export function turnAudio(events: ReceivedEvent[], turnId: string): Int16Array {
  const parts = events.filter((e) => e.type === 'response_audio' && e.data.turn_id === turnId).map((e) => Buffer.from(e.data.audio as string, 'base64'));
  const buf = Buffer.concat(parts);
  return new Int16Array(buf.buffer, buf.byteOffset, buf.byteLength / 2);
}
