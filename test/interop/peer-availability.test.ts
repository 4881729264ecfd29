/**
 * The decision every real-peer helper makes when its peer is missing (SIPp, baresip, Kamailio, the
 * Kamailio dispatcher front, dnsmasq, openssl and chromium): skip on a developer's machine, fail in CI with a message naming
 * the Debian package. Run in a child process whose environment points every binary at a path that
 * does not exist and whose PATH holds nothing, with CI set and unset.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CHILD = fileURLToPath(new URL('./peer-availability-child.ts', import.meta.url));
const emptyDir = mkdtempSync(join(tmpdir(), 'callbridge-no-peers-'));
afterAll(() => rmSync(emptyDir, { recursive: true, force: true }));

interface PeerReport {
  ok: boolean;
  skip: boolean;
  reason?: string;
  start: string;
}

/** The Debian package each peer's reason must name. */
const PACKAGES: Record<string, string> = { sipp: 'sip-tester', baresip: 'baresip', kamailio: 'kamailio', dispatcher: 'kamailio', dnsmasq: 'dnsmasq', openssl: 'openssl', chromium: 'chromium' };

function helpersWithoutPeers(ci: string | undefined): Record<string, PeerReport> {
  const missing = join(emptyDir, 'missing');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: emptyDir,
    SIPP_BIN: join(missing, 'sipp'),
    BARESIP_BIN: join(missing, 'baresip'),
    KAMAILIO_BIN: join(missing, 'kamailio'),
    KAMCMD_BIN: join(missing, 'kamcmd'),
    DNSMASQ_BIN: join(missing, 'dnsmasq'),
    CHROMIUM_BIN: join(missing, 'chromium'),
  };
  delete env.CI;
  if (ci !== undefined) env.CI = ci;
  const out = execFileSync(process.execPath, ['--import', 'tsx', CHILD], { encoding: 'utf8', cwd: ROOT, env, timeout: 60_000 });
  return JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, PeerReport>;
}

describe('real peers missing', () => {
  it('in CI (CI=true) a missing peer is not skipped: its start fails naming the Debian package', () => {
    const report = helpersWithoutPeers('true');
    expect(Object.keys(report).sort()).toEqual(Object.keys(PACKAGES).sort());
    for (const [peer, r] of Object.entries(report)) {
      expect(r.ok, peer).toBe(false);
      expect(r.skip, peer).toBe(false);
      expect(r.reason, peer).toContain(`apt-get install ${PACKAGES[peer]}`);
      expect(r.start, peer).toBe(r.reason);
    }
  });

  it('outside CI a missing peer skips its tests, with the same reason', () => {
    const report = helpersWithoutPeers(undefined);
    for (const [peer, r] of Object.entries(report)) {
      expect(r.ok, peer).toBe(false);
      expect(r.skip, peer).toBe(true);
      expect(r.reason, peer).toContain(`apt-get install ${PACKAGES[peer]}`);
    }
  });
});
