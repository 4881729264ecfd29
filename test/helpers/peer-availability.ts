import { execFileSync } from 'node:child_process';
/**
 * The rule every real-peer helper follows (SIPp, baresip, Kamailio, like PostgreSQL and HAProxy):
 * a peer that is not installed skips its tests on a developer's machine, but fails them in CI
 * (the environment variable CI set), where a silent skip would pass a run that proved nothing.
 * The reason names the Debian package that provides the peer.
 */
export interface PeerAvailability {
  ok: boolean;
  /** Skip the tests: the peer is missing and this is not CI. */
  skip: boolean;
  /** Why the peer cannot run, naming the package to install; set when ok is false. */
  reason?: string;
}

/** A missing (or unusable) peer: skipped outside CI, a failure in CI. */
export function peerMissing(reason: string): { ok: false; skip: boolean; reason: string } {
  return { ok: false, skip: !process.env.CI, reason };
}

/** Throws the peer's reason when it cannot run: the start functions call this first. */
export function requirePeer(availability: PeerAvailability): void {
  if (!availability.ok) throw new Error(availability.reason ?? 'peer not available');
}

/** Whether `openssl` (Debian openssl), which the TLS tests make their certificates with, runs. */
export function opensslAvailable(): PeerAvailability {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return { ok: true, skip: false };
  } catch {
    return peerMissing('openssl not found (apt-get install openssl): the TLS tests make their certificates with it');
  }
}

/** Whether `espeak-ng` (Debian espeak-ng), which the answering-machine tests make their callees' speech with, runs. */
export function espeakAvailable(): PeerAvailability {
  try {
    execFileSync('espeak-ng', ['--version'], { stdio: 'ignore' });
    return { ok: true, skip: false };
  } catch {
    return peerMissing('espeak-ng not found (apt-get install espeak-ng): the answering-machine tests make their speech with it');
  }
}
