/**
 * OptionsPinger (src/sip/ua/options-ping.ts) against real loopback peers: a UAS on our own
 * SipTransportLayer + TransactionLayer that answers OPTIONS (200, or 405), then goes away. T1 is
 * 10 ms so Timer F (the failure of one ping over UDP) is 640 ms.
 */
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createResponse, generateTag, type SipRequest } from '../../src/sip/message/index.ts';
import { OptionsPinger, type OptionsPingDetail, type OptionsPingerOptions, type OptionsPingStatus, type OptionsPingTarget } from '../../src/sip/ua/options-ping.ts';
import { TransactionLayer, type TransactionTimerConfig, type TransactionTimers } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer, type TransportProtocol } from '../../src/sip/transport/index.ts';

const TIMERS: TransactionTimerConfig = { t1: 10, t2: 40, t4: 50, timerD: 50 };

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function until(cond: () => boolean, ms = 4000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await delay(5);
  }
}

interface Peer {
  transport: SipTransportLayer;
  layer: TransactionLayer;
  port: number;
  received: SipRequest[];
  /** Status to answer OPTIONS with. */
  status: number;
  close(): Promise<void>;
}

/** A UAS that answers every request with `status`; on `port` when given (restart after close). */
async function startPeer(protocol: TransportProtocol = 'udp', port = 0): Promise<Peer> {
  const transport = new SipTransportLayer({ listen: [{ protocol, address: '127.0.0.1', port }] });
  await transport.start();
  const layer = new TransactionLayer({ transport, timers: TIMERS });
  const peer: Peer = {
    transport,
    layer,
    port: transport.endpoints[0]!.port,
    received: [],
    status: 200,
    close: async () => {
      layer.close();
      await transport.close();
    },
  };
  layer.on('request', (tx, inbound) => {
    peer.received.push(inbound.message);
    tx.respond(createResponse(inbound.message, peer.status, undefined, { toTag: generateTag() }));
  });
  cleanups.push(() => peer.close());
  return peer;
}

async function ourLayer(): Promise<TransactionLayer> {
  const transport = new SipTransportLayer({
    listen: [
      { protocol: 'udp', address: '127.0.0.1', port: 0 },
      { protocol: 'tcp', address: '127.0.0.1', port: 0 },
    ],
  });
  await transport.start();
  const layer = new TransactionLayer({ transport, timers: TIMERS });
  cleanups.push(async () => {
    layer.close();
    await transport.close();
  });
  return layer;
}

function target(id: string, peerPort: number, protocol: TransportProtocol = 'udp'): OptionsPingTarget {
  return { id, destination: { protocol, address: '127.0.0.1', port: peerPort }, uri: `sip:${id}@127.0.0.1:${peerPort}${protocol === 'udp' ? '' : `;transport=${protocol}`}` };
}

function pinger(opts: Omit<OptionsPingerOptions, 'onStatus'>): { p: OptionsPinger; changes: [string, OptionsPingStatus, OptionsPingDetail][] } {
  const changes: [string, OptionsPingStatus, OptionsPingDetail][] = [];
  const p = new OptionsPinger({ ...opts, onStatus: (id, s, d) => changes.push([id, s, d]) });
  cleanups.push(() => p.close());
  return { p, changes };
}

describe('OptionsPinger', () => {
  it('a UAS answering 200 is up, reported once; the OPTIONS carries Max-Forwards 70 and Accept: application/sdp', async () => {
    const peer = await startPeer();
    const layer = await ourLayer();
    const t = target('trunk-a', peer.port);
    const { p, changes } = pinger({ layer, targets: () => [t], intervalMs: 30, from: '<sip:callbridge@127.0.0.1>' });
    p.start();
    p.start(); // idempotent
    await until(() => peer.received.length >= 4);
    expect(changes).toHaveLength(1);
    expect(changes[0]![0]).toBe('trunk-a');
    expect(changes[0]![1]).toBe('up');
    expect(changes[0]![2]).toMatchObject({ status: 200, reason: '200 OK', failures: 0, destination: t.destination });
    expect(changes[0]![2].rttMs).toBeGreaterThanOrEqual(0);
    expect(p.status('trunk-a')).toBe('up');
    const req = peer.received[0]!;
    expect(req.method).toBe('OPTIONS');
    expect(req.uri.toString()).toBe(t.uri);
    expect(req.to.uri.toString()).toBe(t.uri);
    expect(req.to.tag).toBeUndefined();
    expect(req.from.uri.toString()).toBe('sip:callbridge@127.0.0.1');
    expect(req.from.tag).toBeDefined();
    expect(req.maxForwards).toBe(70);
    expect(req.get('Accept')).toBe('application/sdp');
    expect(req.cseq.method).toBe('OPTIONS');
    // Every ping is its own out-of-dialog request.
    expect(new Set(peer.received.map((r) => r.callId)).size).toBe(peer.received.length);
  });

  it('the peer goes away: down after 2 consecutive failures (Timer F), up again after one success', async () => {
    const peer = await startPeer('udp');
    const layer = await ourLayer();
    const port = peer.port;
    const { p, changes } = pinger({ layer, targets: () => [target('trunk-b', port)], intervalMs: 50 });
    p.start();
    await until(() => changes.length === 1);
    expect(changes[0]![1]).toBe('up');

    await peer.close(); // stops answering
    const downAt = Date.now();
    await until(() => changes.length === 2);
    expect(changes[1]![1]).toBe('down');
    expect(changes[1]![2]).toMatchObject({ status: 408, failures: 2 });
    expect(changes[1]![2].reason).toMatch(/Timer F/);
    // Two Timer F periods (64*T1 = 640 ms each): the first failure alone did not mark it down.
    expect(Date.now() - downAt).toBeGreaterThanOrEqual(1200);
    expect(p.status('trunk-b')).toBe('down');

    await startPeer('udp', port); // back on the same port
    await until(() => changes.length === 3);
    expect(changes[2]![1]).toBe('up');
    expect(changes[2]![2].failures).toBe(0);
  });

  it('any final response counts as up: 405 and 404', async () => {
    const peer405 = await startPeer();
    peer405.status = 405;
    const peer404 = await startPeer('tcp');
    peer404.status = 404;
    const layer = await ourLayer();
    const { p, changes } = pinger({ layer, targets: () => [target('t405', peer405.port), target('t404', peer404.port, 'tcp')], intervalMs: 30 });
    p.start();
    await until(() => changes.length === 2);
    const byId = Object.fromEntries(changes.map(([id, s, d]) => [id, [s, d.status]]));
    expect(byId).toEqual({ t405: ['up', 405], t404: ['up', 404] });
  });

  it('targets are read every round: a removed target is no longer pinged, an added one is', async () => {
    const peer = await startPeer();
    const layer = await ourLayer();
    let list = [target('keep', peer.port), target('drop', peer.port)];
    const { p, changes } = pinger({ layer, targets: () => list, intervalMs: 20 });
    p.start();
    const count = (user: string) => peer.received.filter((r) => r.uri.kind === 'sip' && r.uri.user === user).length;
    await until(() => count('drop') >= 2 && count('keep') >= 2);
    list = [target('keep', peer.port)];
    await delay(40); // a round passes: 'drop' is forgotten
    const dropped = count('drop');
    expect(p.status('drop')).toBeUndefined();
    await delay(150);
    expect(count('drop')).toBe(dropped);
    const keep = count('keep');
    list = [target('keep', peer.port), target('new', peer.port)];
    await until(() => count('new') >= 2 && count('keep') > keep);
    expect(changes.map(([id, s]) => `${id}:${s}`).sort()).toEqual(['drop:up', 'keep:up', 'new:up']);
  });

  it('rounds run on the injected clock; TCP refused fails at once; close() stops everything and is idempotent', async () => {
    const layer = await ourLayer();
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const port = (srv.address() as { port: number }).port;
    await new Promise<void>((r) => srv.close(() => r()));
    // A manual clock: a round runs only when the test fires it.
    const pending: (() => void)[] = [];
    const clock: TransactionTimers = {
      setTimeout: (cb) => {
        pending.push(cb);
        return cb;
      },
      clearTimeout: (h) => {
        const i = pending.indexOf(h as () => void);
        if (i >= 0) pending.splice(i, 1);
      },
    };
    let rounds = 0;
    const warnings: string[] = [];
    const p = new OptionsPinger({
      layer,
      clock,
      failuresBeforeDown: 3,
      targets: () => {
        rounds++;
        return [target('refused', port, 'tcp')];
      },
      onStatus: () => {
        throw new Error('listener bug'); // logged, never thrown into the pinger
      },
      logger: { info: () => {}, warn: (_o, msg) => warnings.push(msg) },
    });
    cleanups.push(() => p.close());
    p.start();
    expect(rounds).toBe(1);
    const fire = async () => {
      expect(pending).toHaveLength(1);
      pending.shift()!();
      await delay(100); // the connect is refused, the transaction reports a transport error
    };
    await delay(100);
    expect(p.status('refused')).toBeUndefined(); // 1 failure
    await fire();
    expect(p.status('refused')).toBeUndefined(); // 2 failures
    await fire();
    expect(p.status('refused')).toBe('down'); // 3
    expect(rounds).toBe(3);
    expect(warnings.some((w) => w.includes('host down'))).toBe(true);
    expect(warnings.some((w) => w.includes('onStatus threw'))).toBe(true);
    p.close();
    p.close();
    expect(p.closed).toBe(true);
    expect(pending).toHaveLength(0);
    expect(p.status('refused')).toBeUndefined();
  });

  it('rejects bad settings', async () => {
    const layer = await ourLayer();
    expect(() => new OptionsPinger({ layer, targets: () => [], intervalMs: 0 })).toThrow(RangeError);
    expect(() => new OptionsPinger({ layer, targets: () => [], failuresBeforeDown: 0 })).toThrow(RangeError);
    expect(() => new OptionsPinger({ layer, targets: () => [], from: 'not a uri <' })).toThrow(TypeError);
  });
});
