/**
 * Call recording: both directions of a bridged call as one stereo PCM16 WAV, left = the caller,
 * right = the agent, written to disk while the call runs.
 *
 * The bridge calls `tick(caller, agent)` once per 20 ms tick of the caller's clock with 24 kHz
 * frames of 480 samples (null: that side had nothing; it is recorded as silence, so the channels
 * stay aligned and the file's length is the call's length). Each side goes through its own
 * streaming resampler to the recording rate (default 16 kHz; 24 kHz is passed through), the two
 * are interleaved into a batch buffer of about one second, and each full batch is appended with
 * one synchronous write. The whole call is never held in memory: one batch per call (64 KB at
 * 16 kHz).
 *
 * File layout: the canonical 44-byte header (RIFF, WAVE, `fmt ` PCM 2 channels 16 bit, `data`)
 * is written first with zero sizes; close() flushes the last batch and patches the RIFF size
 * (offset 4) and the data size (offset 40). Files are created with mode 0600 in a directory
 * created 0700: recordings are personal data.
 *
 * Failures never reach the call: a write that fails (full disk, file size limit, I/O error)
 * stops the recording, logs why once, and the call goes on. What was written before the failure
 * is kept, cut to whole sample frames, with a correct header; close() returns undefined only
 * when not one sample frame could be written (the file is then removed).
 */
import { closeSync, fstatSync, ftruncateSync, mkdirSync, openSync, unlinkSync, writeSync } from 'node:fs';
import { endianness } from 'node:os';
import { join, resolve } from 'node:path';
import type { Logger } from '../log.ts';
import { createResampler, resamplersReady } from '../media/resampler.ts';
import type { Resampler } from '../media/types.ts';
import type { CallRecorderSink } from './bridge-core.ts';
import { WAV_HEADER_BYTES, wavHeader } from '../media/wav.ts';

/** The rate of the frames the bridge hands over (the voice protocol's rate). */
export const INPUT_RATE = 24_000;
/** Samples per 20 ms input frame. */
export const INPUT_FRAME = 480;
/** Recording rates: 24 kHz keeps everything, 16 kHz (default) keeps wideband, 8 kHz is phone band. */
export const RECORDING_RATES = [8000, 16_000, 24_000] as const;
export type RecordingRate = (typeof RECORDING_RATES)[number];
export const DEFAULT_RECORDING_RATE: RecordingRate = 16_000;
/** Two channels of 16-bit samples. */
const BLOCK_ALIGN = 4;
/** The data chunk's size is a uint32 and the RIFF size is data + 36. */
const MAX_DATA_BYTES = 0xffff_ffff - 36;
const LITTLE_ENDIAN = endianness() === 'LE';

export interface CallRecorderOptions {
  /** Directory of the recordings (created 0700 when missing): `<data_dir>/recordings`. */
  dir: string;
  /** The call's id: the file is `<dir>/<callId>.wav`. Letters, digits, `-` and `_` only (else nothing is recorded). */
  callId: string;
  /** Rate of the file (default 16 kHz). */
  sampleRate?: RecordingRate;
  /** Bytes buffered before a write (rounded down to whole sample frames); default one second. */
  batchBytes?: number;
  logger?: Logger;
}


/** Bytes of recording per minute of call at `sampleRate` (stereo PCM16), header excluded. */
export const bytesPerMinute = (sampleRate: number): number => sampleRate * BLOCK_ALIGN * 60;

export class CallRecorder implements CallRecorderSink {
  /** The file's absolute path. */
  readonly path: string;
  readonly sampleRate: RecordingRate;
  readonly #log: Logger | undefined;
  #fd: number | undefined;
  /** Interleaved samples waiting for the next write. */
  readonly #batch: Buffer;
  readonly #batchSamples: Int16Array;
  /** A write happens once this many bytes are buffered. */
  readonly #batchLimit: number;
  #batchUsed = 0;
  /** Data bytes on disk (always whole sample frames after a failure is handled). */
  #dataBytes = 0;
  #left: Resampler | undefined;
  #right: Resampler | undefined;
  readonly #silence = new Int16Array(INPUT_FRAME);
  #failed = false;
  #closed = false;
  /** What close() returns, once the file is finished (at close, or at once on a failure). */
  #result: string | undefined;

  constructor(o: CallRecorderOptions) {
    this.sampleRate = o.sampleRate ?? DEFAULT_RECORDING_RATE;
    if (!(RECORDING_RATES as readonly number[]).includes(this.sampleRate)) throw new RangeError(`recording rate must be one of ${RECORDING_RATES.join(', ')}: ${this.sampleRate}`);
    this.#log = o.logger;
    // The id names the file: nothing that could leave the directory (the bridge passes uuids).
    const safeId = /^[A-Za-z0-9_-]{1,128}$/.test(o.callId);
    this.path = join(resolve(o.dir), `${safeId ? o.callId : 'invalid-call-id'}.wav`);
    const second = this.sampleRate * BLOCK_ALIGN;
    const batchBytes = Math.max(BLOCK_ALIGN * INPUT_FRAME * 2, Math.floor((o.batchBytes ?? second) / BLOCK_ALIGN) * BLOCK_ALIGN);
    // Room for one more tick's output on top of a full batch (a resampler may emit a few extra samples).
    this.#batch = Buffer.alloc(batchBytes + BLOCK_ALIGN * INPUT_FRAME * 2);
    this.#batchSamples = new Int16Array(this.#batch.buffer, this.#batch.byteOffset, this.#batch.length / 2);
    this.#batchLimit = batchBytes;
    // Nothing below throws: a recording that cannot start is logged and the call goes on.
    try {
      if (!safeId) throw new RangeError(`call id not usable as a file name: ${JSON.stringify(o.callId)}`);
      mkdirSync(o.dir, { recursive: true, mode: 0o700 });
      // 'wx': a recording never overwrites (or follows a link to) an existing file.
      this.#fd = openSync(this.path, 'wx', 0o600);
      this.#writeAll(wavHeader(this.sampleRate, 2, 0), 0);
      if (this.sampleRate !== INPUT_RATE) {
        // speex once initResamplers() ran (the daemon does at start-up); the pure-TS FIR otherwise.
        const opts = resamplersReady() ? {} : { impl: 'fir' as const };
        this.#left = createResampler(INPUT_RATE, this.sampleRate, opts);
        this.#right = createResampler(INPUT_RATE, this.sampleRate, opts);
      }
    } catch (err) {
      this.#fail(err, 'could not start the recording: the call goes on unrecorded');
    }
  }

  /** Whether the recording stopped on an error (the call itself goes on). */
  get failed(): boolean {
    return this.#failed;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Data bytes written to the file so far (a multiple of 4: one left and one right sample). */
  get dataBytes(): number {
    return this.#dataBytes;
  }

  /** One 20 ms tick: the caller's and the agent's 24 kHz frames (null: silence). Never throws. */
  tick(caller: Int16Array | null, agent: Int16Array | null): void {
    if (this.#closed || this.#failed || this.#fd === undefined) return;
    try {
      this.#append(caller ?? this.#silence, agent ?? this.#silence);
      if (this.#batchUsed >= this.#batchLimit) this.#flush();
    } catch (err) {
      this.#fail(err, 'recording write failed: recording stopped, the call goes on');
    }
  }

  /** Finishes the file (last batch, sizes in the header). Idempotent; never throws. */
  close(): string | undefined {
    if (this.#closed) return this.#result;
    this.#closed = true;
    if (this.#fd !== undefined && !this.#failed) {
      try {
        this.#flush();
      } catch (err) {
        this.#fail(err, 'recording write failed at the end of the call');
      }
    }
    this.#left?.close();
    this.#right?.close();
    if (this.#fd !== undefined) this.#result = this.#finishFile();
    return this.#result;
  }

  /** Appends one tick, both sides resampled, interleaved into the batch. */
  #append(caller: Int16Array, agent: Int16Array): void {
    const l = this.#left ? this.#left.process(fit(caller, this.#silence)) : fit(caller, this.#silence);
    // The left output is a view that the right resampler does not touch: both can be read below.
    const r = this.#right ? this.#right.process(fit(agent, this.#silence)) : fit(agent, this.#silence);
    // Both resamplers see the same number of samples, so they return the same count; should they
    // ever differ, the shorter side is padded with silence rather than the channels drifting.
    const n = Math.max(l.length, r.length);
    const out = this.#batchSamples;
    let at = this.#batchUsed / 2;
    for (let i = 0; i < n; i++) {
      out[at++] = l[i] ?? 0;
      out[at++] = r[i] ?? 0;
    }
    this.#batchUsed += n * BLOCK_ALIGN;
  }

  /** Writes the batch; the file stops growing (recording stopped) at the WAV size limit. */
  #flush(): void {
    if (this.#batchUsed === 0 || this.#fd === undefined) return;
    let len = this.#batchUsed;
    this.#batchUsed = 0;
    if (this.#dataBytes + len > MAX_DATA_BYTES) {
      len = Math.floor((MAX_DATA_BYTES - this.#dataBytes) / BLOCK_ALIGN) * BLOCK_ALIGN;
      this.#failed = true;
      this.#log?.warn({ path: this.path }, 'recording reached the WAV size limit (4 GiB): recording stopped, the call goes on');
    }
    const chunk = this.#batch.subarray(0, len);
    if (!LITTLE_ENDIAN) chunk.swap16();
    this.#writeAll(chunk, WAV_HEADER_BYTES + this.#dataBytes);
  }

  /** writeSync until all is written (it may write less, e.g. at a file size limit), counting data bytes. */
  #writeAll(buf: Buffer, position: number): void {
    const isData = position >= WAV_HEADER_BYTES;
    let done = 0;
    while (done < buf.length) {
      const n = writeSync(this.#fd!, buf, done, buf.length - done, position + done);
      if (n <= 0) throw new Error('write made no progress');
      done += n;
      if (isData) this.#dataBytes += n;
    }
  }

  #fail(err: unknown, why: string): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#batchUsed = 0;
    const e = err as NodeJS.ErrnoException;
    this.#log?.error({ err, code: e?.code, path: this.path, dataBytes: this.#dataBytes }, why);
    // Finish now what was written (the file descriptor is not held for the rest of the call).
    if (this.#fd !== undefined) this.#result = this.#finishFile();
  }

  /** Header sizes patched, the file cut to whole sample frames and closed; its path, or undefined. */
  #finishFile(): string | undefined {
    const fd = this.#fd;
    if (fd === undefined) return undefined;
    this.#fd = undefined;
    // A partial write at a failure may have left half a sample frame.
    const whole = this.#dataBytes - (this.#dataBytes % BLOCK_ALIGN);
    let ok = whole > 0;
    try {
      // Removed while the call ran (the directory or the file deleted): nothing is left to keep.
      if (fstatSync(fd).nlink === 0) {
        ok = false;
        this.#log?.error({ path: this.path }, 'the recording file was deleted while the call ran: no recording kept');
      }
      if (whole !== this.#dataBytes) ftruncateSync(fd, WAV_HEADER_BYTES + whole);
      this.#dataBytes = whole;
      if (ok) {
        // Overwrites bytes already on disk: needs no new space even on a full disk.
        const sizes = Buffer.alloc(4);
        sizes.writeUInt32LE(36 + whole, 0);
        writeSync(fd, sizes, 0, 4, 4);
        sizes.writeUInt32LE(whole, 0);
        writeSync(fd, sizes, 0, 4, 40);
      }
    } catch (err) {
      ok = false;
      this.#log?.error({ err, path: this.path }, 'could not finish the recording file: dropped');
    }
    try {
      closeSync(fd);
    } catch (err) {
      this.#log?.warn({ err, path: this.path }, 'closing the recording file failed');
    }
    if (ok) return this.path;
    if (whole === 0 && !this.#failed) this.#log?.info({ path: this.path }, 'recording has no audio: no file kept');
    try {
      unlinkSync(this.path);
    } catch {
      // already gone (the directory was removed): nothing to clean up
    }
    return undefined;
  }
}

/** A frame of exactly INPUT_FRAME samples (a shorter one padded with silence, a longer one cut). */
function fit(frame: Int16Array, silence: Int16Array): Int16Array {
  if (frame.length === INPUT_FRAME) return frame;
  if (frame.length > INPUT_FRAME) return frame.subarray(0, INPUT_FRAME);
  if (frame.length === 0) return silence;
  const out = new Int16Array(INPUT_FRAME);
  out.set(frame);
  return out;
}
