/**
 * The transfer fallback of a SIP call: when the caller's side refuses the REFER, a new outbound
 * call to the target through the call's own trunk (caller ID kept, so the target sees who is
 * calling), its RTP relayed with the caller's (media-relay.ts). A trunk without outbound_host
 * reaches the target through the PBX registered on it.
 */
import type { Logger } from '../log.ts';
import type { SipCall } from '../sip/ua/index.ts';
import { canCallThrough, outboundTrunkFromStore } from './sip-store-directory.ts';
import type { SipUserAgent } from '../sip/ua/index.ts';
import type { Store } from '../store/index.ts';
import { MediaRelay } from './media-relay.ts';
import type { TransferFallback } from './transfer-handler.ts';

/** Places the fallback's call to `target` for `call`; resolves with it once answered, else undefined. */
export type DialTransfer = (call: SipCall, target: string) => Promise<SipCall | undefined>;

/** The default DialTransfer: through the call's trunk, with the user agent of the moment. */
export function trunkTransferDialer(ua: () => SipUserAgent | undefined, store: Store, logger: Logger): DialTransfer {
  return async (call, target) => {
    const agent = ua();
    const trunkId = call.trunk?.id ?? call.route?.trunkId;
    const orgId = call.trunk?.orgId ?? call.route?.orgId;
    if (agent === undefined || trunkId === undefined || orgId === undefined) return undefined;
    const trunk = await outboundTrunkFromStore(store, orgId, trunkId);
    if (trunk === undefined || !canCallThrough(trunk)) {
      logger.warn({ callId: call.id, trunkId }, 'transfer fallback impossible: the call\'s trunk has no outbound_host and no registered PBX');
      return undefined;
    }
    const result = await agent.dial({ trunk, to: target, callerId: call.from });
    if (!result.ok) {
      logger.info({ callId: call.id, target, reason: result.reason, status: result.status }, 'transfer fallback: the target did not answer');
      return undefined;
    }
    return result.call;
  };
}

/** The bridge core's view of that fallback for one call. */
export function sipTransferFallback(call: SipCall, dial: DialTransfer): TransferFallback {
  return async (target) => {
    const reached = await dial(call, target);
    if (reached === undefined) return undefined;
    return { id: reached.id, hangup: () => reached.hangup('local'), relay: () => new MediaRelay(call, reached) };
  };
}
