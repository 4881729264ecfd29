/**
 * A strict reader of PCM16 WAV files for the recording tests: walks the RIFF chunks (does not
 * assume the 44-byte layout), reports every header field, and splits stereo into its channels.
 */

export interface ParsedWav {
  riff: string;
  riffSize: number;
  wave: string;
  fmtSize: number;
  audioFormat: number;
  channels: number;
  sampleRate: number;
  byteRate: number;
  blockAlign: number;
  bitsPerSample: number;
  /** Byte offset of the data chunk's samples. */
  dataOffset: number;
  dataBytes: number;
  /** Channel 0 (left) and, for stereo, channel 1 (right). */
  left: Int16Array;
  right: Int16Array;
}

/** @throws Error when the buffer is not a RIFF/WAVE file with a fmt and a data chunk. */
export function parseWav(buf: Buffer): ParsedWav {
  if (buf.length < 12) throw new Error(`not a WAV: ${buf.length} bytes`);
  const riff = buf.toString('latin1', 0, 4);
  const wave = buf.toString('latin1', 8, 12);
  let at = 12;
  let fmt: Omit<ParsedWav, 'riff' | 'riffSize' | 'wave' | 'dataOffset' | 'dataBytes' | 'left' | 'right'> | undefined;
  let dataOffset = -1;
  let dataBytes = 0;
  while (at + 8 <= buf.length) {
    const id = buf.toString('latin1', at, at + 4);
    const size = buf.readUInt32LE(at + 4);
    if (id === 'fmt ') {
      fmt = {
        fmtSize: size,
        audioFormat: buf.readUInt16LE(at + 8),
        channels: buf.readUInt16LE(at + 10),
        sampleRate: buf.readUInt32LE(at + 12),
        byteRate: buf.readUInt32LE(at + 16),
        blockAlign: buf.readUInt16LE(at + 20),
        bitsPerSample: buf.readUInt16LE(at + 22),
      };
    } else if (id === 'data') {
      dataOffset = at + 8;
      dataBytes = size;
      break;
    }
    at += 8 + size + (size & 1);
  }
  if (fmt === undefined) throw new Error('WAV without a fmt chunk');
  if (dataOffset < 0) throw new Error('WAV without a data chunk');
  const avail = Math.min(dataBytes, buf.length - dataOffset);
  const samples = new Int16Array(Math.floor(avail / 2));
  for (let i = 0; i < samples.length; i++) samples[i] = buf.readInt16LE(dataOffset + 2 * i);
  const ch = fmt.channels;
  const frames = Math.floor(samples.length / ch);
  const left = new Int16Array(frames);
  const right = new Int16Array(ch > 1 ? frames : 0);
  for (let i = 0; i < frames; i++) {
    left[i] = samples[i * ch]!;
    if (ch > 1) right[i] = samples[i * ch + 1]!;
  }
  return { riff, riffSize: buf.readUInt32LE(4), wave, ...fmt, dataOffset, dataBytes, left, right };
}

/** RMS level in dBFS of pcm[from, to) (-Infinity for digital silence). */
export function rmsDb(pcm: Int16Array, from = 0, to = pcm.length): number {
  let sum = 0;
  const n = Math.max(0, Math.min(to, pcm.length) - from);
  for (let i = from; i < from + n; i++) sum += pcm[i]! * pcm[i]!;
  return n === 0 || sum === 0 ? -Infinity : 10 * Math.log10(sum / n / (32768 * 32768));
}

/** Levels of consecutive 20 ms frames. */
export function frameLevels(pcm: Int16Array, rate: number): number[] {
  const len = (rate * 20) / 1000;
  const out: number[] = [];
  for (let at = 0; at + len <= pcm.length; at += len) out.push(rmsDb(pcm, at, at + len));
  return out;
}

export interface Span {
  /** Seconds from the start of the file. */
  start: number;
  end: number;
  rmsDb: number;
}

/**
 * Loud spans: 20 ms frames above `thresholdDb`, joined across quiet gaps shorter than `joinMs`,
 * spans shorter than `minMs` dropped (clicks). Times in seconds from the start.
 */
export function loudSpans(pcm: Int16Array, rate: number, o: { thresholdDb?: number; joinMs?: number; minMs?: number } = {}): Span[] {
  const threshold = o.thresholdDb ?? -45;
  const join = (o.joinMs ?? 600) / 20;
  const min = (o.minMs ?? 200) / 20;
  const levels = frameLevels(pcm, rate);
  const raw: Array<[number, number]> = [];
  levels.forEach((db, i) => {
    if (db <= threshold) return;
    const last = raw.at(-1);
    if (last && i - last[1] <= join) last[1] = i;
    else raw.push([i, i]);
  });
  const len = (rate * 20) / 1000;
  return raw
    .filter(([a, b]) => b - a + 1 >= min)
    .map(([a, b]) => ({ start: (a * 20) / 1000, end: ((b + 1) * 20) / 1000, rmsDb: rmsDb(pcm, a * len, (b + 1) * len) }));
}

export const describeSpans = (spans: readonly Span[]): string =>
  spans.map((s) => `${s.start.toFixed(2)}-${s.end.toFixed(2)} s (${s.rmsDb.toFixed(1)} dBFS)`).join(', ') || '(none)';
