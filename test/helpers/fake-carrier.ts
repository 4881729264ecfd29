/**
 * A fake carrier REST API on 127.0.0.1 (OS-chosen port), speaking the Twilio-style wire
 * protocol callbridge uses (src/telco/carrier-client.ts):
 *
 *   GET /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers.json[?PhoneNumber=...]
 *   Authorization: Basic base64(AccountSid:AuthToken)
 *
 *   POST /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers/{PhoneSid}.json
 *   Content-Type: application/x-www-form-urlencoded   (VoiceUrl, VoiceMethod, ...: updates the number)
 *
 *   GET /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers/{PhoneSid}.json
 *   200 { "sid": "PN...", "voice_url": ..., "voice_method": ..., "status_callback": ..., "status_callback_method": ... }
 *
 *   POST /2010-04-01/Accounts/{AccountSid}/Calls.json
 *   To, From, Twiml | Url, StatusCallback, StatusCallbackMethod, StatusCallbackEvent (repeated), Timeout
 *   201 { "sid": "CA...", "status": "queued", "direction": "outbound-api", ... }
 *
 *   POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json   Status=completed|canceled, or Twiml
 *
 * Like the real API it answers 401 with a JSON error body for bad credentials, and its
 * PhoneNumber filter matches numbers that *contain* the value (clients must pick the exact one).
 *
 * A call placed through Calls.json then goes as Twilio would take it, with delays of a real
 * network: status callbacks (form-encoded, signed with the account's auth token over the
 * StatusCallback URL, as the voice webhook is) for the subscribed events among initiated, ringing,
 * answered (CallStatus in-progress) and completed (always sent: completed, busy, no-answer, ...);
 * once answered, the TwiML's <Connect><Stream> is opened as a media stream (test/telco/fake-twilio.ts:
 * start with the <Parameter>s, caller media every 20 ms). What the callee does is set per number
 * with callee(): answer (default), busy, no-answer, or manual: nothing happens after Calls.json
 * until the test moves the call on with progress(), openStream() and end(), one step at a time.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { FakeStream, parseConnectStream, parseDial, twilioSign } from '../telco/fake-twilio.ts';

export type CalleeBehaviour = 'answer' | 'busy' | 'no-answer' | 'manual';

/** One call placed through Calls.json, as the fake carrier runs it. */
export interface FakeCall {
  sid: string;
  accountSid: string;
  to: string;
  from: string;
  /** The form of the Calls.json request, repeated StatusCallbackEvent values joined with a space. */
  params: Record<string, string>;
  statusCallbackEvents: string[];
  /** Every CallStatus sent in a status callback, in order, with the HTTP status our daemon answered (and its X-Request-ID header). */
  callbacks: Array<{ status: string; answer: number; requestId?: string }>;
  /** The media stream, once answered. */
  stream?: FakeStream;
  /** The forms of POST Calls/{sid}.json, in order. */
  updates: Array<Record<string, string>>;
  /** The number of a <Dial> the call was redirected to. */
  dialled?: string;
  status: string;
  /** The callee hangs up: the stream stops and the completed callback is sent. */
  hangup(): void;
  /** The call ends with this final status (the stream stops, the last callback is sent). */
  end(status: 'completed' | 'canceled' | 'failed' | 'busy' | 'no-answer'): void;
  /** Resolves once the final status callback was answered. */
  done: Promise<void>;
  /** A callee 'manual': sends the status callback of this progress now (in-progress = answered); resolves with its entry in `callbacks`. */
  progress(status: 'initiated' | 'ringing' | 'in-progress'): Promise<{ status: string; answer: number; requestId?: string }>;
  /** A callee 'manual', answered: opens and starts the TwiML's media stream now (undefined: it could not be opened). */
  openStream(): Promise<FakeStream | undefined>;
}

export interface CarrierRequest {
  method: string;
  /** As received: path and query string, e.g. /2010-04-01/Accounts/AC1/IncomingPhoneNumbers.json?PhoneNumber=%2B1555 */
  path: string;
  authorization?: string;
  /** The decoded query parameters. */
  query: Record<string, string>;
  /** The decoded form body of a POST. */
  form?: Record<string, string>;
}

export interface FakeCarrier {
  /** Base URL, for config telco.api_base_url. */
  url: string;
  /** Adds a number to an account (created on first use with this token); returns its sid (PN...). */
  addNumber(accountSid: string, authToken: string, phoneNumber: string): string;
  /** The next request (of `method`, when given) gets this status and a carrier-style error body (or `body` as sent). */
  failNext(status: number, body?: string, method?: string): void;
  /** The next request is answered only after `ms` milliseconds (for timeout tests). */
  delayNext(ms: number): void;
  requests: CarrierRequest[];
  /** The fields a POST set on a number (VoiceUrl, VoiceMethod...), by its sid. */
  numberFields(phoneSid: string): Record<string, string> | undefined;
  /** Sets a number's fields as the carrier's console would (VoiceUrl, VoiceMethod, ...), without a request. */
  setNumberFields(phoneSid: string, fields: Record<string, string>): void;
  /** The forms of the POSTs to IncomingPhoneNumbers/{sid}.json this number got, in order. */
  numberPosts(phoneSid: string): Array<Record<string, string>>;
  /** What the phone at `to` does when called (default: answer). */
  callee(to: string, behaviour: CalleeBehaviour): void;
  /** Calls placed through Calls.json, in order. */
  calls: FakeCall[];
  close(): Promise<void>;
}

interface Account {
  token: string;
  numbers: Array<{ sid: string; phone_number: string; date_created: string; fields?: Record<string, string> }>;
}

const ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/IncomingPhoneNumbers\.json$/;
const NUMBER_ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/IncomingPhoneNumbers\/([^/]+)\.json$/;
const CALLS_ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\.json$/;
const CALL_ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\/([^/]+)\.json$/;
const E164 = /^\+[1-9]\d{1,14}$/;
const FINAL = new Set(['completed', 'busy', 'no-answer', 'failed', 'canceled']);

const sid = (prefix: string) => prefix + randomBytes(16).toString('hex');

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** The real API's error shape: { code, message, more_info, status }. */
function carrierError(status: number, path: string): unknown {
  const known: Record<number, [number, string]> = {
    401: [20003, 'Authenticate'],
    403: [20403, 'Forbidden'],
    404: [20404, `The requested resource ${path} was not found`],
    405: [20004, 'Method not allowed'],
    429: [20429, 'Too Many Requests'],
  };
  const [code, message] = known[status] ?? [20500, 'Internal Server Error'];
  return { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status };
}

/** Basic credentials as [user, password], or undefined when the header is missing or malformed. */
function basicCredentials(header: string | undefined): [string, string] | undefined {
  const m = header ? /^Basic\s+(\S+)$/i.exec(header) : null;
  if (!m) return undefined;
  const decoded = Buffer.from(m[1] as string, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? undefined : [decoded.slice(0, colon), decoded.slice(colon + 1)];
}

export async function startFakeCarrier(): Promise<FakeCarrier> {
  const accounts = new Map<string, Account>();
  const requests: CarrierRequest[] = [];
  let failure: { status: number; body?: string | undefined; method?: string | undefined } | undefined;
  let delayMs = 0;
  const calls: FakeCall[] = [];
  const callees = new Map<string, CalleeBehaviour>();
  const numberPosts: Array<{ sid: string; form: Record<string, string> }> = [];

  /** The account of valid Basic credentials for the path's account, else undefined (401/403 sent). */
  function authorize(req: IncomingMessage, res: ServerResponse, url: URL, accountSid: string): Account | undefined {
    const creds = basicCredentials(req.headers.authorization);
    const user = creds && accounts.get(creds[0]);
    if (!creds || !user || user.token !== creds[1]) {
      res.setHeader('www-authenticate', 'Basic realm="Twilio API"');
      sendJson(res, 401, carrierError(401, url.pathname));
      return undefined;
    }
    if (accountSid !== creds[0]) {
      sendJson(res, 403, carrierError(403, url.pathname));
      return undefined;
    }
    return user;
  }

  const callJson = (c: FakeCall, url: string) => ({
    sid: c.sid,
    account_sid: c.accountSid,
    to: c.to,
    to_formatted: c.to,
    from: c.from,
    from_formatted: c.from,
    status: c.status,
    direction: 'outbound-api',
    api_version: '2010-04-01',
    date_created: new Date().toUTCString(),
    date_updated: new Date().toUTCString(),
    start_time: null,
    end_time: null,
    duration: null,
    price: null,
    price_unit: 'USD',
    parent_call_sid: null,
    phone_number_sid: null,
    answered_by: null,
    caller_name: null,
    queue_time: '0',
    uri: url,
  });

  function badRequest(res: ServerResponse, code: number, message: string): void {
    sendJson(res, 400, { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status: 400 });
  }

  /** POST Calls.json: validated as the real API does, then run in the background. */
  function createCall(req: IncomingMessage, res: ServerResponse, url: URL, accountSid: string, form: Record<string, string>, rawForm: Array<[string, string]>): void {
    if (req.method !== 'POST') return sendJson(res, 405, carrierError(405, url.pathname));
    const user = authorize(req, res, url, accountSid);
    if (!user) return;
    if (!form.To) return badRequest(res, 21201, "No 'To' number is specified");
    if (!form.From) return badRequest(res, 21213, "No 'From' number is specified");
    if (!form.Twiml && !form.Url) return badRequest(res, 21205, 'Url parameter is required.');
    if (!E164.test(form.To)) return badRequest(res, 21211, `Invalid 'To' Phone Number: ${form.To}`);
    if (!user.numbers.some((n) => n.phone_number === form.From)) return badRequest(res, 21210, `The source phone number provided, ${form.From}, is not yet verified for your account.`);
    const events = rawForm.filter(([k]) => k === 'StatusCallbackEvent').map(([, v]) => v);
    let seq = 0;
    let answeredAt = 0;
    let resolveDone!: () => void;
    const call: FakeCall = {
      sid: sid('CA'),
      accountSid,
      to: form.To,
      from: form.From,
      params: form,
      statusCallbackEvents: events,
      callbacks: [],
      updates: [],
      status: 'queued',
      hangup: () => end('completed'),
      end: (status) => end(status),
      done: new Promise<void>((r) => (resolveDone = r)),
      progress: async (status) => {
        if (status === 'in-progress') answeredAt = Date.now();
        const sent = await callback(status);
        if (sent === undefined) throw new Error(`fake carrier: the ${status} callback is not subscribed`);
        return sent;
      },
      openStream: () => openStream(),
    };
    calls.push(call);
    const timers: NodeJS.Timeout[] = [];
    const later = (ms: number, f: () => void) => timers.push(setTimeout(f, ms));
    /** A status callback, signed like every webhook, if the event is subscribed (completed always is); its entry in `callbacks`. */
    const callback = async (status: string): Promise<FakeCall['callbacks'][number] | undefined> => {
      call.status = status;
      const event = status === 'in-progress' ? 'answered' : FINAL.has(status) ? 'completed' : status;
      if (!form.StatusCallback || (event !== 'completed' && !events.includes(event))) return undefined;
      const params: Record<string, string> = {
        AccountSid: accountSid,
        ApiVersion: '2010-04-01',
        CallSid: call.sid,
        CallStatus: status,
        Called: call.to,
        Caller: call.from,
        CallbackSource: 'call-progress-events',
        Direction: 'outbound-api',
        From: call.from,
        SequenceNumber: String(seq++),
        Timestamp: new Date().toUTCString(),
        To: call.to,
      };
      if (FINAL.has(status)) {
        const secs = answeredAt === 0 ? 0 : Math.round((Date.now() - answeredAt) / 1000);
        params.CallDuration = String(secs);
        params.Duration = String(Math.ceil(secs / 60));
      }
      if (status === 'busy') params.SipResponseCode = '486';
      if (status === 'no-answer') params.SipResponseCode = '487';
      const r = await fetch(form.StatusCallback, {
        method: form.StatusCallbackMethod === 'GET' ? 'GET' : 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': twilioSign(user.token, form.StatusCallback, params), 'user-agent': 'TwilioProxy/1.1' },
        body: new URLSearchParams(params).toString(),
      }).catch(() => undefined);
      await r?.body?.cancel().catch(() => {});
      const requestId = r?.headers.get('x-request-id') ?? undefined;
      const sent = { status, answer: r?.status ?? 0, ...(requestId !== undefined ? { requestId } : {}) };
      call.callbacks.push(sent);
      return sent;
    };
    let ended = false;
    const end = (status: string) => {
      if (ended) return;
      ended = true;
      for (const t of timers) clearTimeout(t);
      if (call.stream && call.stream.closeCode === undefined) call.stream.stop(accountSid, call.sid);
      // The carrier's last callback comes a moment after the call is torn down.
      setTimeout(() => void callback(status).finally(resolveDone), 60);
    };
    /** Opens and starts the TwiML's <Connect><Stream> (the call completes when it cannot be, or when the server closes it). */
    const openStream = async (): Promise<FakeStream | undefined> => {
      const connect = parseConnectStream(form.Twiml ?? '');
      if (!connect || ended) {
        end('completed');
        return undefined;
      }
      const stream = await FakeStream.open(connect.url).catch(() => undefined);
      if (!stream) {
        end('completed');
        return undefined;
      }
      call.stream = stream;
      stream.start({ accountSid, callSid: call.sid, customParameters: connect.parameters });
      // <Connect> returns when the server closes the socket; with no verb after it, the call ends.
      void stream.closed.then(() => setTimeout(() => !call.dialled && end('completed'), 30));
      return stream;
    };
    const behaviour = callees.get(form.To) ?? 'answer';
    const ringMs = Math.min(Number(form.Timeout || 60) * 1000, 600);
    if (behaviour !== 'manual') later(40, () => void callback('initiated'));
    if (behaviour === 'busy') later(150, () => end('busy'));
    else if (behaviour !== 'manual') {
      later(120, () => void callback('ringing'));
      if (behaviour === 'no-answer') later(120 + ringMs, () => end('no-answer'));
      else
        later(400, async () => {
          answeredAt = Date.now();
          await callback('in-progress');
          await openStream();
        });
    }
    res.setHeader('location', `${url.pathname.replace(/\.json$/, '')}/${call.sid}.json`);
    sendJson(res, 201, callJson(call, `${url.pathname.replace(/\.json$/, '')}/${call.sid}.json`));
  }

  /** POST Calls/{sid}.json: hang up (Status) or new TwiML (a <Dial> redirect). */
  function updateCall(req: IncomingMessage, res: ServerResponse, url: URL, accountSid: string, callSid: string, form: Record<string, string>): void {
    if (req.method !== 'POST') return sendJson(res, 405, carrierError(405, url.pathname));
    if (!authorize(req, res, url, accountSid)) return;
    const call = calls.find((c) => c.sid === callSid && c.accountSid === accountSid);
    if (!call) return sendJson(res, 404, carrierError(404, url.pathname));
    call.updates.push(form);
    if (form.Status !== undefined && form.Status !== 'completed' && form.Status !== 'canceled') return badRequest(res, 21218, 'Invalid Status: must be completed or canceled');
    if (form.Twiml !== undefined) {
      // The new TwiML replaces the <Connect>: the stream stops and the call dials the number.
      call.dialled = parseDial(form.Twiml);
      if (call.stream && call.stream.closeCode === undefined) call.stream.stop(accountSid, call.sid);
      call.hangup = () => {};
      // The dialled party talks a moment, then the call completes.
      setTimeout(() => call.end('completed'), 200);
      sendJson(res, 200, callJson(call, url.pathname));
      return;
    }
    sendJson(res, 200, { ...callJson(call, url.pathname), status: form.Status === 'canceled' ? 'canceled' : 'completed' });
    if (form.Status) setImmediate(() => call.end(form.Status === 'canceled' ? 'canceled' : 'completed'));
  }

  function answer(req: IncomingMessage, res: ServerResponse, url: URL, form: Record<string, string> | undefined, rawForm: Array<[string, string]> = []): void {
    if (failure && (failure.method === undefined || failure.method === req.method)) {
      const f = failure;
      failure = undefined;
      if (f.body !== undefined) {
        res.writeHead(f.status, { 'content-type': 'application/json' });
        res.end(f.body);
      } else {
        sendJson(res, f.status, carrierError(f.status, url.pathname));
      }
      return;
    }
    const callsRoute = CALLS_ROUTE.exec(url.pathname);
    if (callsRoute) return createCall(req, res, url, decodeURIComponent(callsRoute[1]!), form ?? {}, rawForm);
    const callRoute = CALL_ROUTE.exec(url.pathname);
    if (callRoute) return updateCall(req, res, url, decodeURIComponent(callRoute[1]!), decodeURIComponent(callRoute[2]!), form ?? {});
    const numberRoute = NUMBER_ROUTE.exec(url.pathname);
    if (numberRoute) return updateNumber(req, res, url, decodeURIComponent(numberRoute[1]!), decodeURIComponent(numberRoute[2]!), form ?? {});
    const route = ROUTE.exec(url.pathname);
    if (!route) return sendJson(res, 404, carrierError(404, url.pathname));
    const creds = basicCredentials(req.headers.authorization);
    const user = creds && accounts.get(creds[0]);
    if (!creds || !user || user.token !== creds[1]) {
      res.setHeader('www-authenticate', 'Basic realm="Twilio API"');
      return sendJson(res, 401, carrierError(401, url.pathname));
    }
    if (req.method !== 'GET') return sendJson(res, 405, carrierError(405, url.pathname));
    const accountSid = decodeURIComponent(route[1] as string);
    if (accountSid !== creds[0]) return sendJson(res, 403, carrierError(403, url.pathname));
    const filter = url.searchParams.get('PhoneNumber');
    const listed = user.numbers.filter((n) => filter === null || n.phone_number.includes(filter));
    sendJson(res, 200, {
      first_page_uri: `${url.pathname}?PageSize=50&Page=0`,
      end: Math.max(0, listed.length - 1),
      previous_page_uri: null,
      incoming_phone_numbers: listed.map((n) => ({
        sid: n.sid,
        account_sid: accountSid,
        friendly_name: n.phone_number,
        phone_number: n.phone_number,
        date_created: n.date_created,
        date_updated: n.date_created,
        capabilities: { voice: true, sms: true, mms: false, fax: false },
        status: 'in-use',
        api_version: '2010-04-01',
        uri: `/2010-04-01/Accounts/${accountSid}/IncomingPhoneNumbers/${n.sid}.json`,
      })),
      uri: url.pathname + url.search,
      page_size: 50,
      start: 0,
      next_page_uri: null,
      page: 0,
    });
  }

  /** POST IncomingPhoneNumbers/{sid}.json: the number's fields updated, the number returned. */
  function updateNumber(req: IncomingMessage, res: ServerResponse, url: URL, accountSid: string, phoneSid: string, form: Record<string, string>): void {
    const creds = basicCredentials(req.headers.authorization);
    const user = creds && accounts.get(creds[0]);
    if (!creds || !user || user.token !== creds[1]) {
      res.setHeader('www-authenticate', 'Basic realm="Twilio API"');
      return sendJson(res, 401, carrierError(401, url.pathname));
    }
    if (accountSid !== creds[0]) return sendJson(res, 403, carrierError(403, url.pathname));
    if (req.method !== 'POST' && req.method !== 'GET') return sendJson(res, 405, carrierError(405, url.pathname));
    const n = user.numbers.find((x) => x.sid === phoneSid);
    if (!n) return sendJson(res, 404, carrierError(404, url.pathname));
    if (req.method === 'GET') {
      // The IncomingPhoneNumber resource: a URL never set is null, a method never set is POST.
      const f = n.fields ?? {};
      return sendJson(res, 200, {
        sid: n.sid,
        account_sid: accountSid,
        friendly_name: n.phone_number,
        phone_number: n.phone_number,
        voice_url: f.VoiceUrl ?? null,
        voice_method: f.VoiceMethod ?? 'POST',
        voice_fallback_url: null,
        voice_fallback_method: 'POST',
        status_callback: f.StatusCallback ?? null,
        status_callback_method: f.StatusCallbackMethod ?? 'POST',
        sms_url: '',
        sms_method: 'POST',
        date_created: n.date_created,
        date_updated: n.date_created,
        capabilities: { voice: true, sms: true, mms: false, fax: false },
        status: 'in-use',
        api_version: '2010-04-01',
        uri: url.pathname,
      });
    }
    numberPosts.push({ sid: phoneSid, form });
    n.fields = { ...n.fields, ...form };
    sendJson(res, 200, {
      sid: n.sid,
      account_sid: accountSid,
      phone_number: n.phone_number,
      voice_url: n.fields.VoiceUrl ?? '',
      voice_method: n.fields.VoiceMethod ?? 'POST',
      api_version: '2010-04-01',
      uri: url.pathname,
    });
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake-carrier');
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const isForm = req.method === 'POST' && (req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded');
      const rawForm = isForm ? [...new URLSearchParams(text)] : [];
      const form = isForm ? Object.fromEntries(rawForm) : undefined;
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        authorization: req.headers.authorization,
        query: Object.fromEntries(url.searchParams),
        ...(form !== undefined ? { form } : {}),
      });
      const ms = delayMs;
      delayMs = 0;
      if (ms > 0) setTimeout(() => !res.destroyed && answer(req, res, url, form, rawForm), ms).unref();
      else answer(req, res, url, form, rawForm);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    calls,
    callee(to, behaviour) {
      callees.set(to, behaviour);
    },
    addNumber(accountSid, authToken, phoneNumber) {
      let account = accounts.get(accountSid);
      if (!account) {
        account = { token: authToken, numbers: [] };
        accounts.set(accountSid, account);
      } else if (account.token !== authToken) {
        throw new Error(`fake carrier: account ${accountSid} already exists with another auth token`);
      }
      const n = { sid: sid('PN'), phone_number: phoneNumber, date_created: new Date().toUTCString() };
      account.numbers.push(n);
      return n.sid;
    },
    numberFields(phoneSid) {
      for (const a of accounts.values()) {
        const n = a.numbers.find((x) => x.sid === phoneSid);
        if (n) return n.fields;
      }
      return undefined;
    },
    setNumberFields(phoneSid, fields) {
      for (const a of accounts.values()) {
        const n = a.numbers.find((x) => x.sid === phoneSid);
        if (n) {
          n.fields = { ...n.fields, ...fields };
          return;
        }
      }
      throw new Error(`fake carrier: no number ${phoneSid}`);
    },
    numberPosts(phoneSid) {
      return numberPosts.filter((p) => p.sid === phoneSid).map((p) => p.form);
    },
    failNext(status, body, method) {
      failure = { status, body, method };
    },
    delayNext(ms) {
      delayMs = ms;
    },
    close() {
      for (const c of calls) c.stream?.close();
      // Drop keep-alive and delayed sockets too, so close() never waits on a client.
      server.closeAllConnections();
      return new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}
