/** Shared helpers of the TTS adapter tests. */
import { expect } from 'vitest';
import type { TtsProvider, TtsRequest } from '../../../src/agent/providers/types.ts';
import { sleep } from './fakes/common.ts';

export function request(text: string, extra: Partial<TtsRequest> = {}): TtsRequest {
  return { text, voiceId: 'voice-1', language: 'en', signal: new AbortController().signal, ...extra };
}

/** All chunks an adapter yields for a request. */
export async function collect(provider: TtsProvider, req: TtsRequest): Promise<Int16Array[]> {
  const chunks: Int16Array[] = [];
  for await (const c of provider.synthesize(req)) chunks.push(c);
  return chunks;
}

export function concat(chunks: Int16Array[]): Int16Array {
  const out = new Int16Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

export function rms(samples: Int16Array, from = 0, to = samples.length): number {
  let sum = 0;
  for (let i = from; i < to; i++) sum += samples[i]! * samples[i]!;
  return Math.sqrt(sum / Math.max(1, to - from));
}

/** The error a promise rejects with (fails the test when it resolves). */
export async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

/** The chunks an adapter yields before it throws, and what it throws (fails the test when it does not throw). */
export async function chunksBeforeError(provider: TtsProvider, req: TtsRequest): Promise<{ chunks: Int16Array[]; err: any }> {
  const chunks: Int16Array[] = [];
  const err = await rejection(
    (async () => {
      for await (const c of provider.synthesize(req)) chunks.push(c);
    })(),
  );
  return { chunks, err };
}

/** Waits up to 2 s for `cond` to hold (the fake's side of a close, an abort), then asserts it. */
export async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await sleep(10);
  expect(cond()).toBe(true);
}
