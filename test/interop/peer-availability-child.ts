/**
 * Child process of peer-availability.test.ts: reports what each real-peer helper decides in this
 * process's environment (the test points the helpers' binaries at paths that do not exist and sets
 * or clears CI), and what starting each peer does then. Prints one JSON line.
 *
 *   node --import tsx peer-availability-child.ts
 */
import { baresipAvailable, startBaresip } from './baresip/baresip.ts';
import { kamailioAvailable, startKamailio } from './kamailio.ts';
import { sippAvailable, startSipp } from './sipp.ts';
import { dnsmasqAvailable, startDnsmasq } from './dnsmasq.ts';
import { opensslAvailable } from '../helpers/peer-availability.ts';
import { chromiumAvailable, launchBrowser } from '../helpers/browser.ts';
import { dispatcherFrontAvailable, startDispatcherFront } from '../cluster/dispatcher-kamailio.ts';

/** The error a start throws, or 'started' (which, with the binaries missing, would be a bug). */
async function startError(start: () => Promise<unknown>): Promise<string> {
  try {
    await start();
    return 'started';
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

const report = {
  sipp: { ...sippAvailable(), start: await startError(() => startSipp({ scenario: 'uas-basic' })) },
  baresip: { ...baresipAvailable(), start: await startError(() => startBaresip({ account: { user: 'u', domain: '127.0.0.1:5060' } })) },
  kamailio: {
    ...kamailioAvailable(),
    start: await startError(() => startKamailio({ user: 'u', password: 'p', minExpires: 60, maxExpires: 3600 })),
  },
  dispatcher: { ...dispatcherFrontAvailable(), start: await startError(() => startDispatcherFront({ nodes: [], pingIntervalSecs: 0, frTimerMs: 1000 })) },
  dnsmasq: { ...dnsmasqAvailable(), start: await startError(() => startDnsmasq({ local: ['example.test'] })) },
  // openssl has no start of its own: the TLS tests call it, and without it that call fails.
  openssl: { ...opensslAvailable(), start: opensslAvailable().reason ?? 'started' },
  chromium: { ...chromiumAvailable(), start: await startError(() => launchBrowser()) },
};
process.stdout.write(`${JSON.stringify(report)}\n`);
