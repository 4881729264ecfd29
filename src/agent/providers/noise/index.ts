/**
 * The noise suppressor of a session, from the agent's noise_cancel_settings. RNNoise is the one
 * implementation; loadRnnoise() must have resolved (at start-up) before the first call.
 */
import type { NoiseSuppressor } from '../types.ts';
import { RnnoiseSuppressor } from './rnnoise.ts';

export { loadRnnoise, rnnoiseReady, RnnoiseSuppressor } from './rnnoise.ts';

export interface NoiseSuppressionSettings {
  enabled: boolean;
  /** 0..100: 100 = fully suppressed, 0 = untouched. */
  level: number;
}

/**
 * A suppressor for one session, or undefined when noise cancellation is disabled (the runtime
 * then passes frames through untouched). The caller closes it when the session ends.
 * @throws RangeError when level is not in 0..100.
 * @throws AgentError LOCAL_ENGINE_FAILED when RNNoise is not loaded or cannot be created.
 */
export function createNoiseSuppressor(settings: NoiseSuppressionSettings): NoiseSuppressor | undefined {
  if (!settings.enabled) return undefined;
  return new RnnoiseSuppressor({ level: settings.level });
}
