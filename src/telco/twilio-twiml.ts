/**
 * The markup (TwiML) the voice webhook answers with: connect the call to a bidirectional media
 * stream on this daemon (<Connect><Stream> with <Parameter>s, which the carrier hands back in
 * the stream's `start` message as customParameters), or reject it.
 */

const XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>';

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;');
}

/** `<Response><Connect><Stream url=...><Parameter name value/>...</Stream></Connect></Response>` */
export function connectStreamTwiml(streamUrl: string, parameters: Record<string, string>): string {
  const params = Object.entries(parameters)
    .map(([name, value]) => `<Parameter name="${escapeXml(name)}" value="${escapeXml(value)}"/>`)
    .join('');
  return `${XML_HEAD}<Response><Connect><Stream url="${escapeXml(streamUrl)}">${params}</Stream></Connect></Response>`;
}

/**
 * `<Response><Reject reason=.../></Response>`: the carrier refuses the call without answering it
 * (no charge to the caller). `rejected` plays a "not in service" tone, `busy` a busy signal.
 */
export function rejectTwiml(reason: 'rejected' | 'busy'): string {
  return `${XML_HEAD}<Response><Reject reason="${reason}"/></Response>`;
}

/**
 * `<Response><Dial>number</Dial></Response>`: a live call redirected to another number (the
 * agent's transfer). No callerId: the carrier then shows the call's own caller (inbound: the
 * caller; outbound: our number), which it accepts without further verification.
 */
export function dialTwiml(number: string): string {
  return `${XML_HEAD}<Response><Dial>${escapeXml(number)}</Dial></Response>`;
}
