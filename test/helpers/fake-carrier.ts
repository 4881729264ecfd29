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
 * Like the real API it answers 401 with a JSON error body for bad credentials, and its
 * PhoneNumber filter matches numbers that *contain* the value (clients must pick the exact one).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';

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
  close(): Promise<void>;
}

interface Account {
  token: string;
  numbers: Array<{ sid: string; phone_number: string; date_created: string; fields?: Record<string, string> }>;
}

const ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/IncomingPhoneNumbers\.json$/;
const NUMBER_ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/IncomingPhoneNumbers\/([^/]+)\.json$/;

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

  function answer(req: IncomingMessage, res: ServerResponse, url: URL, form: Record<string, string> | undefined): void {
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
    if (req.method !== 'POST') return sendJson(res, 405, carrierError(405, url.pathname));
    const n = user.numbers.find((x) => x.sid === phoneSid);
    if (!n) return sendJson(res, 404, carrierError(404, url.pathname));
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
      const form = req.method === 'POST' && (req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded') ? Object.fromEntries(new URLSearchParams(text)) : undefined;
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        authorization: req.headers.authorization,
        query: Object.fromEntries(url.searchParams),
        ...(form !== undefined ? { form } : {}),
      });
      const ms = delayMs;
      delayMs = 0;
      if (ms > 0) setTimeout(() => !res.destroyed && answer(req, res, url, form), ms).unref();
      else answer(req, res, url, form);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
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
    failNext(status, body, method) {
      failure = { status, body, method };
    },
    delayNext(ms) {
      delayMs = ms;
    },
    close() {
      // Drop keep-alive and delayed sockets too, so close() never waits on a client.
      server.closeAllConnections();
      return new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}
