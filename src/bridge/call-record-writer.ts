/**
 * What the bridge writes to this daemon's call record (the record whose id is the session id).
 * In local mode the session server already stamps the record's answer and end (it sees the
 * socket open and the session end, and it knows the transcript), so the bridge adds only what
 * only it knows: the recording, a dial that never connected. In upstream mode nothing here sees
 * the session, so the bridge stamps the answer and the end itself, or the phone call would stay
 * "in progress" for ever.
 */
import { failedDialEnd } from '../domain/call.ts';
import type { CallRepo } from '../store/calls.ts';

export type CallRecords = Pick<CallRepo, 'markAnswered' | 'end' | 'setRecording'>;

export class CallRecordWriter {
  readonly #calls: CallRecords;
  readonly #stampsAnswerAndEnd: boolean;

  /** `sessionServerRecords`: whether the session server keeps the record's answer and end itself. */
  constructor(calls: CallRecords, sessionServerRecords: boolean) {
    this.#calls = calls;
    this.#stampsAnswerAndEnd = !sessionServerRecords;
  }

  answered(sessionId: string): void {
    if (this.#stampsAnswerAndEnd) this.#calls.markAnswered(sessionId, new Date().toISOString());
  }

  /** The call ended for `why`; a call that was never bridged ends `failed`. */
  ended(sessionId: string, why: string, bridged: boolean): void {
    if (!this.#stampsAnswerAndEnd) return;
    this.#calls.end(sessionId, { ended_at: new Date().toISOString(), termination_reason: why, ...(bridged ? {} : { end_status: 'failed' }) });
  }

  /** Where the call's recording was written. */
  recording(sessionId: string, path: string): void {
    this.#calls.setRecording(sessionId, path);
  }

  /** A dial that never connected (docs/calls.md: busy, no_answer, auth_failed, failed), whoever keeps the record. */
  failedDial(sessionId: string, reason: string, sipStatus?: number): void {
    this.#calls.end(sessionId, { ended_at: new Date().toISOString(), ...failedDialEnd(reason, sipStatus) });
  }
}
