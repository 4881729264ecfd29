/**
 * What the bridge writes to this daemon's call record (the record whose id is the session id).
 * In local mode the session server already stamps the record's answer and end (it sees the
 * socket open and the session end, and it knows the transcript), so the bridge adds only what
 * only it knows: the recording, a dial that never connected, and the end of a call that ended
 * before its voice session started (the caller hung up while it rang): no session ever ends
 * that record, which would otherwise wait for the token's expiry. In upstream mode nothing here
 * sees the session, so the bridge stamps the answer and the end itself, or the phone call would
 * stay "in progress" for ever.
 */
import { failedDialEnd, type SipDetails } from '../domain/call.ts';
import type { CallEnd } from '../store/calls.ts';

/** The call repository's writes the bridge uses (CallRepo; a test may answer without a promise). */
export interface CallRecords {
  markAnswered(id: string, at: string): boolean | Promise<boolean>;
  end(id: string, e: CallEnd): boolean | Promise<boolean>;
  setRecording(id: string, path: string): boolean | Promise<boolean>;
  setSip(id: string, sip: SipDetails): boolean | Promise<boolean>;
}

/**
 * The bridge never waits for the store in the middle of a call: each method issues its write and
 * returns; a failed write is logged. One order matters: a call's end after its answer (the
 * answer only stamps a call that has not ended), so an end waits for an answer still on its way
 * (on a store with several connections they could cross). The other writes touch columns of
 * their own and go at once.
 */
export class CallRecordWriter {
  readonly #calls: CallRecords;
  readonly #stampsAnswerAndEnd: boolean;
  readonly #log: { warn(obj: object, msg: string): void } | undefined;
  /** Answers still on their way, by call. */
  readonly #answering = new Map<string, Promise<void>>();
  /** Every write still on their way (shutdown waits for them). */
  readonly #inFlight = new Set<Promise<void>>();

  /** `sessionServerRecords`: whether the session server keeps the record's answer and end itself. */
  constructor(calls: CallRecords, sessionServerRecords: boolean, log?: { warn(obj: object, msg: string): void }) {
    this.#calls = calls;
    this.#stampsAnswerAndEnd = !sessionServerRecords;
    this.#log = log;
  }

  /**
   * The call was answered; `sip`: a SIP call's Call-ID and final response (200), written whoever
   * keeps the answer, and before the end (which waits for it), so call.ended carries them.
   */
  answered(sessionId: string, sip?: SipDetails): void {
    const sipWrite = sip === undefined ? undefined : this.#write(sessionId, 'SIP details', () => this.#calls.setSip(sessionId, sip));
    if (!this.#stampsAnswerAndEnd) return;
    const at = new Date().toISOString();
    let answeredAtOnce = false;
    const done = this.#write(sessionId, 'answer', () => {
      const r = this.#calls.markAnswered(sessionId, at);
      answeredAtOnce = !(r instanceof Promise);
      return r;
    });
    // A write that answered without a promise is done: nothing for an end to wait for.
    if (answeredAtOnce && sipWrite === undefined) return;
    const both = sipWrite === undefined ? done : Promise.all([done, sipWrite]).then(() => undefined);
    this.#answering.set(sessionId, both);
    void both.then(() => {
      if (this.#answering.get(sessionId) === both) this.#answering.delete(sessionId);
    });
  }

  /**
   * The call ended for `why`; a call that was never bridged ends `failed`. In local mode only a
   * call never bridged is written, and only while its session has not started (unconnected_only):
   * once it started, the session server ends the record with the session's reason and transcript.
   * `sip`: a SIP call's Call-ID and final response, stored with the end (a bridged call's went
   * with its answer).
   */
  ended(sessionId: string, why: string, bridged: boolean, sip?: SipDetails): void {
    if (!this.#stampsAnswerAndEnd && bridged) return;
    const end: CallEnd = {
      ended_at: new Date().toISOString(),
      termination_reason: why,
      ...(sip === undefined || bridged ? {} : { sip }),
      ...(bridged ? {} : { end_status: 'failed' as const }),
      ...(this.#stampsAnswerAndEnd ? {} : { unconnected_only: true }),
    };
    void this.#end(sessionId, end);
  }

  /** Where the call's recording was written. */
  recording(sessionId: string, path: string): void {
    void this.#write(sessionId, 'recording', () => this.#calls.setRecording(sessionId, path));
  }

  /**
   * A dial that never connected (docs/calls.md: busy, no_answer, auth_failed, failed), whoever
   * keeps the record. Only a record still unanswered, whose media stream started on no node, is
   * ended (CallEnd.unconnected_only): resolves true when this write ended it.
   */
  failedDial(sessionId: string, reason: string, sipStatus?: number, sip?: SipDetails): Promise<boolean> {
    return this.#end(sessionId, { ended_at: new Date().toISOString(), ...failedDialEnd(reason, sipStatus), unconnected_only: true, ...(sip === undefined ? {} : { sip }) });
  }

  /** Resolves once every write issued so far has been made (before the store closes). */
  async settled(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
  }

  /** Resolves whether the write ended the record (false: it had ended, or the write failed). */
  #end(sessionId: string, end: CallEnd): Promise<boolean> {
    const answer = this.#answering.get(sessionId);
    let ended = false;
    const write = () =>
      this.#write(sessionId, 'end', () => {
        const r = this.#calls.end(sessionId, end);
        if (r instanceof Promise) return r.then((changed) => (ended = changed));
        return (ended = r);
      });
    const done = answer === undefined ? write() : this.#track(answer.then(write));
    return done.then(() => ended);
  }

  /** Issues the write now; the promise settles when it is done (failures are logged, never rejected). */
  #write(sessionId: string, what: string, write: () => boolean | Promise<boolean>): Promise<void> {
    let done: Promise<void>;
    try {
      done = Promise.resolve(write()).then(
        () => undefined,
        (err: unknown) => this.#failed(err, sessionId, what),
      );
    } catch (err) {
      this.#failed(err, sessionId, what);
      done = Promise.resolve();
    }
    return this.#track(done);
  }

  #track(p: Promise<void>): Promise<void> {
    this.#inFlight.add(p);
    void p.then(() => this.#inFlight.delete(p));
    return p;
  }

  #failed(err: unknown, sessionId: string, what: string): void {
    this.#log?.warn({ err, sessionId }, `storing the call record's ${what} failed`);
  }
}
