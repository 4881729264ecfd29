/**
 * SipDnsResolver (src/sip/dns/resolver.ts) against dnsmasq on loopback: which records RFC 3263
 * asks for in each case, read from dnsmasq's own query log (--log-queries), and what it returns.
 *
 *   name:port                 -> A/AAAA only (no NAPTR, no SRV)
 *   IP literal                -> nothing asked
 *   name;transport=tcp        -> _sip._tcp SRV only (no NAPTR)
 *   TLS trunk, no transport   -> NAPTR, only SIPS+D2T taken; no NAPTR -> _sips._tcp only
 *   SRV priorities/weights    -> ascending priority; weights decide within one (pinned draw)
 *   second resolution         -> answered from the cache (no new query)
 *   unsupported transport     -> its NAPTR service skipped
 *   DNS server gone           -> expired answers served (serve-stale), a new name fails clearly
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SipDnsResolver, type ResolveRequest } from '../../src/sip/dns/index.ts';
import { dnsmasqAvailable, startDnsmasq, type Dnsmasq } from './dnsmasq.ts';

const available = dnsmasqAvailable();
const D = 'resolver.test';

describe.skipIf(available.skip)(`RFC 3263 resolution order against dnsmasq${available.ok ? '' : `: skipped, ${available.reason}`}`, () => {
  let dns: Dnsmasq;

  /** Queries dnsmasq logged since `from` (log length), as "TYPE name". */
  function queries(from: number): string[] {
    return [...dns.log().slice(from).matchAll(/query\[(\w+)\] (\S+) from/g)].map((m) => `${m[1]} ${m[2]}`);
  }

  /**
   * dnsmasq writes its query log through a pipe, so a line can arrive after the answer did (seen on
   * a loaded CI machine: the AAAA line of one test landed in the next test's window). Waits until
   * the log has been still for 150 ms, then gives its length: a window's start and end.
   */
  async function settledLog(): Promise<number> {
    const deadline = Date.now() + 3000;
    let seen = dns.log().length;
    for (;;) {
      await new Promise((res) => setTimeout(res, 150));
      const now = dns.log().length;
      if (now === seen || Date.now() > deadline) return now;
      seen = now;
    }
  }

  const base = (host: string, extra: Partial<ResolveRequest> = {}): ResolveRequest => ({ host, transport: 'udp', transportExplicit: false, supported: ['udp', 'tcp', 'tls'], ...extra });

  beforeAll(async () => {
    dns = await startDnsmasq({
      local: [D],
      hosts: [
        [`a.${D}`, '127.0.1.1'],
        [`b.${D}`, '127.0.1.2'],
        [`c.${D}`, '127.0.1.3'],
        [`both.${D}`, '127.0.1.9'],
        [`both.${D}`, '::1'],
      ],
      srv: [
        { name: `_sip._udp.prio.${D}`, target: `c.${D}`, port: 5003, priority: 30, weight: 100 },
        { name: `_sip._udp.prio.${D}`, target: `a.${D}`, port: 5001, priority: 10, weight: 10 },
        { name: `_sip._udp.prio.${D}`, target: `b.${D}`, port: 5002, priority: 10, weight: 90 },
        { name: `_sip._tcp.explicit.${D}`, target: `a.${D}`, port: 5010, priority: 10, weight: 10 },
        { name: `_sip._udp.explicit.${D}`, target: `b.${D}`, port: 5011, priority: 10, weight: 10 },
        { name: `_sips._tcp.secure.${D}`, target: `a.${D}`, port: 5061, priority: 10, weight: 10 },
        { name: `_sip._udp.secure.${D}`, target: `b.${D}`, port: 5060, priority: 10, weight: 10 },
        { name: `_sips._tcp.naptrtls.${D}`, target: `c.${D}`, port: 5071, priority: 10, weight: 10 },
        { name: `_sip._udp.naptrtls.${D}`, target: `b.${D}`, port: 5070, priority: 10, weight: 10 },
      ],
      naptr: [
        { name: `naptrtls.${D}`, order: 10, preference: 10, flags: 's', service: 'SIP+D2U', replacement: `_sip._udp.naptrtls.${D}` },
        { name: `naptrtls.${D}`, order: 20, preference: 10, flags: 's', service: 'SIPS+D2T', replacement: `_sips._tcp.naptrtls.${D}` },
      ],
    });
  }, 20_000);

  afterAll(async () => {
    await dns?.stop();
  });

  it('a name with a port: A and AAAA only, every address with that port', async () => {
    const r = new SipDnsResolver({ servers: [dns.server] });
    const from = await settledLog();
    const out = await r.resolve(base(`both.${D}`, { port: 5080 }));
    expect(out.map((t) => t.destination)).toEqual([
      { protocol: 'udp', address: '127.0.1.9', port: 5080 },
      { protocol: 'udp', address: '::1', port: 5080 },
    ]);
    await settledLog();
    expect(queries(from).sort()).toEqual([`A both.${D}`, `AAAA both.${D}`]);
  });

  it('an IP literal: nothing asked', async () => {
    const r = new SipDnsResolver({ servers: [dns.server] });
    const from = await settledLog();
    expect((await r.resolve(base('[2001:db8::5]', { transport: 'tcp' })))[0]!.destination).toEqual({ protocol: 'tcp', address: '2001:db8::5', port: 5060 });
    await settledLog();
    expect(queries(from)).toEqual([]);
  });

  it(';transport=tcp: only the _sip._tcp SRV, no NAPTR', async () => {
    const r = new SipDnsResolver({ servers: [dns.server] });
    const from = await settledLog();
    const out = await r.resolve(base(`explicit.${D}`, { transport: 'tcp', transportExplicit: true }));
    expect(out.map((t) => t.destination)).toEqual([{ protocol: 'tcp', address: '127.0.1.1', port: 5010 }]);
    await settledLog();
    expect(queries(from).filter((q) => !q.startsWith('A'))).toEqual([`SRV _sip._tcp.explicit.${D}`]);
  });

  it('a TLS trunk: only SIPS (the NAPTR SIP+D2U record is skipped; without NAPTR only _sips._tcp is asked)', async () => {
    const r = new SipDnsResolver({ servers: [dns.server] });
    const viaNaptr = await r.resolve(base(`naptrtls.${D}`, { transport: 'tls' }));
    // RFC 5922 7.2: the certificate must name the domain looked up, not the NAPTR/SRV target.
    expect(viaNaptr.map((t) => [t.via, t.destination])).toEqual([['naptr', { protocol: 'tls', address: '127.0.1.3', port: 5071, tlsName: `naptrtls.${D}` }]]);
    const from = await settledLog();
    const viaSrv = await r.resolve(base(`secure.${D}`, { transport: 'tls' }));
    expect(viaSrv.map((t) => t.destination)).toEqual([{ protocol: 'tls', address: '127.0.1.1', port: 5061, tlsName: `secure.${D}` }]);
    await settledLog();
    expect(queries(from).filter((q) => q.startsWith('SRV'))).toEqual([`SRV _sips._tcp.secure.${D}`]);
  });

  it('a plain trunk, NAPTR in order: SIP+D2U first, then SIPS+D2T; without TLS support the SIPS record is skipped', async () => {
    const r = new SipDnsResolver({ servers: [dns.server] });
    const all = await r.resolve(base(`naptrtls.${D}`));
    expect(all.map((t) => `${t.destination.protocol}:${t.destination.port}`)).toEqual(['udp:5070', 'tls:5071']);
    const noTls = await r.resolve(base(`naptrtls.${D}`, { supported: ['udp', 'tcp'] }));
    expect(noTls.map((t) => `${t.destination.protocol}:${t.destination.port}`)).toEqual(['udp:5070']);
  });

  it('SRV: ascending priority, weights within one priority (the draw pinned), then answered from the cache', async () => {
    const low = new SipDnsResolver({ servers: [dns.server], random: () => 0.05 });
    const high = new SipDnsResolver({ servers: [dns.server], random: () => 0.5 });
    // draw floor(r * 101): 5 reaches a (weight 10) first; 50 passes a's 10 and reaches b (10 + 90).
    expect((await low.resolve(base(`prio.${D}`))).map((t) => t.destination.port)).toEqual([5001, 5002, 5003]);
    expect((await high.resolve(base(`prio.${D}`))).map((t) => t.destination.port)).toEqual([5002, 5001, 5003]);
    const from = await settledLog();
    await high.resolve(base(`prio.${D}`));
    await settledLog();
    expect(queries(from)).toEqual([]);
  });

  it('addresses of a family we cannot send from are left out; none left is a clear error', async () => {
    const r = new SipDnsResolver({ servers: [dns.server] });
    const v4 = await r.resolve(base(`both.${D}`, { port: 5080, usable: (e) => !e.address.includes(':') }));
    expect(v4.map((t) => t.destination.address)).toEqual(['127.0.1.9']);
    await expect(r.resolve(base(`both.${D}`, { port: 5080, usable: () => false }))).rejects.toThrow(/cannot resolve both\.resolver\.test: no address we can send to/);
    await expect(r.resolve(base(`missing.${D}`))).rejects.toThrow(/cannot resolve missing\.resolver\.test: no NAPTR\/SRV target and no A\/AAAA record/);
  });

  // Last: it stops the DNS server.
  it('the DNS server gone: expired NAPTR/SRV answers are served (serve-stale), a name never resolved fails naming the server', async () => {
    const r = new SipDnsResolver({ servers: [dns.server], cacheSecs: 0, timeoutMs: 300, tries: 1, random: () => 0.05 });
    const before = await r.resolve(base(`prio.${D}`));
    await dns.stop();
    const after = await r.resolve(base(`prio.${D}`));
    expect(after.map((t) => t.destination)).toEqual(before.map((t) => t.destination));
    await expect(r.resolve(base(`other.${D}`))).rejects.toThrow(new RegExp(`cannot resolve other\\.resolver\\.test: the DNS server \\(${dns.server.replace(/\./g, '\\.')}\\) did not answer`));
  });
});
