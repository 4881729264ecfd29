/**
 * RFC 5922 "Domain Certificates in SIP", section 7: does a TLS server's certificate identify the
 * SIP domain we meant to reach?
 *
 *   - subjectAltName entries of type URI `sip:<domain>` (no user part) or DNS `<domain>` match,
 *     compared case-insensitively (7.1);
 *   - the subject's CN is looked at only when the certificate has no such subjectAltName (7.1);
 *   - wildcards (`*.example.com`) never match a SIP domain (7.2: "Proxies and registrars MUST NOT
 *     accept certificates with wildcard identities"), unlike HTTPS (RFC 6125), which is why
 *     node:tls's own checkServerIdentity is not used for names;
 *   - the domain is the one we looked up (the host of the Request-URI / outbound_host), not the
 *     SRV target the address came from (7.2); the IP we connected to plays no part.
 *
 * An IP literal destination (no domain) keeps node:tls's check (the certificate's IP SANs).
 */
import { checkServerIdentity as nodeCheck, type PeerCertificate } from 'node:tls';
import { isIP } from 'node:net';

export interface CertificateIdentities {
  dns: string[];
  uris: string[];
  cn: string | undefined;
}

/** The identities a certificate presents, as node:tls reports them. */
export function certificateIdentities(cert: PeerCertificate): CertificateIdentities {
  const dns: string[] = [];
  const uris: string[] = [];
  // node:tls renders subjectaltname as 'DNS:a, URI:sip:b, IP Address:1.2.3.4' (entries holding a
  // comma or quote come JSON-quoted: 'URI:"sip:a,b"').
  for (const raw of (cert.subjectaltname ?? '').split(/,\s*/)) {
    const m = /^(DNS|URI):(.*)$/.exec(raw.trim());
    if (!m) continue;
    let v = m[2]!;
    if (v.startsWith('"')) {
      try {
        v = JSON.parse(v) as string;
      } catch {
        continue;
      }
    }
    (m[1] === 'DNS' ? dns : uris).push(v);
  }
  const cnRaw = cert.subject?.CN as string | string[] | undefined;
  const cn = Array.isArray(cnRaw) ? cnRaw[cnRaw.length - 1] : cnRaw;
  return { dns, uris, cn };
}

/** 'DNS:a, URI:sip:b' or 'CN=c' or 'nothing', for a log line (names only; no key material). */
export function describeIdentities(id: CertificateIdentities): string {
  const san = [...id.dns.map((d) => `DNS:${d}`), ...id.uris.map((u) => `URI:${u}`)];
  if (san.length > 0) return san.join(', ');
  return id.cn !== undefined ? `CN=${id.cn}` : 'no subjectAltName and no CN';
}

const norm = (s: string): string => s.toLowerCase().replace(/\.$/, '');

/** True when the identities name `domain` per RFC 5922 7.1/7.2 (no wildcards). */
export function matchesSipDomain(id: CertificateIdentities, domain: string): boolean {
  const d = norm(domain);
  const sipUris = id.uris.filter((u) => /^sips?:/i.test(u));
  if (id.dns.length > 0 || sipUris.length > 0) {
    // A sip: URI SAN with a user part or parameters names a user, not the domain (7.1).
    if (sipUris.some((u) => /^sip:([^@;?]+)$/i.test(u) && norm(u.slice(4)) === d)) return true;
    return id.dns.some((n) => !n.includes('*') && norm(n) === d);
  }
  return id.cn !== undefined && !id.cn.includes('*') && norm(id.cn) === d;
}

/**
 * A checkServerIdentity for tls.connect: RFC 5922 for a domain name, node's own check for an IP
 * literal. Returns an Error (the handshake is then refused) whose message names the domain and
 * what the certificate presented.
 */
export function checkSipServerIdentity(domain: string, cert: PeerCertificate): Error | undefined {
  if (isIP(domain) !== 0) return nodeCheck(domain, cert);
  const id = certificateIdentities(cert);
  if (matchesSipDomain(id, domain)) return undefined;
  const err = new Error(`certificate does not identify SIP domain ${domain} (RFC 5922: no wildcards, SAN before CN); it presents ${describeIdentities(id)}`) as Error & { code: string };
  err.code = 'ERR_SIP_TLS_CERT_DOMAIN';
  return err;
}
