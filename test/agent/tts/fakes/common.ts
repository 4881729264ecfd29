/**
 * What the fake vendors of test/agent/tts/fakes/ share: the tone they speak (a sine whose
 * frequency and length the tests check in what the adapters yield), the chunk sizes and delays
 * of a real vendor's stream, and a loopback HTTP server.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** PCM16 LE bytes of `samples` samples of a sine of `hz` at `rate`. */
export function toneBytes(samples: number, hz: number, rate: number, amplitude = 8000): Buffer {
  const out = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++) out.writeInt16LE(Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / rate)), i * 2);
  return out;
}

/** The frequency of a tone, from its rising zero crossings (enough for a clean sine). */
export function toneFrequency(samples: Int16Array, rate: number): number {
  let rising = 0;
  for (let i = 1; i < samples.length; i++) if (samples[i - 1]! < 0 && samples[i]! >= 0) rising++;
  return (rising * rate) / samples.length;
}

/**
 * How a fake streams one generation: its first chunk after `firstChunkMs`, then one chunk of
 * `chunkMs` of audio every `gapMs` (vendors send 20-100 ms of audio per message).
 */
export interface Pacing {
  firstChunkMs: number;
  gapMs: number;
  chunkMs: number;
}

export const REALISTIC: Pacing = { firstChunkMs: 150, gapMs: 30, chunkMs: 40 };

/** Cuts bytes into chunks of `chunkMs` of audio (PCM16 at `rate`). */
export function audioChunks(bytes: Buffer, rate: number, chunkMs: number): Buffer[] {
  const size = Math.max(2, Math.round((rate * chunkMs) / 1000) * 2);
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, at + size));
  return out;
}

export function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

export { createServer };
