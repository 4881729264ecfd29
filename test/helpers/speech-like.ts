/** 8 kHz speech-like audio (150 Hz voice with harmonics, syllable envelope), about -16 dBFS: enough for the VAD to hear a caller speak. */
export function speechLike(secs: number): Int16Array {
  const n = Math.round(secs * 8000);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const t = i / 8000;
    let v = 0;
    for (let h = 1; h <= 6; h++) v += Math.sin(2 * Math.PI * 150 * h * t) / h;
    out[i] = Math.round(v * 0.3 * (0.55 + 0.45 * Math.sin(2 * Math.PI * 4 * t)) * 16000);
  }
  return out;
}
