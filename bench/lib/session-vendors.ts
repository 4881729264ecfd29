/**
 * bench/session's vendor TTS rows: the fake vendors of test/agent/tts/fakes/ (Cartesia, Fish
 * Audio, MiniMax, Hume), each speaking its documented protocol on loopback with the same delay
 * before its first chunk (VENDOR_FIRST_CHUNK_MS, the baseline of the rows) and 40 ms chunks
 * 30 ms apart, run in the load generator's process (one session at a time while they are
 * measured). The daemon reaches them through `tts.providers` entries of the real adapter types
 * (BENCH_SESSION_VENDOR_TTS, bench/session-server.ts). Each fake logs when a sentence's text
 * arrives, on the bench's clock (process.hrtime), so a reply's latency splits at the vendor.
 */
import { startFakeCartesia } from '../../test/agent/tts/fakes/cartesia.ts';
import type { Pacing } from '../../test/agent/tts/fakes/common.ts';
import { startFakeFish } from '../../test/agent/tts/fakes/fish.ts';
import { startFakeHume } from '../../test/agent/tts/fakes/hume.ts';
import { startFakeMinimax } from '../../test/agent/tts/fakes/minimax.ts';

/** Every fake's wait before its first chunk: the rows' baseline. */
export const VENDOR_FIRST_CHUNK_MS = 200;
const PACING: Pacing = { firstChunkMs: VENDOR_FIRST_CHUNK_MS, gapMs: 30, chunkMs: 40 };
const KEY = 'bench-vendor-key';

export interface VendorFake {
  /** The adapter type (and the row's name). */
  type: 'cartesia' | 'fish' | 'minimax' | 'hume';
  slot: 'provider_3' | 'provider_4' | 'provider_5' | 'provider_6';
  /** A voice id the vendor takes (Hume: a Voice Library name). */
  voiceId: string;
  url: string;
}

export interface VendorFakes {
  vendors: VendorFake[];
  /** The `tts.providers` entries that point the daemon at the fakes. */
  providers: Array<{ voice_provider: string; type: string; base_url: string; api_key: string }>;
  /** Sentence arrivals at any fake since the last reset ({at: hrtime ms, input}). */
  log(): { at: number; input: string }[];
  reset(): void;
  close(): Promise<void>;
}

export async function startVendorFakes(nowMs: () => number): Promise<VendorFakes> {
  let arrivals: { at: number; input: string }[] = [];
  const onText = (input: string): void => {
    arrivals.push({ at: nowMs(), input });
  };
  const [cartesia, fish, minimax, hume] = await Promise.all([startFakeCartesia(KEY), startFakeFish(KEY), startFakeMinimax(KEY), startFakeHume(KEY)]);
  for (const f of [cartesia, fish, minimax, hume]) {
    f.pacing = { ...PACING };
    f.onText = onText;
  }
  const vendors: VendorFake[] = [
    { type: 'cartesia', slot: 'provider_3', voiceId: 'a0e99841-438c-4a64-b679-ae501e7d6091', url: cartesia.url },
    { type: 'hume', slot: 'provider_4', voiceId: 'Ava Song', url: hume.url },
    { type: 'minimax', slot: 'provider_5', voiceId: 'English_expressive_narrator', url: minimax.url },
    { type: 'fish', slot: 'provider_6', voiceId: '802e3bc2b27e49c2995d23ef70e6ac89', url: fish.url },
  ];
  return {
    vendors,
    providers: vendors.map((v) => ({ voice_provider: v.slot, type: v.type, base_url: v.url, api_key: KEY })),
    log: () => arrivals,
    reset: () => {
      arrivals = [];
    },
    close: async () => {
      await Promise.all([cartesia, fish, minimax, hume].map((f) => f.close()));
    },
  };
}
