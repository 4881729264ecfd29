/**
 * The voice_settings tuning fields (speed, stability, similarity_boost, volume: 0 or absent
 * means the vendor's default) turned into a vendor's parameter ranges.
 */

/** The value when it is set (a positive finite number), else undefined. */
export function tuning(value: number | undefined): number | undefined {
  return value !== undefined && Number.isFinite(value) && value > 0 ? value : undefined;
}

/** `value` within the vendor's documented range. */
export function clamp(value: number, [min, max]: readonly [number, number]): number {
  return Math.min(max, Math.max(min, value));
}
