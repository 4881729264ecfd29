/**
 * What a vendor's voice-list fetcher gives the catalog: the vendor's voices in the API's voice
 * shape (GET /v1/voices), minus `provider`, which the catalog adds from the slot that serves them.
 */
export interface CatalogVoice {
  id: string;
  name: string;
  description?: string;
  languages: string[];
  preview_url?: string;
}

/** Another name the vendor accepts for a voice in a TTS request (Hume: a Voice Library name). */
export interface FetchedVoice extends CatalogVoice {
  aliases?: string[];
}

export interface VoiceList {
  voices: FetchedVoice[];
  /**
   * False when the list is known to be a part of what the vendor accepts (Fish's public library
   * is not listed whole; a paged list cut at the page cap): a voice id outside it is accepted.
   */
  complete: boolean;
}

export interface FetchOptions {
  /** The slot's base_url, as the TTS adapter of the same slot takes it. */
  baseUrl: string;
  apiKey: string;
  signal: AbortSignal;
}

/** One vendor's voice-list API. Throws on any failure (the catalog keeps the last good list). */
export type VoiceListFetcher = (options: FetchOptions) => Promise<VoiceList>;

/** Pages fetched at most per refresh, so a huge account cannot keep a refresh going forever. */
export const MAX_PAGES = 20;
