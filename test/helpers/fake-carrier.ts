/**
 * A fake carrier REST API on 127.0.0.1 (OS-chosen port), speaking the Twilio-style wire
 * protocol callbridge uses (src/telco/carrier-client.ts):
 *
 *   GET /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers.json[?PhoneNumber=...]
 *   Authorization: Basic base64(AccountSid:AuthToken)
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
}

export interface FakeCarrier {
  /** Base URL, for config telco.api_base_url. */
  url: string;
  /** Adds a number to an account (created on first use with this token); returns its sid (PN...). */
  addNumber(accountSid: string, authToken: string, phoneNumber: string): string;
  /** The next request gets this status and a carrier-style error body (or `body` as sent). */
  failNext(status: number, body?: string): void;
  /** The next request is answered only after `ms` milliseconds (for timeout tests). */
  delayNext(ms: number): void;
  requests: CarrierRequest[];
  close(): Promise<void>;
}

interface Account {
  token: string;
  numbers: Array<{ sid: string; phone_number: string; date_created: string }>;
}

const ROUTE = /^\/2010-04-01\/Accounts\/([^/]+)\/IncomingPhoneNumbers\.json$/;

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
  let failure: { status: number; body?: string } | undefined;
  let delayMs = 0;

  function answer(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (failure) {
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

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake-carrier');
    requests.push({
      method: req.method ?? '',
      path: req.url ?? '',
      authorization: req.headers.authorization,
      query: Object.fromEntries(url.searchParams),
    });
    const ms = delayMs;
    delayMs = 0;
    if (ms > 0) setTimeout(() => !res.destroyed && answer(req, res, url), ms).unref();
    else answer(req, res, url);
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
    failNext(status, body) {
      failure = { status, body };
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
