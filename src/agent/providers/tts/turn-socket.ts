/**
 * One WebSocket per agent turn, shared by the turn's sentences: the bookkeeping of the adapters
 * whose protocol continues a turn on one socket (Cartesia's context, MiniMax's task). The runtime
 * hands over one sentence per synthesize() call, all calls of a turn sharing the turn's
 * AbortSignal; TurnSockets keys the turn's open socket on that signal.
 *
 * A TurnSocket carries what those protocols need around their own messages: the stall timer
 * while a sentence waits on the vendor, the end of the turn at the vendor after idleCloseMs
 * without a sentence (MiniMax's docs do not say how long it keeps an idle task; Cartesia's
 * context expires sooner, which its adapter follows on the open socket), barge-in, and
 * the break (error message, drop, silence): the sentence being spoken fails, those queued behind
 * it had no audio yet and move, once, to a new socket of the same turn (failHead).
 */
import WebSocket from 'ws';
import { TtsError } from '../../errors.ts';
import { AudioChannel, failHead, type QueuedSentence } from './audio-channel.ts';
import { stallError, StallTimer } from './stall-timer.ts';
import type { TurnSocketSettings } from './vendor-options.ts';
import { refusalError } from './vendor-url.ts';

/** What ties a new socket to its turn. */
export interface TurnLink {
  signal: AbortSignal;
  /** Takes the sentences queued behind a failed one, to speak them on a new socket. */
  onOrphans(sentences: QueuedSentence[]): void;
}

/** The open socket of each turn, keyed by the turn's signal (a closed one is replaced by the next sentence). */
export class TurnSockets<Socket extends TurnSocket<object>> {
  readonly #open = new WeakMap<AbortSignal, Socket>();

  /**
   * Speaks `text` as the next sentence of the turn of `signal`, on the turn's open socket or a
   * new one from `connect` (which the sentences orphaned by a break reuse), and yields its audio.
   */
  async *speak(text: string, signal: AbortSignal, connect: (turn: TurnLink) => Socket): AsyncGenerator<Int16Array> {
    const sentence: QueuedSentence = { text, channel: new AudioChannel(), moved: false };
    this.#socketFor(signal, connect).speak(sentence);
    yield* sentence.channel.drain(signal);
  }

  #socketFor(signal: AbortSignal, connect: (turn: TurnLink) => Socket): Socket {
    const open = this.#open.get(signal);
    if (open !== undefined && !open.closed) return open;
    const socket = connect({
      signal,
      onOrphans: (orphans) => {
        if (signal.aborted) return;
        const next = this.#socketFor(signal, connect);
        for (const s of orphans) next.speak(s);
      },
    });
    this.#open.set(signal, socket);
    return socket;
  }
}

/**
 * One turn's socket and its sentences still being spoken, oldest first. A vendor's subclass
 * sends them (send), reads the server's JSON messages (onMessage) and says how the turn ends at
 * the vendor when idle (sendEnd) or cut (cancel).
 */
export abstract class TurnSocket<Message extends object> {
  closed = false;
  protected readonly name: string;
  protected readonly ws: WebSocket;
  /** [0] is the sentence being spoken (or the next to be); the others wait behind it. */
  protected readonly sentences: QueuedSentence[] = [];
  protected readonly stall: StallTimer;
  readonly #idleCloseMs: number;
  readonly #turn: TurnLink;
  #idleTimer: NodeJS.Timeout | undefined;

  constructor(vendor: TurnSocketSettings, headers: Record<string, string>, turn: TurnLink) {
    this.name = vendor.name;
    this.#turn = turn;
    this.#idleCloseMs = vendor.idleCloseMs;
    this.stall = new StallTimer(vendor.stallMs, () => this.fail(stallError(vendor.name, vendor.stallMs)));
    this.ws = new WebSocket(vendor.url, { headers });
    turn.signal.addEventListener('abort', this.#onAbort, { once: true });
    this.ws.on('unexpected-response', (_req, res) => {
      res.resume(); // the refusal's body is not needed (it may quote the key); release the socket
      this.fail(refusalError(this.name, 'upgrade', res.statusCode ?? 0));
    });
    this.ws.on('message', (data, isBinary) => this.#onFrame(data, isBinary));
    this.ws.on('error', (err) => this.fail(new TtsError('VENDOR_UNREACHABLE', `${this.name}: socket error`, { cause: err })));
    this.ws.on('close', (code) => this.fail(new TtsError('VENDOR_UNREACHABLE', `${this.name}: socket closed (${code}) mid-sentence`)));
  }

  /** Queues one sentence of the turn and hands it to the protocol (send). */
  speak(sentence: QueuedSentence): void {
    clearTimeout(this.#idleTimer);
    this.sentences.push(sentence);
    this.stall.touch();
    this.send(sentence);
  }

  /** Sends the sentence just queued, now or when the protocol allows. */
  protected abstract send(sentence: QueuedSentence): void;

  /** One server message (a JSON object) while the socket is open. */
  protected abstract onMessage(msg: Message): void;

  /** Tells the vendor the idle turn is over; the socket is closed right after. */
  protected abstract sendEnd(): void;

  /** Barge-in: stops the vendor's generation where the protocol can; closing the socket follows. */
  protected cancel(): void {
    // nothing by default: the close that follows is the protocol's only stop
  }

  #onFrame(data: WebSocket.RawData, isBinary: boolean): void {
    if (this.closed) return;
    let msg: Message;
    try {
      if (isBinary) throw new Error('binary frame');
      msg = JSON.parse(data.toString()) as Message;
      if (typeof msg !== 'object' || msg === null) throw new Error('not an object');
    } catch (err) {
      this.fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: malformed server message`, { cause: err }));
      return;
    }
    this.onMessage(msg);
  }

  /** Nothing left to speak: ends the turn at the vendor after idleCloseMs unless a sentence comes. */
  protected armIdle(): void {
    clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => {
      if (this.closed || this.sentences.length > 0) return;
      this.sendEnd();
      this.close(false);
    }, this.#idleCloseMs);
    this.#idleTimer.unref();
  }

  /** The sentence being spoken fails with `err`, those behind it move; the turn's socket is done. */
  protected fail(err: TtsError): void {
    if (this.closed) return;
    const orphans = failHead(this.sentences.splice(0), err);
    this.close(true);
    if (orphans.length > 0) this.#turn.onOrphans(orphans);
  }

  readonly #onAbort = (): void => {
    if (this.closed) return;
    this.cancel();
    for (const s of this.sentences.splice(0)) s.channel.end();
    this.close(false);
  };

  protected close(broken: boolean): void {
    this.closed = true;
    clearTimeout(this.#idleTimer);
    this.stall.stop();
    this.#turn.signal.removeEventListener('abort', this.#onAbort);
    if (broken || this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
    else if (this.ws.readyState === WebSocket.OPEN) this.ws.close(1000);
  }
}
