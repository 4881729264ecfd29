/**
 * RFC 5626 4.4.1 keep-alives as the client: callbridge's own registration with a carrier over
 * TCP sends "\r\n\r\n" pings on the REGISTER's connection while registered, and re-registers on a
 * new connection when a ping gets no pong or the connection is gone. Real sockets on loopback:
 * callbridge's transport and transaction layers and an OutboundRegistration (as the user agent
 * builds them, with short intervals), against a bare TCP registrar written here that frames
 * with SipStreamFramer, answers REGISTER 200 and, while `pong` is on, each ping with a pong.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createResponse, parseMessage, SipRequest, SipStreamFramer } from '../../src/sip/message/index.ts';
import { TransactionLayer } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer } from '../../src/sip/transport/index.ts';
import { OutboundRegistration, type OutboundRegistrationState } from '../../src/sip/ua/outbound-registration.ts';
import { delay, until } from '../helpers/until.ts';

interface TcpRegistrar {
  port: number;
  /** Connections accepted, in order, with what each carried. */
  conns: { socket: Socket; registers: number; pings: number; closed: boolean }[];
  /** Answer pings with a pong. */
  pong: boolean;
  close(): Promise<void>;
}

async function startTcpRegistrar(): Promise<TcpRegistrar> {
  const r: TcpRegistrar = { port: 0, conns: [], pong: true, close: async () => {} };
  const server: Server = createServer((socket) => {
    const c = { socket, registers: 0, pings: 0, closed: false };
    r.conns.push(c);
    socket.on('error', () => {});
    socket.on('close', () => (c.closed = true));
    const framer = new SipStreamFramer({
      onPing: () => {
        c.pings++;
        if (r.pong) socket.write('\r\n');
      },
    });
    socket.on('data', (chunk: Buffer) => {
      for (const raw of framer.push(chunk)) {
        const m = parseMessage(raw, { stream: true });
        if (!(m instanceof SipRequest) || m.method !== 'REGISTER') continue;
        c.registers++;
        const res = createResponse(m, 200, 'OK', { toTag: 'reg', headers: [['Contact', `${m.get('Contact')};expires=3600`]] });
        socket.write(res.toBuffer());
      }
    });
  });
  await new Promise<void>((res) => server.listen(0, '127.0.0.1', () => res()));
  r.port = (server.address() as { port: number }).port;
  r.close = async () => {
    for (const c of r.conns) c.socket.destroy();
    await new Promise<void>((res) => server.close(() => res()));
  };
  return r;
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function register(registrar: TcpRegistrar, keepAlive: boolean) {
  const transport = new SipTransportLayer({ listen: [{ protocol: 'tcp', address: '127.0.0.1', port: 0 }] });
  await transport.start();
  const layer = new TransactionLayer({ transport });
  const states: OutboundRegistrationState[] = [];
  const failures: string[] = [];
  const destination = { protocol: 'tcp' as const, address: '127.0.0.1', port: registrar.port };
  const reg = new OutboundRegistration({
    layer,
    destination,
    requestUri: `sip:127.0.0.1:${registrar.port};transport=tcp`,
    aor: `sip:acct@127.0.0.1:${registrar.port}`,
    contact: `sip:cb0011223344556677@127.0.0.1:${transport.localEndpoint('tcp').port};transport=tcp`,
    credentials: { username: 'acct', password: 'unused-no-challenge' },
    expiresSecs: 3600,
    retry: { initialMs: 1000, maxMs: 1000 },
    onState: (s) => states.push(s),
    ...(keepAlive
      ? { keepAlive: { ping: (e, ms) => transport.pingEndpoint(e, ms), intervalMs: 100, pongTimeoutMs: 1000, onFlowFailed: (_e, why) => failures.push(why) } }
      : {}),
  });
  cleanups.push(async () => {
    await reg.stop({ unregister: false });
    layer.close();
    await transport.close();
  });
  reg.start();
  await until(() => registrar.conns[0]?.registers === 1 && reg.state.status === 'registered', 'the first registration');
  return { reg, transport, states, failures };
}

describe('RFC 5626 keep-alives of our own registration over TCP', () => {
  it('pings the REGISTER connection while registered; answered pongs keep the one registration and connection', async () => {
    const registrar = await startTcpRegistrar();
    cleanups.push(() => registrar.close());
    const { reg, failures } = await register(registrar, true);
    await until(() => registrar.conns[0]!.pings >= 5, 'five pings', 5000);
    expect(registrar.conns).toHaveLength(1);
    expect(registrar.conns[0]!.registers).toBe(1);
    expect(failures).toEqual([]);
    expect(reg.state.status).toBe('registered');
  });

  it('a ping without a pong: the flow failed, that connection is closed, and the REGISTER goes again on a new connection', async () => {
    const registrar = await startTcpRegistrar();
    cleanups.push(() => registrar.close());
    const { reg, failures } = await register(registrar, true);
    registrar.pong = false;
    await until(() => registrar.conns.length === 2 && registrar.conns[1]!.registers === 1, 'a REGISTER on a second connection', 5000);
    expect(failures[0]).toBe('no-pong');
    await until(() => registrar.conns[0]!.closed, 'the failed connection closed by us');
    expect(registrar.conns[0]!.registers).toBe(1);
    expect(reg.state.status).toBe('registered');
    // Pongs again: the new flow is kept with pings and no more REGISTERs.
    registrar.pong = true;
    const before = registrar.conns[1]!.pings;
    await until(() => registrar.conns[1]!.pings >= before + 3, 'pings on the new connection', 5000);
    expect(registrar.conns).toHaveLength(2);
  });

  it('the connection closed by the registrar: re-registered on a new one at the next keep-alive', async () => {
    const registrar = await startTcpRegistrar();
    cleanups.push(() => registrar.close());
    const { failures } = await register(registrar, true);
    registrar.conns[0]!.socket.destroy();
    await until(() => registrar.conns.length === 2 && registrar.conns[1]!.registers === 1, 'a REGISTER on a second connection', 5000);
    expect(failures[0]).toMatch(/^no-(connection|pong)$/);
  });

  it('without keepAlive no ping is sent', async () => {
    const registrar = await startTcpRegistrar();
    cleanups.push(() => registrar.close());
    await register(registrar, false);
    await delay(500);
    expect(registrar.conns[0]!.pings).toBe(0);
  });
});
