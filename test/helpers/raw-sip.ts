/**
 * A bare UDP SIP peer for tests that need exact control and speed: INVITEs written as text, sent
 * from a socket bound to any loopback address (127.0.0.7...), every response kept as received
 * (retransmissions included). No transaction layer: nothing is retransmitted or answered unless
 * the test does it.
 */
import { createSocket, type Socket } from 'node:dgram';
import { randomBytes } from 'node:crypto';
import { parseMessage, SipResponse } from '../../src/sip/message/index.ts';

export interface RawInvite {
  /** Request-URI user (the number dialled). */
  user: string;
  /** From user. Default +15559990000. */
  from?: string;
  /** From display name (quoted), none by default. */
  fromName?: string;
  /** To user; default `user`. */
  to?: string;
  callId?: string;
  headers?: string[];
  /** SDP offer; default one PCMU/PCMA offer on port 4000. */
  sdp?: string | null;
}

export interface RawSipPeer {
  socket: Socket;
  address: string;
  port: number;
  /** Every response received, in order. */
  responses: SipResponse[];
  /** Sends an INVITE to 127.0.0.1:`sipPort`; returns its Call-ID. */
  invite(sipPort: number, o: RawInvite): string;
  /**
   * Sends a CANCEL for an INVITE this peer sent (RFC 3261 9.1: same Request-URI, Via branch,
   * From, To and Call-ID, CSeq number with method CANCEL).
   */
  cancel(sipPort: number, callId: string): void;
  /** ACKs the final non-2xx response of an INVITE this peer sent (17.1.1.3: its To tag, the INVITE's branch). */
  ackFailure(sipPort: number, callId: string): void;
  /** Responses with this Call-ID. */
  for(callId: string): SipResponse[];
  close(): Promise<void>;
}

function offer(address: string): string {
  return ['v=0', `o=- 1 1 IN IP4 ${address}`, 's=-', `c=IN IP4 ${address}`, 't=0 0', 'm=audio 4000 RTP/AVP 0 8', 'a=rtpmap:0 PCMU/8000', 'a=rtpmap:8 PCMA/8000', 'a=sendrecv', ''].join('\r\n');
}

export async function startRawSipPeer(address = '127.0.0.1'): Promise<RawSipPeer> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, address, () => resolve());
  });
  const port = socket.address().port;
  const responses: SipResponse[] = [];
  socket.on('message', (buf) => {
    try {
      const m = parseMessage(buf);
      if (m instanceof SipResponse) responses.push(m);
    } catch {
      // not SIP: ignore
    }
  });
  let seq = 0;
  /** The header lines of each INVITE sent, by Call-ID: a CANCEL or ACK repeats them. */
  const sent = new Map<string, { requestUri: string; via: string; from: string; to: string }>();
  const sendFor = (sipPort: number, callId: string, method: 'CANCEL' | 'ACK', to: string): void => {
    const i = sent.get(callId);
    if (i === undefined) throw new Error(`no INVITE sent with Call-ID ${callId}`);
    const lines = [`${method} ${i.requestUri} SIP/2.0`, i.via, i.from, to, `Call-ID: ${callId}`, `CSeq: 1 ${method}`, 'Max-Forwards: 70', 'Content-Length: 0', '', ''];
    socket.send(lines.join('\r\n'), sipPort, '127.0.0.1');
  };
  return {
    socket,
    address,
    port,
    responses,
    invite(sipPort, o) {
      const callId = o.callId ?? `${randomBytes(8).toString('hex')}-${++seq}@${address}`;
      const body = o.sdp === null ? '' : (o.sdp ?? offer(address));
      const name = o.fromName === undefined ? '' : `"${o.fromName}" `;
      const headers = {
        requestUri: `sip:${o.user}@127.0.0.1:${sipPort}`,
        via: `Via: SIP/2.0/UDP ${address}:${port};rport;branch=z9hG4bK${randomBytes(6).toString('hex')}`,
        from: `From: ${name}<sip:${o.from ?? '+15559990000'}@${address}:${port}>;tag=${randomBytes(4).toString('hex')}`,
        to: `To: <sip:${o.to ?? o.user}@127.0.0.1:${sipPort}>`,
      };
      sent.set(callId, headers);
      const lines = [
        `INVITE ${headers.requestUri} SIP/2.0`,
        headers.via,
        headers.from,
        headers.to,
        `Call-ID: ${callId}`,
        'CSeq: 1 INVITE',
        `Contact: <sip:caller@${address}:${port}>`,
        'Max-Forwards: 70',
        ...(o.headers ?? []),
        ...(body === '' ? [] : ['Content-Type: application/sdp']),
        `Content-Length: ${Buffer.byteLength(body)}`,
        '',
        body,
      ];
      socket.send(lines.join('\r\n'), sipPort, '127.0.0.1');
      return callId;
    },
    cancel(sipPort, callId) {
      sendFor(sipPort, callId, 'CANCEL', sent.get(callId)?.to ?? '');
    },
    ackFailure(sipPort, callId) {
      const final = responses.find((r) => r.callId === callId && r.status >= 300 && r.get('cseq')?.endsWith('INVITE'));
      if (final === undefined) throw new Error(`no final failure response for ${callId} to ACK`);
      sendFor(sipPort, callId, 'ACK', `To: ${final.get('to')}`);
    },
    for(callId) {
      return responses.filter((r) => r.callId === callId);
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
