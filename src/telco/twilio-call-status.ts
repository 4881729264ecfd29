/**
 * The carrier's call status callbacks (Twilio: POST, form-encoded, signed like the voice webhook
 * with X-Twilio-Signature): `CallSid`, `AccountSid`, `CallStatus` (queued, initiated, ringing,
 * in-progress, completed, busy, no-answer, failed, canceled), `CallDuration` on the last one,
 * `SipResponseCode` when the carrier has one. Outbound calls get them from the StatusCallback of
 * the Calls.json request (with our call id in the URL's query), imported numbers from their
 * StatusCallback (inbound calls).
 *
 * The signature is checked first, against the auth token of any import under the request's
 * `AccountSid` (403 otherwise); the bridge then applies the status only to a call of that same
 * account, so one account's signed callbacks never reach another account's calls.
 */
import { clipForLog } from '../log-fields.ts';
import type { Refusal } from './twilio-voice-webhook.ts';
import { validTwilioSignature } from './twilio-signature.ts';

/** What a status means for a call of ours. */
export type CarrierCallProgress =
  | { kind: 'progress'; status: 'queued' | 'initiated' | 'ringing' }
  | { kind: 'answered' }
  /** The call is over: `dial` is the failed-dial reason of a call never answered (docs/calls.md). */
  | { kind: 'ended'; status: 'completed' | 'busy' | 'no-answer' | 'failed' | 'canceled'; dial: 'busy' | 'no_answer' | 'failed' | 'cancelled' | 'completed' };

/** A verified status callback. */
export interface CarrierCallStatus {
  accountSid: string;
  callSid: string;
  /** Our call id (the `call` query parameter of an outbound call's StatusCallback), when present. */
  callId: string | undefined;
  progress: CarrierCallProgress;
  /** Seconds, on the final callback of an answered call. */
  durationSecs: number | undefined;
  sipResponseCode: number | undefined;
}

/** Maps the carrier's CallStatus; undefined for a value it does not document. */
export function callProgress(status: string): CarrierCallProgress | undefined {
  switch (status) {
    case 'queued':
    case 'initiated':
    case 'ringing':
      return { kind: 'progress', status };
    case 'in-progress':
      return { kind: 'answered' };
    case 'completed':
      return { kind: 'ended', status, dial: 'completed' };
    case 'busy':
      return { kind: 'ended', status, dial: 'busy' };
    case 'no-answer':
      return { kind: 'ended', status, dial: 'no_answer' };
    case 'failed':
      return { kind: 'ended', status, dial: 'failed' };
    case 'canceled':
      return { kind: 'ended', status, dial: 'cancelled' };
    default:
      return undefined;
  }
}

export interface StatusCallbackRequest {
  /** The URL the carrier requested (public base + path + query), as it signed it. */
  url: string;
  params: ReadonlyArray<readonly [string, string]>;
  signature: string | undefined;
}

export type StatusCallbackAnswer = { status: 403; error: string; refusal: Refusal } | { status: 400; error: string } | { status: 204; update: CarrierCallStatus };

/** Checks and reads one status callback. */
export async function readStatusCallback(
  tokensOfAccount: (accountSid: string) => string[] | Promise<string[]>,
  req: StatusCallbackRequest,
): Promise<StatusCallbackAnswer> {
  const p = new Map(req.params);
  const accountSid = p.get('AccountSid') ?? '';
  const callSid = p.get('CallSid') ?? '';
  const tokens = accountSid === '' ? [] : [...new Set(await tokensOfAccount(accountSid))];
  if (!tokens.some((t) => validTwilioSignature(t, req.url, req.params, req.signature))) {
    return {
      status: 403,
      error: 'X-Twilio-Signature does not verify for this URL and account',
      refusal: {
        fields: { url: clipForLog(req.url, 256), callSid: clipForLog(callSid), accountSid: clipForLog(accountSid), signature: req.signature === undefined ? 'missing' : 'present' },
        message: 'call status callback refused (403): the X-Twilio-Signature does not verify with the auth token of any import of that account',
      },
    };
  }
  const progress = callProgress(p.get('CallStatus') ?? '');
  if (callSid === '' || progress === undefined) return { status: 400, error: 'CallSid and a documented CallStatus are required' };
  const callId = new URL(req.url).searchParams.get('call') ?? undefined;
  const int = (v: string | undefined) => (v !== undefined && /^\d{1,9}$/.test(v) ? Number(v) : undefined);
  return { status: 204, update: { accountSid, callSid, callId, progress, durationSecs: int(p.get('CallDuration')), sipResponseCode: int(p.get('SipResponseCode')) } };
}
