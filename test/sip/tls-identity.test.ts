/**
 * RFC 5922 7.1/7.2 matching (src/sip/transport/tls-identity.ts) on certificates as node:tls
 * reports them. The real-socket cases (SRV domain vs target name, failover) are in
 * test/interop/dns-sips-identity.test.ts.
 */
import type { PeerCertificate } from 'node:tls';
import { describe, expect, it } from 'vitest';
import { certificateIdentities, checkSipServerIdentity, matchesSipDomain } from '../../src/sip/transport/tls-identity.ts';

const cert = (san: string | undefined, cn?: string): PeerCertificate => ({ subjectaltname: san, subject: cn === undefined ? {} : { CN: cn } }) as unknown as PeerCertificate;
const ids = (san: string | undefined, cn?: string) => certificateIdentities(cert(san, cn));

describe('RFC 5922 SIP domain identity', () => {
  it('a DNS SAN or a sip: URI SAN equal to the domain matches, case-insensitively', () => {
    expect(matchesSipDomain(ids('DNS:Carrier.Example.com'), 'carrier.example.com')).toBe(true);
    expect(matchesSipDomain(ids('URI:sip:carrier.example.com'), 'carrier.example.com')).toBe(true);
    expect(matchesSipDomain(ids('DNS:other.example, URI:sip:carrier.example.com'), 'carrier.example.com')).toBe(true);
  });

  it('wildcards never match (7.2), nor a sip: URI with a user part, nor another name', () => {
    expect(matchesSipDomain(ids('DNS:*.example.com'), 'carrier.example.com')).toBe(false);
    expect(matchesSipDomain(ids('DNS:*.example.com'), '*.example.com')).toBe(false);
    expect(matchesSipDomain(ids('URI:sip:alice@carrier.example.com'), 'carrier.example.com')).toBe(false);
    expect(matchesSipDomain(ids('DNS:sbc1.carrier.example.com'), 'carrier.example.com')).toBe(false);
  });

  it('CN counts only without a DNS or sip: URI SAN (7.1)', () => {
    expect(matchesSipDomain(ids(undefined, 'carrier.example.com'), 'carrier.example.com')).toBe(true);
    expect(matchesSipDomain(ids('IP Address:127.0.0.1', 'carrier.example.com'), 'carrier.example.com')).toBe(true);
    expect(matchesSipDomain(ids('DNS:other.example', 'carrier.example.com'), 'carrier.example.com')).toBe(false);
    expect(matchesSipDomain(ids(undefined, '*.example.com'), 'carrier.example.com')).toBe(false);
  });

  it('a mismatch is an Error naming the domain and what the certificate presents', () => {
    const err = checkSipServerIdentity('carrier.example.com', cert('DNS:*.example.com, IP Address:10.0.0.1', 'x'));
    expect(err?.message).toMatch(/SIP domain carrier\.example\.com.*presents DNS:\*\.example\.com$/);
    expect(checkSipServerIdentity('carrier.example.com', cert('DNS:carrier.example.com'))).toBeUndefined();
  });

  it('an IP literal keeps node:tls own check (IP SANs)', () => {
    expect(checkSipServerIdentity('127.0.0.1', cert('IP Address:127.0.0.1'))).toBeUndefined();
    expect(checkSipServerIdentity('127.0.0.1', cert('DNS:localhost'))).toBeInstanceOf(Error);
  });
});
