/**
 * Where an RTP session sends, and which sources it accepts: symmetric RTP (RFC 4961, "comedia").
 *
 * We send to the address and port the peer's RTP actually comes from, which is the only address
 * that works through the peer's NAT. Until the first packet arrives we use the SDP address.
 * Once latched, packets from another source are refused unless the latched source has been
 * silent for relatchAfterMs: a media path that moved (NAT rebinding, a new media server after a
 * transfer) then takes over, while a stray or spoofed stream cannot steal a live call.
 *
 * RTCP latches the same way to wherever the peer's RTCP comes from, without the silence rule
 * (RTCP only carries reports). With symmetric off, every source is accepted and we always send
 * to the SDP addresses.
 */

export interface RemoteAddress {
  address: string;
  port: number;
}

/** Where to send, as the SDP says (c= address, m= port, optional a=rtcp port, RFC 3605). */
export interface SdpRemote {
  address: string;
  port: number;
  /** Default port + 1. */
  rtcpPort?: number;
}

export interface SymmetricLatchOptions {
  /** Latch at all (RFC 4961). */
  symmetric: boolean;
  /** A latched source silent this long may be replaced by a new one. */
  relatchAfterMs: number;
  /** RTP now goes to this address (the first packet latched it, or the source moved). */
  onLatch: (remote: RemoteAddress) => void;
}

export function validPort(port: number): boolean {
  return Number.isInteger(port) && port > 0 && port < 65536;
}

export class SymmetricLatch {
  readonly #symmetric: boolean;
  readonly #relatchAfterMs: number;
  readonly #onLatch: (remote: RemoteAddress) => void;
  #sdpRtp: RemoteAddress | undefined;
  #sdpRtcp: RemoteAddress | undefined;
  #latchedRtp: RemoteAddress | undefined;
  #latchedRtcp: RemoteAddress | undefined;
  #lastFromLatchedMs = -Infinity;

  constructor(options: SymmetricLatchOptions) {
    this.#symmetric = options.symmetric;
    this.#relatchAfterMs = options.relatchAfterMs;
    this.#onLatch = options.onLatch;
  }

  /**
   * Sets the peer's SDP address (answer, or a re-INVITE). A changed address forgets the latch,
   * so the next packet from the peer latches again.
   * @throws RangeError on a bad port or an empty address.
   */
  setSdp(remote: SdpRemote): void {
    const rtcpPort = remote.rtcpPort ?? remote.port + 1;
    if (!validPort(remote.port) || !validPort(rtcpPort) || remote.address.length === 0) {
      throw new RangeError(`remote ${remote.address}:${remote.port} (rtcp ${rtcpPort}) is invalid`);
    }
    const old = this.#sdpRtp;
    this.#sdpRtp = { address: remote.address, port: remote.port };
    this.#sdpRtcp = { address: remote.address, port: rtcpPort };
    if (!old || old.address !== remote.address || old.port !== remote.port) {
      this.#latchedRtp = undefined;
      this.#latchedRtcp = undefined;
      this.#lastFromLatchedMs = -Infinity;
    }
  }

  /** Where RTP goes now: the latched source, else the SDP address; undefined when unknown. */
  get rtpDestination(): RemoteAddress | undefined {
    return this.#latchedRtp ?? this.#sdpRtp;
  }

  /** rtpDestination, and whether it was latched (a copy, for the session's `remote`). */
  get remote(): (RemoteAddress & { latched: boolean }) | undefined {
    const dest = this.#latchedRtp ?? this.#sdpRtp;
    return dest && { address: dest.address, port: dest.port, latched: dest === this.#latchedRtp };
  }

  /** The peer's RTCP source once it sent any, else the SDP's RTCP port, else latched RTP + 1. */
  get rtcpDestination(): RemoteAddress | undefined {
    if (this.#latchedRtcp) return this.#latchedRtcp;
    if (this.#sdpRtcp) return this.#sdpRtcp;
    const rtp = this.#latchedRtp;
    return rtp && validPort(rtp.port + 1) ? { address: rtp.address, port: rtp.port + 1 } : undefined;
  }

  /**
   * An RTP datagram arrived from `from`: true when that source is (or now becomes) the one we
   * talk to; a new latch is announced through onLatch before this returns.
   */
  acceptRtp(from: RemoteAddress, nowMs: number): boolean {
    if (!this.#symmetric) return true;
    const latched = this.#latchedRtp;
    if (latched === undefined || from.port !== latched.port || from.address !== latched.address) {
      if (latched !== undefined && nowMs - this.#lastFromLatchedMs < this.#relatchAfterMs) return false;
      const next = { address: from.address, port: from.port };
      this.#latchedRtp = next;
      this.#onLatch({ ...next });
    }
    this.#lastFromLatchedMs = nowMs;
    return true;
  }

  /** A valid RTCP packet arrived on the RTCP port from `from`: our reports go there from now on. */
  acceptRtcp(from: RemoteAddress): void {
    if (!this.#symmetric) return;
    const l = this.#latchedRtcp;
    if (!l || l.port !== from.port || l.address !== from.address) {
      this.#latchedRtcp = { address: from.address, port: from.port };
    }
  }
}
