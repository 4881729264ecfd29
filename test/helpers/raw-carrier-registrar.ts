/**
 * A bare carrier registrar on a loopback UDP socket, for the tests of callbridge registering with
 * its carrier: every REGISTER kept with the time it arrived, answered as `mode` says. In the
 * default mode it challenges a REGISTER without credentials (401, our own DigestServer, realm
 * "carrier.test"), checks the credentials against `user` / `password`, and grants
 * min(asked, grantSecs) in the 200's Contact; wrong credentials get 403. `minExpires` answers
 * shorter asks 423. No transaction layer: a retransmission is answered again like a new request.
 */
import { createSocket, type Socket } from 'node:dgram';
import { DigestServer } from '../../src/sip/digest/index.ts';
import { createResponse, parseMessage, SipRequest, type SipResponse } from '../../src/sip/message/index.ts';

export type CarrierRegistrarMode =
  /** Challenge, verify, grant. */
  | 'normal'
  /** Never answer (a carrier that is down). */
  | 'silent'
  /** 403 to everything, no challenge. */
  | 'forbid'
  /** 503 to everything. */
  | 'unavailable';

export interface ReceivedRegister {
  request: SipRequest;
  at: number;
  /** The Expires asked for (the header, else our Contact's expires param). */
  expires: number | undefined;
  /** Whether it carried an Authorization header. */
  authorized: boolean;
  /** The status we answered; undefined when silent. */
  answered: number | undefined;
}

export interface CarrierRegistrar {
  address: string;
  port: number;
  registers: ReceivedRegister[];
  mode: CarrierRegistrarMode;
  user: string;
  password: string;
  /** Longest expiry granted. */
  grantSecs: number;
  /** Asks shorter than this (and not 0) get 423 with this Min-Expires; 0 = none. */
  minExpires: number;
  /** The Contact of the last successful non-zero registration. */
  contact: string | undefined;
  /** Resolves with the first REGISTER received from now on (or already received, index >= from) that matches. */
  waitFor(match: (r: ReceivedRegister) => boolean, timeoutMs: number, from?: number): Promise<ReceivedRegister>;
  close(): Promise<void>;
}

function expiresOf(req: SipRequest): number | undefined {
  const header = req.get('Expires');
  if (header !== undefined) return Number(header);
  return req.contacts[0]?.expires;
}

export async function startCarrierRegistrar(o: { user: string; password: string; grantSecs: number; address?: string }): Promise<CarrierRegistrar> {
  const socket: Socket = createSocket('udp4');
  const address = o.address ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, address, () => resolve());
  });
  const digest = new DigestServer({ realm: 'carrier.test', nonceLifetimeMs: 3_600_000 });
  const waiters = new Set<() => void>();
  const reg: CarrierRegistrar = {
    address,
    port: socket.address().port,
    registers: [],
    mode: 'normal',
    user: o.user,
    password: o.password,
    grantSecs: o.grantSecs,
    minExpires: 0,
    contact: undefined,
    waitFor(match, timeoutMs, from = 0) {
      return new Promise((resolve, reject) => {
        const check = (): boolean => {
          const hit = reg.registers.slice(from).find(match);
          if (hit === undefined) return false;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(hit);
          return true;
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no matching REGISTER within ${timeoutMs} ms (${reg.registers.length} received)`));
        }, timeoutMs);
        if (!check()) waiters.add(check);
      });
    },
    close: () =>
      new Promise<void>((resolve) => {
        socket.close(() => resolve());
      }),
  };

  function answer(req: SipRequest): SipResponse | undefined {
    if (reg.mode === 'silent') return undefined;
    if (reg.mode === 'forbid') return createResponse(req, 403, 'Forbidden', { toTag: 'reg' });
    if (reg.mode === 'unavailable') return createResponse(req, 503, 'Service Unavailable', { toTag: 'reg' });
    const authorization = req.getAll('Authorization');
    if (authorization.length === 0) {
      return createResponse(req, 401, 'Unauthorized', { toTag: 'reg', headers: digest.challenge().map((v): [string, string] => ['WWW-Authenticate', v]) });
    }
    const v = digest.verify({ method: 'REGISTER', uri: req.uri.toString(), authorization, password: (u) => (u === reg.user ? reg.password : undefined) });
    if (!v.ok) {
      if (v.action === 'challenge') return createResponse(req, 401, 'Unauthorized', { toTag: 'reg', headers: digest.challenge({ stale: v.stale }).map((c): [string, string] => ['WWW-Authenticate', c]) });
      return createResponse(req, 403, 'Forbidden', { toTag: 'reg' });
    }
    const asked = expiresOf(req) ?? 3600;
    if (asked > 0 && reg.minExpires > 0 && asked < reg.minExpires) return createResponse(req, 423, 'Interval Too Brief', { toTag: 'reg', headers: [['Min-Expires', reg.minExpires]] });
    const contact = req.contacts[0];
    if (asked === 0 || contact === undefined) {
      reg.contact = undefined;
      return createResponse(req, 200, 'OK', { toTag: 'reg' });
    }
    const granted = Math.min(asked, reg.grantSecs);
    reg.contact = contact.uri.toString();
    return createResponse(req, 200, 'OK', { toTag: 'reg', headers: [['Contact', `<${reg.contact}>;expires=${granted}`]] });
  }

  socket.on('message', (buf, rinfo) => {
    let m;
    try {
      m = parseMessage(buf);
    } catch {
      return;
    }
    if (!(m instanceof SipRequest) || m.method !== 'REGISTER') return;
    const entry: ReceivedRegister = { request: m, at: Date.now(), expires: expiresOf(m), authorized: m.has('Authorization'), answered: undefined };
    const res = answer(m);
    entry.answered = res?.status;
    reg.registers.push(entry);
    if (res !== undefined) socket.send(res.toBuffer(), rinfo.port, rinfo.address);
    for (const w of [...waiters]) w();
  });
  return reg;
}
