/**
 * The options every vendor TTS adapter takes (a `tts.providers` entry, plus the timers tests
 * shorten) and their normal form. A configuration leaves a field empty rather than absent, so an
 * empty api_key means no key and an empty model the vendor's default; reading them here keeps the
 * adapters from disagreeing on that.
 */
import { DEFAULT_STALL_MS } from './stall-timer.ts';
import { endpointUrl } from './vendor-url.ts';

export interface VendorOptions {
  /** The vendor's origin, e.g. `https://api.cartesia.ai` (http(s) or ws(s)); a proxy's path prefix is kept. */
  baseUrl: string;
  apiKey?: string;
  model?: string;
  /** Provider name (the config slot); default the adapter type. */
  name?: string;
  /** A sentence fails with VENDOR_TIMEOUT when the server says nothing for this long; default 10 s. */
  stallMs?: number;
}

/** The options of an adapter whose sentences of a turn share one socket (turn-socket.ts). */
export interface TurnSocketOptions extends VendorOptions {
  /**
   * Ends the turn at the vendor and closes its socket after this long without a sentence; default
   * 3000 ms. A vendor whose turn state expires sooner (Cartesia's context, 1 s after its last
   * audio) has its adapter follow that lifetime on the open socket.
   */
  idleCloseMs?: number;
}

/** What an adapter says of its vendor to read its options. */
export interface VendorEndpoint<Model extends string | undefined> {
  /** The adapter type: the default name. */
  type: string;
  /** The documented path, appended to base_url. */
  path: string;
  /** A WebSocket endpoint (ws(s) scheme) rather than HTTP. */
  websocket: boolean;
  /** The model sent when none is configured; undefined lets the vendor choose. */
  defaultModel: Model;
}

export interface VendorSettings<Model extends string | undefined = string> {
  name: string;
  url: URL;
  /** undefined: no key configured (no auth header is sent). */
  apiKey: string | undefined;
  model: string | Model;
  stallMs: number;
}

export interface TurnSocketSettings extends VendorSettings {
  idleCloseMs: number;
}

export const DEFAULT_IDLE_CLOSE_MS = 3000;

/** @throws TypeError when baseUrl is not a URL. */
export function vendorSettings<Model extends string | undefined>(options: VendorOptions, vendor: VendorEndpoint<Model>): VendorSettings<Model> {
  return {
    name: options.name ?? vendor.type,
    url: endpointUrl(options.baseUrl, vendor.path, vendor.websocket),
    apiKey: options.apiKey === '' ? undefined : options.apiKey,
    model: options.model !== undefined && options.model !== '' ? options.model : vendor.defaultModel,
    stallMs: options.stallMs ?? DEFAULT_STALL_MS,
  };
}

/** vendorSettings of a WebSocket shared by a turn's sentences, with its idle close. @throws TypeError when baseUrl is not a URL. */
export function turnSocketSettings(options: TurnSocketOptions, vendor: Omit<VendorEndpoint<string>, 'websocket'>): TurnSocketSettings {
  return { ...vendorSettings(options, { ...vendor, websocket: true }), idleCloseMs: options.idleCloseMs ?? DEFAULT_IDLE_CLOSE_MS };
}
