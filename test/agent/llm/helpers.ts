/** Small helpers shared by the LLM adapter tests. */
import { createServer } from 'node:net';
import type { LlmDelta } from '../../../src/agent/providers/types.ts';

export async function collect(it: AsyncIterable<LlmDelta>): Promise<LlmDelta[]> {
  const out: LlmDelta[] = [];
  for await (const d of it) out.push(d);
  return out;
}

/** The text deltas joined. */
export function textOf(deltas: LlmDelta[]): string {
  return deltas.map((d) => (d.type === 'text' ? d.text : '')).join('');
}

/** Runs `fn` and returns what it threw (fails the test when it did not throw). */
export async function thrown(fn: () => Promise<unknown>): Promise<any> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected an error, none was thrown');
}

/** A loopback port on which nothing listens (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** Resolves `p`, or rejects naming `what` if it takes longer than a generous bound. */
export function within<T>(p: Promise<T>, what: string, ms = 5000): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what}: did not happen within ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
