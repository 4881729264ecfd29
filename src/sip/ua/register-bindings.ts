/**
 * How one authenticated REGISTER changes the bindings of an address-of-record (RFC 3261 10.3,
 * steps 6 to 8), as a pure function: the bindings before, the request's Contacts and Expires, the
 * limits; out come the bindings after, or the refusal. Nothing here sends or stores anything
 * (registrar.ts does), so the rules can be read against the RFC and tested without sockets.
 *
 *   Contact: *, Expires: 0      every binding goes (400 when Expires is not 0 or other Contacts
 *                               come with it)
 *   Contact: <uri>;expires=N    that binding is added, refreshed (N > 0) or removed (N = 0);
 *                               N is the Contact's expires, else the Expires header, else the
 *                               default; 0 < N < min: 423 with Min-Expires; N > max: max
 *   no Contact                  a query: the bindings as they are
 *
 * Ordering (step 7): a binding written by a REGISTER with the same Call-ID and a CSeq not lower
 * than this one's is newer than this request, so the whole request fails (400, as Kamailio
 * answers it) and nothing changes. A new Call-ID (the PBX restarted) always wins.
 */
import { parseUri, uriEquals, type Uri } from '../message/index.ts';
import type { TransportProtocol } from '../transport/index.ts';

/** One Contact bound to the address-of-record, and the flow it came over. */
export interface RegistrationBinding {
  /** The Contact URI as our serializer writes it (the Request-URI of calls to it). */
  contact: string;
  /** When it expires, ms since the epoch. */
  expiresAt: number;
  callId: string;
  cseq: number;
  /** The transport, source address and port of the REGISTER (where calls to the PBX go). */
  transport: TransportProtocol;
  sourceAddress: string;
  sourcePort: number;
  /** TCP/TLS: the connection the REGISTER came over. */
  connectionId?: string;
  /** The REGISTER that added or last refreshed it, ms since the epoch. */
  updatedAt: number;
}

export interface RegistrarLimits {
  /** Shorter non-zero expiries get 423 Interval Too Brief (RFC 3261 10.3 step 7). */
  minExpiresSecs: number;
  /** Longer ones are shortened to this (the registrar MAY, 10.3 step 7). */
  maxExpiresSecs: number;
  /** When neither the Contact nor an Expires header says (10.2.1.1: 3600 is the usual value). */
  defaultExpiresSecs: number;
  /** Most bindings one address-of-record may hold (one PBX, a few Contacts). */
  maxBindings: number;
}

/** Defaults: the RFC's one hour, a one-minute floor, one hour as the ceiling. */
export const DEFAULT_REGISTRAR_LIMITS: RegistrarLimits = { minExpiresSecs: 60, maxExpiresSecs: 3600, defaultExpiresSecs: 3600, maxBindings: 10 };

/** The longest Contact URI kept (a PBX's is well under 200 characters). */
export const MAX_CONTACT_LENGTH = 512;

export interface RegisterRequest {
  /** "Contact: *". */
  wildcard: boolean;
  /** The Contacts, each with its own expires parameter if it has one. */
  contacts: readonly { uri: Uri; expires: number | undefined }[];
  /** The Expires header, if any. */
  expires: number | undefined;
  callId: string;
  cseq: number;
  flow: Pick<RegistrationBinding, 'transport' | 'sourceAddress' | 'sourcePort' | 'connectionId'>;
  /** ms since the epoch. */
  now: number;
}

export type RegisterOutcome =
  | {
      ok: true;
      /** The bindings after the request, most recent first. */
      bindings: RegistrationBinding[];
      /** Whether anything was added or removed (a refresh only moves expiries). */
      added: number;
      removed: number;
      refreshed: number;
    }
  | {
      ok: false;
      status: 400 | 403 | 423;
      reason: string;
      headers: [string, string][];
      /** One sentence for the log line. */
      why: string;
    };

function refuse(status: 400 | 403 | 423, reason: string, why: string, headers: [string, string][] = []): RegisterOutcome {
  return { ok: false, status, reason, headers, why };
}

/** Seconds left of a binding, rounded up, as the 200's Contact expires parameter says. */
export function remainingSecs(b: RegistrationBinding, now: number): number {
  return Math.max(0, Math.ceil((b.expiresAt - now) / 1000));
}

/** 10.3 step 7: a binding from the same Call-ID with a CSeq not lower than the request's is newer. */
function outOfOrder(b: RegistrationBinding, req: RegisterRequest): boolean {
  return b.callId === req.callId && req.cseq <= b.cseq;
}

/**
 * The bindings after `req` (see the file comment). `current` holds the unexpired bindings of the
 * address-of-record and is not modified.
 */
export function applyRegister(current: readonly RegistrationBinding[], req: RegisterRequest, limits: RegistrarLimits): RegisterOutcome {
  const live = current.filter((b) => b.expiresAt > req.now);
  if (req.wildcard) {
    // 10.3 step 6: "*" only alone and only with Expires: 0.
    if (req.contacts.length > 0 || req.expires !== 0) return refuse(400, 'Invalid Contact *', 'Contact: * needs Expires: 0 and no other Contact (RFC 3261 10.3 step 6)');
    const newer = live.find((b) => outOfOrder(b, req));
    if (newer !== undefined) return refuse(400, 'Invalid CSeq number', `Contact: * with CSeq ${req.cseq} is not newer than the REGISTER (same Call-ID, CSeq ${newer.cseq}) that wrote a binding`);
    return { ok: true, bindings: [], added: 0, removed: live.length, refreshed: 0 };
  }

  // Every Contact is checked before anything changes: a request is applied whole or not at all.
  const wanted: { uri: Uri; text: string; secs: number }[] = [];
  for (const c of req.contacts) {
    if (c.uri.kind !== 'sip') return refuse(400, 'Unsupported Contact', `Contact ${c.uri.kind === 'tel' ? 'tel:' : 'absolute'} URI: only sip: and sips: Contacts can be called`);
    const text = c.uri.toString();
    if (text.length > MAX_CONTACT_LENGTH) return refuse(400, 'Contact too long', `a Contact URI is longer than ${MAX_CONTACT_LENGTH} characters`);
    const asked = c.expires ?? req.expires ?? limits.defaultExpiresSecs;
    if (asked > 0 && asked < limits.minExpiresSecs) {
      return refuse(423, 'Interval Too Brief', `expires ${asked} s is below the minimum ${limits.minExpiresSecs} s (sip.register_min_expires_secs)`, [['Min-Expires', String(limits.minExpiresSecs)]]);
    }
    wanted.push({ uri: c.uri, text, secs: Math.min(asked, limits.maxExpiresSecs) });
  }

  const after = live.map((b) => ({ ...b }));
  let added = 0;
  let removed = 0;
  let refreshed = 0;
  for (const w of wanted) {
    const i = after.findIndex((b) => b.contact === w.text || sameUri(b.contact, w.uri));
    const existing = i >= 0 ? after[i] : undefined;
    if (existing !== undefined && outOfOrder(existing, req)) {
      return refuse(400, 'Invalid CSeq number', `CSeq ${req.cseq} is not newer than the REGISTER (same Call-ID, CSeq ${existing.cseq}) that wrote ${w.text} (RFC 3261 10.3 step 7)`);
    }
    if (w.secs === 0) {
      if (existing !== undefined) {
        after.splice(i, 1);
        removed++;
      }
      continue;
    }
    const binding: RegistrationBinding = {
      contact: w.text,
      expiresAt: req.now + w.secs * 1000,
      callId: req.callId,
      cseq: req.cseq,
      ...req.flow,
      updatedAt: req.now,
    };
    if (existing === undefined) {
      after.push(binding);
      added++;
    } else {
      after[i] = binding;
      refreshed++;
    }
  }
  if (after.length > limits.maxBindings) {
    return refuse(403, 'Too Many Contacts', `the REGISTER would leave ${after.length} bindings; one PBX may hold at most ${limits.maxBindings}`);
  }
  after.sort((a, b) => b.updatedAt - a.updatedAt);
  return { ok: true, bindings: after, added, removed, refreshed };
}

/** RFC 3261 19.1.4 comparison of a stored Contact with a new one (the stored text may be older). */
function sameUri(stored: string, uri: Uri): boolean {
  try {
    return uriEquals(parseUri(stored), uri);
  } catch {
    return false;
  }
}
