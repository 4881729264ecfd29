/**
 * REST client of the carrier, speaking the Twilio-style 2010-04-01 API. Import uses one call:
 *
 *   GET {api_base_url}/2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers.json?PhoneNumber=%2B1...
 *   Authorization: Basic base64(AccountSid ":" AuthToken)
 *
 *   200 { "incoming_phone_numbers": [ { "sid": "PN...", "phone_number": "+1...", ... } ], ... }
 *
 * A number listed there proves both that the credentials are good and that the account owns
 * the number. Failures become DomainErrors the API maps to statuses; no message, cause or log
 * line carries the auth token (it only ever travels in the Authorization header).
 */
import type { Config } from '../config.ts';
import { badGateway, unavailable, validation } from '../domain/errors.ts';
import type { NumberWebhook } from '../store/telco-numbers.ts';

export interface CarrierNumber {
  phone_sid: string;
  phone_number: string;
}

export interface CarrierClient {
  /**
   * Finds an E.164 number among the account's incoming numbers.
   * @throws DomainError validation (credentials rejected, or the number is not in the account),
   *   bad_gateway (carrier down, slow or answering nonsense), unavailable (no carrier configured).
   */
  lookupNumber(accountSid: string, authToken: string, phoneNumber: string): Promise<CarrierNumber>;
  /**
   * Points a number's voice webhook at `voiceUrl` (VoiceUrl, VoiceMethod POST); no other field of
   * the number is touched. @throws DomainError as lookupNumber does.
   */
  setVoiceUrl(accountSid: string, authToken: string, phoneSid: string, voiceUrl: string, statusCallbackUrl?: string): Promise<void>;
  /**
   * Places an outbound call (POST Calls.json). Resolves with the carrier's CallSid and status.
   * @throws DomainError validation (the carrier refused the call's parameters: 400 with its
   *   message and code), bad_gateway (credentials refused, carrier down, slow or answering
   *   nonsense), unavailable (no carrier configured).
   */
  createCall(accountSid: string, authToken: string, call: NewCarrierCall): Promise<{ sid: string; status: string }>;
  /**
   * Updates a live call (POST Calls/{CallSid}.json): `Status=completed` hangs it up, `Twiml=...`
   * replaces what it runs (a transfer's <Dial>). @throws DomainError bad_gateway / unavailable.
   */
  updateCall(accountSid: string, authToken: string, callSid: string, fields: { Status: 'completed' | 'canceled' } | { Twiml: string }): Promise<void>;
  /**
   * The number's voice webhook fields as the carrier has them now (GET IncomingPhoneNumbers/{sid}.json;
   * a field the carrier leaves out or nulls is ''). @throws DomainError as lookupNumber does.
   */
  getNumberWebhook(accountSid: string, authToken: string, phoneSid: string): Promise<NumberWebhook>;
  /**
   * Writes the four webhook fields exactly as given ('' clears a field at the carrier): how delete
   * gives a number back the webhook it had before import. @throws DomainError as setVoiceUrl does.
   */
  writeNumberWebhook(accountSid: string, authToken: string, phoneSid: string, webhook: NumberWebhook): Promise<void>;
}

/** The voice webhook fields of an IncomingPhoneNumber (defined by the store, which keeps them). */
export type { NumberWebhook } from '../store/telco-numbers.ts';

/** What callbridge asks of the carrier for an outbound call (the Calls resource's parameters). */
export interface NewCarrierCall {
  to: string;
  from: string;
  /** The call's instructions once answered (the connect-stream TwiML). */
  twiml: string;
  /** Where the carrier POSTs the call's progress (initiated, ringing, answered, completed). */
  statusCallback: string;
  /** Seconds the call may ring before the carrier gives up (no-answer). */
  timeoutSecs: number;
}

/** Stable codes of carrier failures, for callers that branch on them rather than on text. */
export const CARRIER_ERROR = {
  credentials: 'TELCO_CREDENTIALS_REJECTED',
  notInAccount: 'TELCO_NUMBER_NOT_IN_ACCOUNT',
  failed: 'TELCO_CARRIER_FAILED',
  notConfigured: 'TELCO_NOT_CONFIGURED',
  /** The carrier refused an outbound call's parameters (an invalid To, a From it does not own). */
  callRefused: 'TELCO_CALL_REFUSED',
} as const;

const credentialsRejected = () => validation('carrier rejected account_sid/auth_token', CARRIER_ERROR.credentials);
// A business-rule failure of the request, so 400 as the service's document has it (not 404: the
// resource addressed by the path exists; the number named in the body is what is wrong).
const notInAccount = () => validation('phone_number is not a number of that carrier account', CARRIER_ERROR.notInAccount);
const failed = (detail: string, cause?: unknown) => badGateway(`carrier API failed: ${detail}`, CARRIER_ERROR.failed, cause);

export function createCarrierClient(config: Config): CarrierClient {
  const base = config.telco.api_base_url.replace(/\/+$/, '');
  const timeoutMs = config.telco.timeout_ms;

  return {
    async lookupNumber(accountSid, authToken, phoneNumber) {
      if (!base) throw unavailable('carrier API is not configured (telco.api_base_url)', CARRIER_ERROR.notConfigured);
      // Appended to the base, not resolved against it, so a base with a path prefix keeps it.
      const url = new URL(`${base}/2010-04-01/Accounts/${encodeURIComponent(accountSid)}/IncomingPhoneNumbers.json`);
      url.searchParams.set('PhoneNumber', phoneNumber);
      const signal = AbortSignal.timeout(timeoutMs);

      let res: Response;
      try {
        res = await fetch(url, {
          headers: { authorization: basicAuth(accountSid, authToken), accept: 'application/json' },
          // A redirect would take the credentials somewhere nobody configured.
          redirect: 'error',
          signal,
        });
      } catch (err) {
        throw failed(describeFetchError(err, timeoutMs), err);
      }

      if (!res.ok) {
        // Free the connection; the carrier's error body adds nothing the status does not say.
        await res.body?.cancel().catch(() => {});
        if (res.status === 401 || res.status === 403) throw credentialsRejected();
        if (res.status === 404) throw notInAccount();
        throw failed(`HTTP ${res.status}`);
      }

      let body: unknown;
      try {
        body = await res.json();
      } catch (err) {
        throw failed(signal.aborted ? `no answer within ${timeoutMs} ms` : 'response is not JSON', err);
      }
      // The PhoneNumber filter matches numbers that contain the value, so keep the exact one.
      const match = listedNumbers(body).find((n) => n.phone_number === phoneNumber);
      if (!match) throw notInAccount();
      return match;
    },

    //   POST {api_base_url}/2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers/{PhoneSid}.json
    //   Content-Type: application/x-www-form-urlencoded     VoiceUrl=...&VoiceMethod=POST
    async setVoiceUrl(accountSid, authToken, phoneSid, voiceUrl, statusCallbackUrl) {
      if (!base) throw unavailable('carrier API is not configured (telco.api_base_url)', CARRIER_ERROR.notConfigured);
      const url = new URL(`${base}/2010-04-01/Accounts/${encodeURIComponent(accountSid)}/IncomingPhoneNumbers/${encodeURIComponent(phoneSid)}.json`);
      let res: Response;
      try {
        res = await fetch(url, {
          method: 'POST',
          headers: { authorization: basicAuth(accountSid, authToken), accept: 'application/json', 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ VoiceUrl: voiceUrl, VoiceMethod: 'POST', ...(statusCallbackUrl !== undefined ? { StatusCallback: statusCallbackUrl, StatusCallbackMethod: 'POST' } : {}) }).toString(),
          redirect: 'error',
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (err) {
        throw failed(describeFetchError(err, timeoutMs), err);
      }
      await res.body?.cancel().catch(() => {});
      if (res.ok) return;
      if (res.status === 401 || res.status === 403) throw credentialsRejected();
      if (res.status === 404) throw notInAccount();
      throw failed(`HTTP ${res.status} setting the number's VoiceUrl`);
    },

    //   GET {api_base_url}/2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers/{PhoneSid}.json
    //   200 { "sid": "PN...", "voice_url": "...", "voice_method": "POST", "status_callback": "...", ... }
    async getNumberWebhook(accountSid, authToken, phoneSid) {
      if (!base) throw unavailable('carrier API is not configured (telco.api_base_url)', CARRIER_ERROR.notConfigured);
      const url = new URL(`${base}/2010-04-01/Accounts/${encodeURIComponent(accountSid)}/IncomingPhoneNumbers/${encodeURIComponent(phoneSid)}.json`);
      const signal = AbortSignal.timeout(timeoutMs);
      let res: Response;
      try {
        res = await fetch(url, { headers: { authorization: basicAuth(accountSid, authToken), accept: 'application/json' }, redirect: 'error', signal });
      } catch (err) {
        throw failed(describeFetchError(err, timeoutMs), err);
      }
      if (!res.ok) {
        await res.body?.cancel().catch(() => {});
        if (res.status === 401 || res.status === 403) throw credentialsRejected();
        if (res.status === 404) throw notInAccount();
        throw failed(`HTTP ${res.status} reading the number`);
      }
      let body: unknown;
      try {
        body = await res.json();
      } catch (err) {
        throw failed(signal.aborted ? `no answer within ${timeoutMs} ms` : 'response is not JSON', err);
      }
      if (!isRecord(body) || body.sid !== phoneSid) throw failed('the number resource is not the number asked for');
      const str = (v: unknown) => (typeof v === 'string' ? v : '');
      return { voice_url: str(body.voice_url), voice_method: str(body.voice_method), status_callback: str(body.status_callback), status_callback_method: str(body.status_callback_method) };
    },

    //   POST .../IncomingPhoneNumbers/{PhoneSid}.json   VoiceUrl, VoiceMethod, StatusCallback, StatusCallbackMethod ('' clears)
    async writeNumberWebhook(accountSid, authToken, phoneSid, w) {
      if (!base) throw unavailable('carrier API is not configured (telco.api_base_url)', CARRIER_ERROR.notConfigured);
      const url = `${base}/2010-04-01/Accounts/${encodeURIComponent(accountSid)}/IncomingPhoneNumbers/${encodeURIComponent(phoneSid)}.json`;
      const form = new URLSearchParams({ VoiceUrl: w.voice_url, VoiceMethod: w.voice_method, StatusCallback: w.status_callback, StatusCallbackMethod: w.status_callback_method });
      const { status, body } = await postForm(url, accountSid, authToken, form, "restoring the number's webhook");
      if (status === 401 || status === 403) throw credentialsRejected();
      if (status === 404) throw notInAccount();
      if (status < 200 || status > 299) throw failed(`HTTP ${status} restoring the number's VoiceUrl${carrierDetail(body)}`);
    },

    //   POST {api_base_url}/2010-04-01/Accounts/{AccountSid}/Calls.json
    //   To, From, Twiml, StatusCallback, StatusCallbackMethod=POST, StatusCallbackEvent (x4), Timeout
    //   201 { "sid": "CA...", "status": "queued", ... }
    async createCall(accountSid, authToken, call) {
      const form = new URLSearchParams({ To: call.to, From: call.from, Twiml: call.twiml, StatusCallback: call.statusCallback, StatusCallbackMethod: 'POST' });
      // One parameter per event, as the carrier's helper libraries send a list.
      for (const e of ['initiated', 'ringing', 'answered', 'completed']) form.append('StatusCallbackEvent', e);
      form.set('Timeout', String(call.timeoutSecs));
      const { status, body } = await postForm(callsUrl(accountSid), accountSid, authToken, form, 'placing the call');
      if (status === 400) throw validation(`carrier refused the call: ${carrierMessage(body)}`, CARRIER_ERROR.callRefused);
      if (status === 401 || status === 403) throw failed(`the carrier rejected the number's stored account_sid/auth_token (HTTP ${status}): import the number again with valid credentials`);
      if (status < 200 || status > 299) throw failed(`HTTP ${status} placing the call${carrierDetail(body)}`);
      if (!isRecord(body) || typeof body.sid !== 'string' || body.sid === '') throw failed('the call was accepted without a sid');
      return { sid: body.sid, status: typeof body.status === 'string' ? body.status : 'queued' };
    },

    //   POST {api_base_url}/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json   Status=completed | Twiml=...
    async updateCall(accountSid, authToken, callSid, fields) {
      const url = `${callsUrl(accountSid).replace(/\.json$/, '')}/${encodeURIComponent(callSid)}.json`;
      const { status, body } = await postForm(url, accountSid, authToken, new URLSearchParams(fields as Record<string, string>), 'updating the call');
      if (status < 200 || status > 299) throw failed(`HTTP ${status} updating call ${callSid}${carrierDetail(body)}`);
    },
  };

  function callsUrl(accountSid: string): string {
    if (!base) throw unavailable('carrier API is not configured (telco.api_base_url)', CARRIER_ERROR.notConfigured);
    return `${base}/2010-04-01/Accounts/${encodeURIComponent(accountSid)}/Calls.json`;
  }

  /** One form POST within telco.timeout_ms, body included; the status and the JSON body (undefined if none). */
  async function postForm(url: string, accountSid: string, authToken: string, form: URLSearchParams, what: string): Promise<{ status: number; body: unknown }> {
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { authorization: basicAuth(accountSid, authToken), accept: 'application/json', 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
        redirect: 'error',
        signal,
      });
      const text = await res.text();
      let body: unknown;
      try {
        body = text === '' ? undefined : JSON.parse(text);
      } catch {
        body = undefined;
      }
      return { status: res.status, body };
    } catch (err) {
      throw failed(`${describeFetchError(err, timeoutMs)} (${what})`, err);
    }
  }
}

/** The carrier's error body ({ code, message, more_info, status }) as one line. */
function carrierMessage(body: unknown): string {
  if (!isRecord(body)) return 'no reason given';
  const msg = typeof body.message === 'string' ? body.message.slice(0, 300) : 'no reason given';
  return typeof body.code === 'number' || typeof body.code === 'string' ? `${msg} (carrier error ${String(body.code)})` : msg;
}

function carrierDetail(body: unknown): string {
  return isRecord(body) && typeof body.message === 'string' ? `: ${carrierMessage(body)}` : '';
}

function basicAuth(user: string, password: string): string {
  return 'Basic ' + Buffer.from(`${user}:${password}`, 'utf8').toString('base64');
}

/** The numbers of an IncomingPhoneNumbers page. @throws DomainError bad_gateway on another shape. */
function listedNumbers(body: unknown): CarrierNumber[] {
  const list = isRecord(body) ? body.incoming_phone_numbers : undefined;
  if (!Array.isArray(list)) throw failed('response has no incoming_phone_numbers list');
  return list.flatMap((n: unknown) =>
    isRecord(n) && typeof n.sid === 'string' && n.sid !== '' && typeof n.phone_number === 'string'
      ? [{ phone_sid: n.sid, phone_number: n.phone_number }]
      : [],
  );
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** "no answer within 10000 ms", "ECONNREFUSED": enough for an operator to tell what broke. */
function describeFetchError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `no answer within ${timeoutMs} ms`;
  // undici reports "fetch failed" and puts the socket error (code ECONNREFUSED, ENOTFOUND...) in cause.
  const cause = err instanceof Error ? err.cause : undefined;
  if (isRecord(cause) && typeof cause.code === 'string') return cause.code;
  if (cause instanceof Error) return cause.message;
  return err instanceof Error ? err.message : 'request failed';
}
