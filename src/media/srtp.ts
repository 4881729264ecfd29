/**
 * SRTP and SRTCP (RFC 3711) for the two SDES suites of RFC 4568 that telephone trunks use:
 * AES_CM_128_HMAC_SHA1_80 and AES_CM_128_HMAC_SHA1_32 (AES-128 counter mode, HMAC-SHA1 tag of
 * 80 or 32 bits on SRTP; SRTCP's tag is 80 bits for both, RFC 4568 section 6.2). Master key 128
 * bits, master salt 112 bits, key derivation rate 0 (keys derived once), no MKI.
 *
 * Written here on node:crypto rather than taken from npm (docs/decisions.md): werift-rtp's
 * SRTP has no _32 suite and no replay protection, and nothing else on npm is maintained.
 *
 * Cost per packet (docs/media-rtp.md "SRTP"): one ECB update over the counter blocks (a cipher
 * object kept for the session, no createCipheriv per packet), an XOR loop, one HMAC. Protect
 * works in place on the caller's buffer (the tag is appended behind the packet); unprotect
 * decrypts the received datagram in place.
 *
 * A packet that fails is never decoded: unprotect returns a negative code (SRTP_AUTH_FAILED,
 * SRTP_REPLAYED, SRTP_MALFORMED) and the caller counts it. Nothing here logs, and key material
 * is never part of an error message.
 */
import { createCipheriv, createHmac, timingSafeEqual, type Cipher } from 'node:crypto';

export type SrtpSuite = 'AES_CM_128_HMAC_SHA1_80' | 'AES_CM_128_HMAC_SHA1_32';

export const SRTP_SUITES: readonly SrtpSuite[] = ['AES_CM_128_HMAC_SHA1_80', 'AES_CM_128_HMAC_SHA1_32'];

/** Master key (16) followed by master salt (14): the `inline:` key of RFC 4568, decoded. */
export const SRTP_MASTER_LENGTH = 30;
const KEY_LENGTH = 16;
const SALT_LENGTH = 14;
const AUTH_KEY_LENGTH = 20;
/** SRTCP's authentication tag, for both suites (RFC 4568 section 6.2.1/6.2.2). */
const SRTCP_TAG_LENGTH = 10;
/** Replay window (RFC 3711 3.3.2 asks for at least 64). */
export const SRTP_REPLAY_WINDOW = 128;

/** unprotect results below zero: why the packet was dropped. */
export const SRTP_MALFORMED = -1;
export const SRTP_AUTH_FAILED = -2;
export const SRTP_REPLAYED = -3;

export function srtpTagLength(suite: SrtpSuite): number {
  return suite === 'AES_CM_128_HMAC_SHA1_32' ? 4 : 10;
}

export function isSrtpSuite(s: string): s is SrtpSuite {
  return (SRTP_SUITES as readonly string[]).includes(s);
}

/** The keys of one call's SRTP: what we send with (ours) and what we receive with (the peer's). */
export interface SrtpKeys {
  suite: SrtpSuite;
  /** Our master key || salt (30 bytes): protects what we send. */
  sendKey: Uint8Array;
  /** The peer's master key || salt (30 bytes): unprotects what we receive. */
  receiveKey: Uint8Array;
}

/** Two SrtpKeys that name the same contexts (a re-INVITE that kept the keys). */
export function sameSrtpKeys(a: SrtpKeys | undefined, b: SrtpKeys | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.suite === b.suite && Buffer.compare(a.sendKey, b.sendKey) === 0 && Buffer.compare(a.receiveKey, b.receiveKey) === 0;
}

/** One AES-128 block function kept for the session: counter mode is done over it by hand. */
function ecb(key: Uint8Array): Cipher {
  const c = createCipheriv('aes-128-ecb', key, null);
  c.setAutoPadding(false);
  return c;
}

/**
 * RFC 3711 4.3.1 with key_derivation_rate 0: x = label * 2^48 XOR master_salt, the session key
 * is AES-CM(master_key, IV = x * 2^16) truncated to `length` bytes.
 */
export function deriveSrtpKey(masterKey: Uint8Array, masterSalt: Uint8Array, label: number, length: number): Buffer {
  if (masterKey.length !== KEY_LENGTH || masterSalt.length !== SALT_LENGTH) throw new RangeError('SRTP master key must be 16 bytes and master salt 14');
  const blocks = Math.ceil(length / 16);
  const counters = Buffer.alloc(blocks * 16);
  for (let b = 0; b < blocks; b++) {
    const o = b * 16;
    counters.set(masterSalt, o);
    counters[o + 7]! ^= label;
    counters.writeUInt16BE(b, o + 14);
  }
  return ecb(masterKey).update(counters).subarray(0, length);
}

/** Session keys of one direction (RFC 3711 4.3.2 labels 0-2 for SRTP, 3-5 for SRTCP). */
interface SessionKeys {
  cipher: Cipher;
  salt: Buffer;
  authKey: Buffer;
}

function sessionKeys(master: Uint8Array, rtcp: boolean): SessionKeys {
  if (master.length !== SRTP_MASTER_LENGTH) throw new RangeError(`SRTP master key||salt must be ${SRTP_MASTER_LENGTH} bytes`);
  const key = master.subarray(0, KEY_LENGTH);
  const salt = master.subarray(KEY_LENGTH);
  const base = rtcp ? 3 : 0;
  return {
    cipher: ecb(deriveSrtpKey(key, salt, base, KEY_LENGTH)),
    authKey: deriveSrtpKey(key, salt, base + 1, AUTH_KEY_LENGTH),
    salt: deriveSrtpKey(key, salt, base + 2, SALT_LENGTH),
  };
}

/**
 * The AES-CM keystream (RFC 3711 4.1.1) XORed over data[start, end): IV = (salt * 2^16) XOR
 * (SSRC * 2^64) XOR (index * 2^16), block counter in the low 16 bits. `counters` is a scratch
 * buffer reused across packets.
 */
class CounterMode {
  #counters = Buffer.alloc(1504);

  xor(keys: SessionKeys, ssrc: number, indexHigh: number, indexLow: number, data: Uint8Array, start: number, end: number): void {
    const n = end - start;
    if (n <= 0) return;
    const blocks = (n + 15) >> 4;
    if (blocks * 16 > this.#counters.length) this.#counters = Buffer.alloc(blocks * 16);
    const c = this.#counters;
    const salt = keys.salt;
    // The first block, then copies of it with the counter written in.
    for (let i = 0; i < SALT_LENGTH; i++) c[i] = salt[i]!;
    c[4]! ^= ssrc >>> 24;
    c[5]! ^= (ssrc >>> 16) & 0xff;
    c[6]! ^= (ssrc >>> 8) & 0xff;
    c[7]! ^= ssrc & 0xff;
    // The 48-bit index at bits 16..63: indexHigh is its top 16 bits, indexLow its low 32.
    c[8]! ^= (indexHigh >>> 8) & 0xff;
    c[9]! ^= indexHigh & 0xff;
    c[10]! ^= indexLow >>> 24;
    c[11]! ^= (indexLow >>> 16) & 0xff;
    c[12]! ^= (indexLow >>> 8) & 0xff;
    c[13]! ^= indexLow & 0xff;
    c[14] = 0;
    c[15] = 0;
    for (let b = 1; b < blocks; b++) {
      const o = b * 16;
      c.copy(c, o, 0, 14);
      c[o + 14] = b >>> 8;
      c[o + 15] = b & 0xff;
    }
    const ks = keys.cipher.update(c.subarray(0, blocks * 16));
    for (let i = 0; i < n; i++) data[start + i]! ^= ks[i]!;
  }
}

/**
 * The AES-CM keystream of RFC 3711 4.1.1 for one packet, from session keys (RFC 3711 B.2's
 * vector tests this; the sessions use the same code path).
 */
export function aesCmKeystream(sessionKey: Uint8Array, sessionSalt: Uint8Array, ssrc: number, index: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  const keys: SessionKeys = { cipher: ecb(sessionKey), salt: Buffer.from(sessionSalt), authKey: Buffer.alloc(0) };
  new CounterMode().xor(keys, ssrc, Math.floor(index / 2 ** 32), index >>> 0, out, 0, length);
  return out;
}

/** RTP header length (fixed part, CSRCs, extension); -1 when it runs past `length`. */
function rtpHeaderLength(p: Uint8Array, length: number): number {
  if (length < 12) return -1;
  let h = 12 + (p[0]! & 0x0f) * 4;
  if (p[0]! & 0x10) {
    if (h + 4 > length) return -1;
    h += 4 + ((p[h + 2]! << 8) | p[h + 3]!) * 4;
  }
  return h <= length ? h : -1;
}

/** Per-SSRC receive state: s_l and ROC (RFC 3711 3.3.1) and the replay window (3.3.2). */
class ReceiveState {
  /** Highest authenticated index (ROC * 2^16 + SEQ); -1 before the first packet. */
  highest = -1;
  readonly seen = new Float64Array(SRTP_REPLAY_WINDOW).fill(-1);

  /** RFC 3711 Appendix A: the index of SEQ guessed from the highest one seen. */
  estimate(seq: number): number {
    if (this.highest < 0) return seq; // the first packet: ROC 0, s_l = SEQ (3.3.1)
    const roc = Math.floor(this.highest / 0x10000);
    const sl = this.highest % 0x10000;
    let v = roc;
    if (sl < 0x8000) {
      if (seq - sl > 0x8000) v = roc - 1;
    } else if (sl - 0x8000 > seq) v = roc + 1;
    return v < 0 ? -1 : v * 0x10000 + seq;
  }

  isReplay(index: number): boolean {
    if (this.highest < 0 || index > this.highest) return false;
    if (this.highest - index >= SRTP_REPLAY_WINDOW) return true; // too old to tell: dropped
    return this.seen[index % SRTP_REPLAY_WINDOW] === index;
  }

  accept(index: number): void {
    this.seen[index % SRTP_REPLAY_WINDOW] = index;
    if (index > this.highest) this.highest = index;
  }
}

export interface SrtpCounters {
  /** Packets whose authentication tag did not match: dropped, never decoded. */
  authFailed: number;
  /** Packets already received, or older than the replay window: dropped. */
  replayed: number;
  /** Shorter than header + tag, or an SRTCP packet without the E flag/index. */
  malformed: number;
}

/**
 * The SRTP/SRTCP state of one RTP session: our sending streams (keyed by SSRC, with ROC and
 * SRTCP index) and the peer's receiving streams (ROC, replay windows). A new SDES key means a
 * new SrtpSession (RFC 4568 7.1.4: new crypto = new context), never a reset of this one: the
 * same key with a ROC back at 0 would reuse keystream.
 */
export class SrtpSession {
  readonly suite: SrtpSuite;
  readonly tagLength: number;
  readonly counters: SrtpCounters = { authFailed: 0, replayed: 0, malformed: 0 };

  readonly #sendRtp: SessionKeys;
  readonly #sendRtcp: SessionKeys;
  readonly #recvRtp: SessionKeys;
  readonly #recvRtcp: SessionKeys;
  readonly #ctr = new CounterMode();
  /** Our streams: last sequence number and ROC per SSRC. */
  readonly #sent = new Map<number, { seq: number; roc: number }>();
  readonly #received = new Map<number, ReceiveState>();
  readonly #receivedRtcp = new Map<number, ReceiveState>();
  /** SRTCP index of our next report per SSRC (31 bits). */
  readonly #rtcpIndex = new Map<number, number>();
  readonly #trailer = Buffer.alloc(4);
  readonly #sendKey: Buffer;
  readonly #receiveKey: Buffer;

  /** @throws RangeError when a key is not 30 bytes. */
  constructor(keys: SrtpKeys) {
    this.suite = keys.suite;
    this.#sendKey = Buffer.from(keys.sendKey);
    this.#receiveKey = Buffer.from(keys.receiveKey);
    this.tagLength = srtpTagLength(keys.suite);
    this.#sendRtp = sessionKeys(keys.sendKey, false);
    this.#sendRtcp = sessionKeys(keys.sendKey, true);
    this.#recvRtp = sessionKeys(keys.receiveKey, false);
    this.#recvRtcp = sessionKeys(keys.receiveKey, true);
  }

  /**
   * Takes over the stream state of the session these keys replace, for each direction whose
   * key and suite did not change (a re-INVITE re-keyed only the other one): a key must go on
   * with its ROC, SRTCP index and replay window. A fresh context for an unchanged key would
   * restart the ROC at 0 and repeat keystream already used (RFC 3711 9.1), and a receiver
   * would guess the peer's index wrong after a wrap.
   */
  continueFrom(previous: SrtpSession): void {
    if (previous.suite !== this.suite) return;
    if (previous.#sendKey.equals(this.#sendKey)) {
      for (const [ssrc, s] of previous.#sent) this.#sent.set(ssrc, { ...s });
      for (const [ssrc, i] of previous.#rtcpIndex) this.#rtcpIndex.set(ssrc, i);
    }
    if (previous.#receiveKey.equals(this.#receiveKey)) {
      for (const [ssrc, st] of previous.#received) this.#received.set(ssrc, st);
      for (const [ssrc, st] of previous.#receivedRtcp) this.#receivedRtcp.set(ssrc, st);
    }
  }

  /**
   * Encrypts the RTP packet buf[0, length) in place and writes the tag behind it. buf must have
   * tagLength bytes of room after the packet. Returns the SRTP packet's length.
   * @throws RangeError on a packet with a header beyond its length or no room for the tag.
   */
  protectRtp(buf: Uint8Array, length: number): number {
    const h = rtpHeaderLength(buf, length);
    if (h < 0 || length + this.tagLength > buf.length) throw new RangeError('RTP packet too short or no room for the SRTP tag');
    const seq = (buf[2]! << 8) | buf[3]!;
    const ssrc = readU32(buf, 8);
    let s = this.#sent.get(ssrc);
    if (s === undefined) {
      s = { seq, roc: 0 };
      this.#sent.set(ssrc, s);
    } else {
      // The sender's ROC counts wraps of its own sequence (RFC 3711 3.3.1); a step back
      // of more than half the space is a wrap, a small one a retransmission in this ROC.
      if (seq < s.seq && s.seq - seq > 0x8000) s.roc = (s.roc + 1) >>> 0;
      s.seq = seq;
    }
    const roc = s.roc;
    this.#ctr.xor(this.#sendRtp, ssrc, roc >>> 16, (((roc & 0xffff) << 16) | seq) >>> 0, buf, h, length);
    this.#writeRoc(roc);
    const tag = this.#rtpTag(this.#sendRtp, buf, length);
    for (let i = 0; i < this.tagLength; i++) buf[length + i] = tag[i]!;
    return length + this.tagLength;
  }

  /**
   * Checks and decrypts the SRTP packet buf[0, length) in place. Returns the RTP packet's
   * length (the tag stripped), or SRTP_MALFORMED / SRTP_AUTH_FAILED / SRTP_REPLAYED (counted).
   */
  unprotectRtp(buf: Uint8Array, length: number): number {
    const end = length - this.tagLength;
    const h = rtpHeaderLength(buf, end);
    if (h < 0) return this.#count(SRTP_MALFORMED);
    const seq = (buf[2]! << 8) | buf[3]!;
    const ssrc = readU32(buf, 8);
    let state = this.#received.get(ssrc);
    const fresh = state === undefined;
    state ??= new ReceiveState();
    const index = state.estimate(seq);
    if (index < 0 || state.isReplay(index)) return this.#count(SRTP_REPLAYED);
    const roc = Math.floor(index / 0x10000);
    this.#writeRoc(roc);
    const tag = this.#rtpTag(this.#recvRtp, buf, end);
    if (!timingSafeEqual(tag.subarray(0, this.tagLength), buf.subarray(end, length))) return this.#count(SRTP_AUTH_FAILED);
    this.#ctr.xor(this.#recvRtp, ssrc, roc >>> 16, (((roc & 0xffff) << 16) | seq) >>> 0, buf, h, end);
    // Only an authenticated packet moves ROC, s_l and the window (RFC 3711 3.3.1).
    state.accept(index);
    if (fresh) {
      // Bound the map: a peer has one SSRC at a time (a restart replaces it).
      if (this.#received.size >= 8) this.#received.clear();
      this.#received.set(ssrc, state);
    }
    return end;
  }

  /**
   * Protects one RTCP compound packet (RFC 3711 3.4): everything after the first 8 bytes
   * encrypted, then E flag || SRTCP index, then the 80-bit tag. Returns a new buffer.
   * @throws RangeError on a packet shorter than 8 bytes.
   */
  protectRtcp(packet: Uint8Array): Buffer {
    if (packet.length < 8) throw new RangeError('RTCP packet shorter than 8 bytes');
    const ssrc = readU32(packet, 4);
    const index = this.#rtcpIndex.get(ssrc) ?? 0;
    this.#rtcpIndex.set(ssrc, (index + 1) & 0x7fffffff);
    const out = Buffer.alloc(packet.length + 4 + SRTCP_TAG_LENGTH);
    out.set(packet, 0);
    this.#ctr.xor(this.#sendRtcp, ssrc, 0, index, out, 8, packet.length);
    out.writeUInt32BE((0x80000000 | index) >>> 0, packet.length);
    const tag = createHmac('sha1', this.#sendRtcp.authKey).update(out.subarray(0, packet.length + 4)).digest();
    tag.copy(out, packet.length + 4, 0, SRTCP_TAG_LENGTH);
    return out;
  }

  /**
   * Checks and decrypts one SRTCP packet in place. Returns the RTCP compound's length, or a
   * negative code as unprotectRtp.
   */
  unprotectRtcp(buf: Uint8Array, length: number): number {
    const end = length - SRTCP_TAG_LENGTH - 4;
    if (end < 8) return this.#count(SRTP_MALFORMED);
    const word = readU32(buf, end);
    const encrypted = (word & 0x80000000) !== 0;
    const index = word & 0x7fffffff;
    const ssrc = readU32(buf, 4);
    let state = this.#receivedRtcp.get(ssrc);
    const fresh = state === undefined;
    state ??= new ReceiveState();
    if (state.isReplay(index)) return this.#count(SRTP_REPLAYED);
    const tag = createHmac('sha1', this.#recvRtcp.authKey).update(buf.subarray(0, end + 4)).digest();
    if (!timingSafeEqual(tag.subarray(0, SRTCP_TAG_LENGTH), buf.subarray(end + 4, length))) return this.#count(SRTP_AUTH_FAILED);
    if (encrypted) this.#ctr.xor(this.#recvRtcp, ssrc, 0, index, buf, 8, end);
    state.accept(index);
    if (fresh) {
      if (this.#receivedRtcp.size >= 8) this.#receivedRtcp.clear();
      this.#receivedRtcp.set(ssrc, state);
    }
    return end;
  }

  /** HMAC-SHA1 over the packet and the ROC (RFC 3711 4.2: M = packet || ROC). */
  #rtpTag(keys: SessionKeys, buf: Uint8Array, length: number): Buffer {
    return createHmac('sha1', keys.authKey).update(buf.subarray(0, length)).update(this.#trailer).digest();
  }

  #writeRoc(roc: number): void {
    this.#trailer.writeUInt32BE(roc >>> 0, 0);
  }

  #count(code: number): number {
    if (code === SRTP_AUTH_FAILED) this.counters.authFailed++;
    else if (code === SRTP_REPLAYED) this.counters.replayed++;
    else this.counters.malformed++;
    return code;
  }
}

function readU32(b: Uint8Array, o: number): number {
  return ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
}

/**
 * Marks an object that holds SRTP keys so that JSON (pino) and util.inspect print no key: a
 * non-enumerable toJSON and inspect hook, which structured clone (postMessage to a media
 * worker) skips, so the object still crosses threads as plain data.
 */
export function hideSrtpKeys<T extends { suite: SrtpSuite }>(o: T): T {
  const shown = (): object => ({ suite: o.suite, keys: '[redacted]' });
  Object.defineProperty(o, 'toJSON', { value: shown, enumerable: false });
  Object.defineProperty(o, Symbol.for('nodejs.util.inspect.custom'), { value: shown, enumerable: false });
  return o;
}
