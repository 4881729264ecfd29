/**
 * The second names an agent body may use for a field, folded into the API document's names
 * before any rule runs. They come from the hosted service's own documents, which real clients
 * are written against (docs/api.md, "Vendor names"):
 *
 * - `voice_settings.provider`: the vendor names of the service (elevenlabs, openai, ...) for the
 *   neutral `provider_1`..`provider_6`. Responses keep the neutral names.
 * - `vad_settings`: the SDK types' `starting_secs` / `stopping_secs` twins of start/stop_secs.
 * - `timeout_settings`: the SDK types' camelCase twins (`defaultTimeout`, `timeoutAction`, ...).
 *
 * A field sent under both names with the same value is accepted; with different values it is a
 * 400, since no rule could say which one the client meant.
 */
import { VOICE_PROVIDERS, type VoiceProvider } from './agent.ts';
import { validation } from './errors.ts';

/** Vendor name -> neutral name (spec/README.md's table). */
export const VOICE_PROVIDER_VENDOR_NAMES = {
  elevenlabs: 'provider_1',
  openai: 'provider_2',
  cartesia: 'provider_3',
  hume: 'provider_4',
  minimax: 'provider_5',
  fish: 'provider_6',
} as const satisfies Record<string, VoiceProvider>;

/** Every name a voice provider may be given in: the neutral ones and the vendors'. */
export const VOICE_PROVIDER_NAMES: readonly string[] = [...VOICE_PROVIDERS, ...Object.keys(VOICE_PROVIDER_VENDOR_NAMES)];

/** The neutral name of a provider given under either name; undefined for an unknown name. */
export function canonicalVoiceProvider(name: string): VoiceProvider | undefined {
  if ((VOICE_PROVIDERS as readonly string[]).includes(name)) return name as VoiceProvider;
  return (VOICE_PROVIDER_VENDOR_NAMES as Record<string, VoiceProvider>)[name];
}

/** canonical name -> its twin, per nested object of an agent body. */
export const VAD_TWINS = { start_secs: 'starting_secs', stop_secs: 'stopping_secs' } as const;
export const TIMEOUT_TWINS = {
  default_timeout: 'defaultTimeout',
  timeout_action: 'timeoutAction',
  transfer_number: 'transferNumber',
  transfer_message: 'transferMessage',
  silence_counter: 'silenceCounter',
  silence_timeout_action: 'silenceTimeoutAction',
  silence_transfer_number: 'silenceTransferNumber',
  silence_transfer_message: 'silenceTransferMessage',
} as const;

type Body = Record<string, unknown>;

/**
 * Moves each twin's value to its canonical name in `obj` (a copy), refusing two different values.
 * `where` names the object in error messages (`body.timeout_settings`).
 */
function foldTwins(obj: Body, twins: Record<string, string>, where: string): Body {
  const out = { ...obj };
  for (const [canonical, twin] of Object.entries(twins)) {
    if (!(twin in out)) continue;
    const value = out[twin];
    delete out[twin];
    if (canonical in out && out[canonical] !== value) {
      throw validation(`${where}.${canonical} and ${where}.${twin} are the same field with different values; send one of them`);
    }
    out[canonical] = value;
  }
  return out;
}

/**
 * An agent create or PATCH body (already schema-valid) with every alias folded into the API
 * document's names. The input is not changed.
 * @throws DomainError validation when a field and its twin disagree.
 */
export function foldAgentAliases<T extends Body>(body: T): T {
  const out: Body = { ...body };
  if (isObject(out.vad_settings)) out.vad_settings = foldTwins(out.vad_settings, VAD_TWINS, 'body.vad_settings');
  if (isObject(out.timeout_settings)) out.timeout_settings = foldTwins(out.timeout_settings, TIMEOUT_TWINS, 'body.timeout_settings');
  if (isObject(out.voice_settings) && typeof out.voice_settings.provider === 'string') {
    const provider = canonicalVoiceProvider(out.voice_settings.provider);
    // The schema admits only known names; an unknown one here is a programming error upstream.
    if (provider === undefined) throw validation(`body.voice_settings.provider must be one of ${VOICE_PROVIDER_NAMES.join(', ')}`);
    out.voice_settings = { ...out.voice_settings, provider };
  }
  return out as T;
}

const isObject = (v: unknown): v is Body => typeof v === 'object' && v !== null && !Array.isArray(v);
