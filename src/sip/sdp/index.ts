/**
 * SDP offer/answer (RFC 3264, RFC 4566) for callbridge's single audio stream. The public face of
 * parse.ts (reading), negotiate.ts (answering, offering, checking answers),
 * session.ts (o= versions across a dialog) and errors.ts (what to answer on failure).
 * See docs/sip-sdp.md for the decisions.
 *
 * UAS, INVITE with an offer:
 *
 *   const offer = parseOffer(body);                // SdpParseError -> 400 (err.reason)
 *   const ports = await allocator.allocate(...);   // family of offer.audio?.connection
 *   const media = local.answer(offer, { localAddress, localPort: ports.rtpPort });
 *                                                  // SdpNegotiationError -> 488 +
 *                                                  //   Warning: err.warningHeader(host)
 *   200 OK with media.answerSdp; RtpSession({ clockRate: media.codec.clockRate,
 *     remote: media.remote, dtmfPayloadType: media.dtmfPayloadType, rtcpMux: media.rtcpMux })
 *
 * re-INVITE: local.answer(body, { ..., previous: media }) -> codecChanged / remoteChanged /
 * hold / holdChanged tell the bridge what to do; 488 keeps the old session (RFC 3261 14.2).
 *
 * UAC: const offer = local.offer({ localAddress, localPort }); INVITE with offer.sdp; on 2xx
 * parseAnswer(body, offer); on an error ACK then BYE with Reason: err.reasonHeader().
 */
export * from './errors.ts';
export * from './parse.ts';
export * from './negotiate.ts';
export * from './session.ts';
