/**
 * Relays audio between two SIP calls: the caller and a new outbound leg, when the caller's side
 * refused our REFER and the bridge connects the transfer target itself. Same codec on both legs
 * (the usual case: both G.711 through the same carrier): payloads are forwarded as they are.
 * Different codecs: decode, resample when the rates differ, encode. Each packet is sent as it
 * arrives (no jitter buffer: the far end has its own), with its own timestamp span.
 *
 *   caller RTP --> [decode -> resample -> encode | as is] --> new leg RTP
 *   caller RTP <-- [decode -> resample -> encode | as is] <-- new leg RTP
 *
 * Either leg ending ends the other (BYE).
 */
import { createCodec } from '../media/codecs.ts';
import { createResampler } from '../media/resampler.ts';
import type { Codec, ReceivedRtp, Resampler } from '../media/types.ts';
import type { SipCall } from '../sip/ua/index.ts';

interface Direction {
  from: SipCall;
  to: SipCall;
  passThrough: boolean;
  decoder: Codec;
  encoder: Codec;
  resampler: Resampler | null;
  pcm: Int16Array;
  out: Uint8Array;
}

const isG711 = (c: Codec): boolean => c.name === 'PCMU' || c.name === 'PCMA';

export class MediaRelay {
  readonly #dirs: Direction[];
  #closed = false;

  constructor(
    private readonly a: SipCall,
    private readonly b: SipCall,
  ) {
    this.#dirs = [this.#direction(a, b), this.#direction(b, a)];
    for (const d of this.#dirs) d.from.rtp.on('rtp', (p) => this.#relay(d, p));
    a.on('hangup', () => this.close());
    b.on('hangup', () => this.close());
  }

  #direction(from: SipCall, to: SipCall): Direction {
    const inCodec = from.media.codec;
    const outCodec = to.media.codec;
    const decoder = createCodec(inCodec.name, { payloadType: inCodec.receivePayloadType });
    const encoder = createCodec(outCodec.name, { payloadType: outCodec.payloadType });
    return {
      from,
      to,
      passThrough: inCodec.name === outCodec.name,
      decoder,
      encoder,
      resampler: decoder.sampleRate === encoder.sampleRate ? null : createResampler(decoder.sampleRate, encoder.sampleRate),
      pcm: new Int16Array(decoder.samplesPerFrame * 6),
      out: new Uint8Array(1500),
    };
  }

  #relay(d: Direction, p: ReceivedRtp): void {
    if (this.#closed || p.payloadType !== d.from.media.codec.receivePayloadType) return;
    const outPt = d.to.media.codec.payloadType;
    if (d.passThrough) {
      // G.711 carries one byte per sample, whatever the packet time; Opus frames are 20 ms here.
      const span = isG711(d.encoder) ? p.payload.length : d.encoder.samplesPerFrame * (d.encoder.clockRate / d.encoder.sampleRate);
      d.to.rtp.send(p.payload, { payloadType: outPt, timestampIncrement: span });
      return;
    }
    try {
      const n = d.decoder.decode(p.payload, d.pcm);
      if (n <= 0) return;
      const resampled = d.resampler ? d.resampler.process(d.pcm.subarray(0, n)) : d.pcm.subarray(0, n);
      const bytes = d.encoder.encode(resampled, d.out);
      d.to.rtp.send(d.out.subarray(0, bytes), { payloadType: outPt, timestampIncrement: resampled.length * (d.encoder.clockRate / d.encoder.sampleRate) });
    } catch {
      // A packet that does not make a whole frame for the other codec (Opus wants exact 20 ms
      // frames): dropped. G.711 <-> G.711, the common case, never gets here.
    }
  }

  /** Idempotent: stops relaying and hangs up whichever leg is still up. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const d of this.#dirs) {
      d.decoder.close();
      d.encoder.close();
      d.resampler?.close();
    }
    if (!this.a.closed) this.a.hangup('local');
    if (!this.b.closed) this.b.hangup('local');
  }
}
