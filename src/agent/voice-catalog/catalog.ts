/**
 * The voice catalog behind GET /v1/voices and the voice check of agent bodies. Per configured
 * voice provider: the embedded local voices when the local voice serves it, else the vendor's
 * own list, fetched in the background (first at start, then every `voices.refresh_secs`; a slot
 * with no good list yet, or whose last fetch failed, is retried within 30 s). Requests read the
 * cache; only while a slot's very first fetch is still running may a request wait for it, at most
 * `voices.first_fetch_wait_ms`. A failed fetch keeps the last good list and logs one warning per
 * failure streak (the error names vendor, path and status; keys travel in headers only).
 */
import type { Config, VoiceCatalogEntry } from '../../config.ts';
import type { Logger } from '../../log.ts';
import { VOICE_LIST_FETCHERS, type RemoteType } from './fetchers.ts';
import { servedSlots, slotLabel, type ServedSlot, type VoiceSlot } from './slots.ts';
import type { FetchedVoice, VoiceList, VoiceListFetcher } from './types.ts';

export interface VoiceCatalogOptions {
  config: Pick<Config, 'tts' | 'agent_defaults' | 'voices'>;
  logger: Logger;
  /** Tests and benches replace a vendor's fetcher; default VOICE_LIST_FETCHERS. */
  fetchers?: Partial<Record<RemoteType, VoiceListFetcher>>;
}

/** The outcome of checking an agent's voice_settings against the catalog. */
export type VoiceCheck = { ok: true; unchecked?: string } | { ok: false; error: string };

/** Retry delay of a slot whose last fetch failed (or that never had a good list). */
const RETRY_MS = 30_000;

interface SlotState {
  served: ServedSlot;
  fetcher: VoiceListFetcher;
  good?: VoiceList;
  failing: boolean;
  first: Promise<void>;
  firstDone: boolean;
  inFlight?: Promise<void>;
  timer?: NodeJS.Timeout;
  abort?: AbortController;
}

export class VoiceCatalog {
  readonly #served: Map<VoiceSlot, ServedSlot>;
  readonly #remote = new Map<VoiceSlot, SlotState>();
  readonly #local: VoiceCatalogEntry[];
  readonly #log: Logger;
  readonly #refreshMs: number;
  readonly #firstWaitMs: number;
  readonly #timeoutMs: number;
  #started = false;
  #stopped = false;

  constructor(options: VoiceCatalogOptions) {
    const { config } = options;
    this.#served = servedSlots(config);
    this.#local = config.voices.catalog;
    this.#log = options.logger.child({ component: 'voice-catalog' });
    this.#refreshMs = config.voices.refresh_secs * 1000;
    this.#firstWaitMs = config.voices.first_fetch_wait_ms;
    this.#timeoutMs = config.voices.fetch_timeout_ms;
    const fetchers = { ...VOICE_LIST_FETCHERS, ...options.fetchers };
    for (const served of this.#served.values()) {
      if (served.type === 'local') continue;
      this.#remote.set(served.slot, { served, fetcher: fetchers[served.type], failing: false, first: Promise.resolve(), firstDone: false });
    }
  }

  /** Starts the background fetches (idempotent). */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    for (const s of this.#remote.values()) s.first = this.#refresh(s).finally(() => (s.firstDone = true));
  }

  /** Stops the timers and aborts fetches in flight. */
  stop(): void {
    this.#stopped = true;
    for (const s of this.#remote.values()) {
      clearTimeout(s.timer);
      s.abort?.abort();
    }
  }

  /** Resolves once every slot's first fetch has ended, or after `first_fetch_wait_ms`. */
  async #firstFetches(): Promise<void> {
    const pending = [...this.#remote.values()].filter((s) => !s.firstDone).map((s) => s.first);
    if (pending.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(pending), new Promise<void>((r) => (timer = setTimeout(r, this.#firstWaitMs)))]);
    clearTimeout(timer);
  }

  /** GET /v1/voices: every served slot's voices, provider_1 first, each vendor's in its own order. */
  async list(): Promise<VoiceCatalogEntry[]> {
    await this.#firstFetches();
    const out: VoiceCatalogEntry[] = [];
    for (const slot of [...this.#served.keys()].sort()) out.push(...this.#voicesOf(slot).map(({ aliases: _aliases, ...v }) => ({ ...v, provider: slot })));
    return out;
  }

  #voicesOf(slot: VoiceSlot): FetchedVoice[] {
    const served = this.#served.get(slot);
    if (!served) return [];
    if (served.type === 'local') return this.#local.map(({ provider: _p, ...v }) => v);
    return this.#remote.get(slot)?.good?.voices ?? [];
  }

  /**
   * Whether an agent may use this voice: its provider must be served (else the message names the
   * setting that configures it) and the voice in that provider's list when the list is known.
   */
  async check(provider: string, voiceId: string): Promise<VoiceCheck> {
    const served = this.#served.get(provider as VoiceSlot);
    const label = slotLabel(provider);
    if (!served) {
      return {
        ok: false,
        error: `voice_settings.provider ${label} is not configured on this server: add an entry with voice_provider ${provider} to tts.providers (CALLBRIDGE_TTS_PROVIDERS), or pick a configured provider (GET /v1/voices)`,
      };
    }
    if (served.type === 'local') {
      if (this.#local.some((v) => v.id === voiceId)) return { ok: true };
      return { ok: false, error: `voice_settings.id "${voiceId}" is not a voice of ${label}, which the embedded local voice serves: one of ${this.#local.map((v) => v.id).join(', ')} (voices.catalog)` };
    }
    const state = this.#remote.get(served.slot)!;
    if (!state.firstDone) await this.#firstFetches();
    const list = state.good;
    if (list === undefined) return { ok: true, unchecked: `the voice list of ${label} has not been fetched yet` };
    if (list.voices.some((v) => v.id === voiceId || v.aliases?.includes(voiceId))) return { ok: true };
    if (!list.complete) return { ok: true, unchecked: `${label}'s voice list is known to be partial` };
    return { ok: false, error: `voice_settings.id "${voiceId}" is not in the voice catalog of ${label} (${list.voices.length} voices; GET /v1/voices lists them)` };
  }

  /** Fetches one slot's list now, then schedules the next fetch. One fetch per slot at a time. */
  #refresh(s: SlotState): Promise<void> {
    if (s.inFlight) return s.inFlight;
    const abort = new AbortController();
    s.abort = abort;
    const timeout = setTimeout(() => abort.abort(), this.#timeoutMs);
    const label = slotLabel(s.served.slot);
    s.inFlight = s
      .fetcher({ baseUrl: s.served.baseUrl, apiKey: s.served.apiKey, signal: abort.signal })
      .then(
        (list) => {
          if (this.#stopped) return;
          s.good = list;
          if (s.failing) this.#log.info({ provider: s.served.slot, type: s.served.type, voices: list.voices.length }, `voice list of ${label} fetched again`);
          else this.#log.debug({ provider: s.served.slot, voices: list.voices.length }, `voice list of ${label} fetched`);
          s.failing = false;
        },
        (err: unknown) => {
          if (this.#stopped) return;
          // One warning per failure streak: a vendor down for an hour is one line, not 120.
          if (!s.failing) {
            const keeps = s.good ? `keeping the last good list (${s.good.voices.length} voices)` : 'no list yet: its voice ids are accepted unchecked';
            this.#log.warn({ provider: s.served.slot, type: s.served.type, error: (err as Error).message }, `voice list of ${label} could not be fetched; ${keeps}`);
          }
          s.failing = true;
        },
      )
      .finally(() => {
        clearTimeout(timeout);
        s.inFlight = undefined;
        if (this.#stopped) return;
        const next = s.failing || !s.good ? Math.min(this.#refreshMs, RETRY_MS) : this.#refreshMs;
        s.timer = setTimeout(() => void this.#refresh(s), next);
        s.timer.unref();
      });
    return s.inFlight;
  }
}
