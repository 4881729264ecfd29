/**
 * Where a call's RTP lives, behind one surface for the SIP layer and the bridge:
 *   - this thread (the default): PortAllocator pairs, RtpSession, LocalBridgeMedia on the
 *     process's MediaTicker;
 *   - a media worker (config rtp.media_threads > 0): RemotePortPair, RemoteRtpSession,
 *     RemoteBridgeMedia (media-worker-pool.ts).
 * The kind of ports decides: a session is made where its sockets are.
 */
import { LocalBridgeMedia, type BridgeMedia, type BridgeMediaCallbacks, type BridgeMediaConfig } from './bridge-media.ts';
import type { MediaTicker } from './media-ticker.ts';
import { RemotePortPair, RemoteRtpSession } from './media-worker-pool.ts';
import type { RtpPortPair } from './port-allocator.ts';
import { RtpSession, type RtpSessionOptions } from './rtp-session.ts';

export type CallPorts = RtpPortPair | RemotePortPair;
export type CallRtp = RtpSession | RemoteRtpSession;

/** Allocates a call's RTP/RTCP ports: PortAllocator or MediaWorkerPool. */
export interface PortSource {
  allocate(options?: { address?: string }): Promise<CallPorts>;
}

/** The options a call's RTP session is made with, wherever it runs. */
export type CallRtpOptions = Pick<RtpSessionOptions, 'clockRate' | 'remote' | 'dtmfPayloadType' | 'rtcpMux' | 'mediaTimeoutMs' | 'srtp' | 'logger'>;

export function createCallRtp(ports: CallPorts, options: CallRtpOptions): CallRtp {
  if (ports instanceof RemotePortPair) {
    const { logger: _logger, ...rest } = options;
    return new RemoteRtpSession(ports, rest);
  }
  return new RtpSession({ ports, ...options });
}

/** Starts a bridged call's media both ways, on the thread that owns its RTP session. */
export function startBridgeMedia(rtp: CallRtp, config: BridgeMediaConfig, callbacks: BridgeMediaCallbacks, ticker: MediaTicker): BridgeMedia {
  if (rtp instanceof RemoteRtpSession) return rtp.bridge(config, callbacks);
  return new LocalBridgeMedia(rtp, config, callbacks, ticker);
}
