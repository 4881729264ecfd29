/**
 * Child process of call-recorder.test.ts: runs a CallRecorder under a file size limit (the
 * parent starts it with `ulimit -f`), so a write fails part way through the call exactly as on a
 * full disk (a short write, then EFBIG). Prints one JSON line: what the call side observed.
 *
 *   node --import tsx recorder-fsize-child.ts <dir> <callId> <ticks>
 */
import { CallRecorder } from '../../src/bridge/call-recorder.ts';

const [dir, callId, ticksArg] = process.argv.slice(2);
const errors: string[] = [];
const logger = {
  error: (o: { code?: string }, msg: string) => errors.push(`${o.code ?? ''} ${msg}`),
  warn: (_o: unknown, msg: string) => errors.push(msg),
  info: () => {},
} as never;
const rec = new CallRecorder({ dir: dir!, callId: callId!, sampleRate: 24_000, logger });
const frame = new Int16Array(480);
let threw: string | undefined;
let failedAtTick = -1;
try {
  for (let t = 0; t < Number(ticksArg); t++) {
    frame.fill(1000 + (t % 1000));
    rec.tick(frame, null);
    if (rec.failed && failedAtTick < 0) failedAtTick = t;
  }
} catch (err) {
  threw = String(err);
}
const first = rec.close();
const second = rec.close();
process.stdout.write(`${JSON.stringify({ threw, failedAtTick, first, second, failed: rec.failed, dataBytes: rec.dataBytes, errors })}\n`);
