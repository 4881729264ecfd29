/**
 * The after-call summary (summarize_calls): the session's own model reads the transcript once
 * the session is over and writes at most three sentences, stored with the call record. It runs
 * after the end, so it never delays the caller; it gets SUMMARY_TIMEOUT_MS, and a failure only
 * costs the summary.
 */
import type { Logger } from '../../log.ts';
import type { Timers } from '../../media/types.ts';
import type { TranscriptEntry } from '../../session/runtime-contract.ts';
import type { ChatMessage } from '../providers/types.ts';
import type { ModelStream } from './reply-loop.ts';

/** How long the model may take to summarize before the summary is given up. */
export const SUMMARY_TIMEOUT_MS = 30_000;

/** The instruction; it starts with SUMMARIZE: so that local/echo recognises the request. */
const SUMMARY_PROMPT = 'SUMMARIZE: Summarize this phone call in at most three sentences: who called, what they wanted, how it ended.';

export interface CallSummaryDeps {
  model: ModelStream;
  timers: Timers;
  log: Logger;
  /** Keeps the summary (io.storeSummary); called once, only with a non-empty summary. */
  store(summary: string): void;
}

export async function summarizeCall(transcript: readonly TranscriptEntry[], deps: CallSummaryDeps): Promise<void> {
  const lines = transcript.map((e) => `${e.role}: ${e.text}`).join('\n');
  const abort = new AbortController();
  const timer = deps.timers.setTimeout(() => abort.abort(), SUMMARY_TIMEOUT_MS);
  try {
    let summary = '';
    const messages: ChatMessage[] = [
      { role: 'system', content: SUMMARY_PROMPT },
      { role: 'user', content: lines },
    ];
    for await (const d of deps.model(messages, [], abort.signal)) if (d.type === 'text') summary += d.text;
    if (summary.trim() !== '') deps.store(summary.trim());
  } catch (err) {
    deps.log.warn({ err }, 'call summary failed');
  } finally {
    deps.timers.clearTimeout(timer);
  }
}
