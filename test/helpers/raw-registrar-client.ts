/**
 * A bare SIP peer that REGISTERs with the daemon over UDP or TCP, for the registrar tests: each
 * REGISTER written as text from a socket bound to a loopback address of the test's choosing
 * (127.0.0.x, so per-source limits of one test do not touch another), answered 401 challenges
 * with digest credentials computed by our own DigestClient, every message received kept (the
 * INVITEs the daemon sends to a registered PBX too). No transaction layer: nothing is
 * retransmitted or answered unless the test does it.
 */
import { createSocket, type Socket } from 'node:dgram';
import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { authorize } from '../../src/sip/digest/index.ts';
import { parseMessage, SipRequest, SipResponse, SipStreamFramer, type SipMessageAny } from '../../src/sip/message/index.ts';

export interface RegisterOptions {
  /** The address-of-record user (To and From). */
  user: string;
  /** Answer a 401 with these credentials; without it the first final response is returned. */
  password?: string;
  /** The digest username; default `user`. */
  authUser?: string;
  /** Contact values as written, e.g. '<sip:pbx@127.0.0.5:5070>;expires=120'; default one Contact at this peer. */
  contacts?: string[];
  /** An Expires header. */
  expires?: number;
  callId?: string;
  /** CSeq of the first REGISTER; the authenticated one is this + 1. Default 1. */
  cseq?: number;
}

export interface RegisterResult {
  /** The 401 when there was one. */
  challenge?: SipResponse;
  /** The final response to the last REGISTER sent. */
  final: SipResponse;
  callId: string;
  /** CSeq of the last REGISTER sent. */
  cseq: number;
}

export interface RegistrarClient {
  protocol: 'udp' | 'tcp';
  address: string;
  port: number;
  /** Every message received, in order. */
  received: SipMessageAny[];
  /** This peer's own Contact (sip:pbx@address:port, ;transport=tcp over TCP). */
  contact: string;
  register(o: RegisterOptions): Promise<RegisterResult>;
  /** Resolves with the first request of `method` received (now or later). */
  nextRequest(method: string, timeoutMs?: number): Promise<SipRequest>;
  /** Sends raw text to the daemon over this peer's socket. */
  sendRaw(text: string): void;
  close(): Promise<void>;
}

export async function startRegistrarClient(protocol: 'udp' | 'tcp', address: string, sipPort: number): Promise<RegistrarClient> {
  const received: SipMessageAny[] = [];
  const waiters: Array<() => void> = [];
  const onMessage = (m: SipMessageAny) => {
    received.push(m);
    for (const w of waiters.splice(0)) w();
  };
  let send: (text: string) => void;
  let close: () => Promise<void>;
  let port: number;
  if (protocol === 'udp') {
    const socket: Socket = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(0, address, () => resolve());
    });
    port = socket.address().port;
    socket.on('message', (buf) => {
      try {
        onMessage(parseMessage(buf));
      } catch {
        // not SIP
      }
    });
    send = (text) => socket.send(text, sipPort, '127.0.0.1');
    close = () => new Promise<void>((resolve) => socket.close(() => resolve()));
  } else {
    const socket = net.connect({ host: '127.0.0.1', port: sipPort, localAddress: address });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.once('connect', () => resolve());
    });
    port = socket.localPort!;
    const framer = new SipStreamFramer();
    socket.on('data', (chunk: Buffer) => {
      for (const m of framer.push(chunk)) onMessage(parseMessage(m));
    });
    socket.on('error', () => {});
    send = (text) => void socket.write(text);
    close = () =>
      new Promise<void>((resolve) => {
        socket.once('close', () => resolve());
        socket.destroy();
      });
  }
  const contact = `<sip:pbx@${address}:${port}${protocol === 'tcp' ? ';transport=tcp' : ''}>`;
  const uri = `sip:127.0.0.1:${sipPort}`;

  const waitFor = <T>(pick: () => T | undefined, timeoutMs: number, what: string): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const check = () => {
        const found = pick();
        if (found !== undefined) {
          clearTimeout(timer);
          resolve(found);
        } else waiters.push(check);
      };
      const timer = setTimeout(() => reject(new Error(`no ${what} within ${timeoutMs} ms`)), timeoutMs);
      check();
    });

  const finalFor = (callId: string, cseq: number) =>
    waitFor(
      () => received.find((m): m is SipResponse => m instanceof SipResponse && m.callId === callId && m.cseq.seq === cseq && m.cseq.method === 'REGISTER' && m.status >= 200),
      3000,
      `final response to REGISTER ${cseq}`,
    );

  const write = (o: RegisterOptions, callId: string, cseq: number, authorization?: string) => {
    const fromTag = randomBytes(4).toString('hex');
    const lines = [
      `REGISTER ${uri} SIP/2.0`,
      `Via: SIP/2.0/${protocol.toUpperCase()} ${address}:${port};rport;branch=z9hG4bK${randomBytes(6).toString('hex')}`,
      `From: <sip:${o.user}@127.0.0.1>;tag=${fromTag}`,
      `To: <sip:${o.user}@127.0.0.1>`,
      `Call-ID: ${callId}`,
      `CSeq: ${cseq} REGISTER`,
      ...(o.contacts ?? [contact]).map((c) => `Contact: ${c}`),
      ...(o.expires === undefined ? [] : [`Expires: ${o.expires}`]),
      ...(authorization === undefined ? [] : [`Authorization: ${authorization}`]),
      'Max-Forwards: 70',
      'Content-Length: 0',
      '',
      '',
    ];
    send(lines.join('\r\n'));
  };

  return {
    protocol,
    address,
    port,
    received,
    contact,
    async register(o) {
      const callId = o.callId ?? `${randomBytes(8).toString('hex')}@${address}`;
      let cseq = o.cseq ?? 1;
      write(o, callId, cseq);
      const first = await finalFor(callId, cseq);
      if (first.status !== 401 || o.password === undefined) return { final: first, callId, cseq };
      const auth = authorize({ username: o.authUser ?? o.user, password: o.password, challenges: first.getAll('WWW-Authenticate'), method: 'REGISTER', uri });
      if (!auth.ok) throw new Error(`cannot answer the challenge: ${auth.detail}`);
      cseq++;
      write(o, callId, cseq, auth.authorizations[0]!.value);
      return { challenge: first, final: await finalFor(callId, cseq), callId, cseq };
    },
    nextRequest(method, timeoutMs = 5000) {
      return waitFor(() => received.find((m): m is SipRequest => m instanceof SipRequest && m.method === method), timeoutMs, `${method} request`);
    },
    sendRaw: (text) => send(text),
    close: () => close(),
  };
}

/** The bindings a 200 to REGISTER lists: Contact URI -> expires. */
export function bindingsOf(res: SipResponse): Map<string, number> {
  return new Map(res.contacts.map((c) => [c.uri.toString(), c.expires ?? -1]));
}
