/**
 * The post-call analysis (summarize_calls; docs/calls.md "Post-call analysis"): once the session
 * is over, the session's own model (llm with fallback_llm, the same ModelStream the replies use)
 * reads the transcript and answers one JSON object: a summary of at most three sentences and, for
 * each of the agent's analysis_fields, one of the field's choices. The answer is checked here: a
 * value that is not one of the choices is stored as null. It runs after the end, so it never
 * delays the caller; it gets ANALYSIS_TIMEOUT_MS, and a failure (model error, timeout, an answer
 * that is not a JSON object) rejects, which costs only the analysis.
 */
import type { AnalysisField } from '../../domain/agent.ts';
import type { CallAnalysis, ContextVariable } from '../../domain/call.ts';
import type { Timers } from '../../media/types.ts';
import type { TranscriptEntry } from '../../session/runtime-contract.ts';
import { ANALYZE_PREFIX, ANALYSIS_FIELDS_PREFIX } from '../providers/llm/echo.ts';
import type { ChatMessage } from '../providers/types.ts';
import type { ModelStream } from './reply-loop.ts';

/** How long the model may take to analyse a call before the analysis is given up. */
export const ANALYSIS_TIMEOUT_MS = 30_000;
/** A longer summary is cut: the record stays small whatever the model writes. */
export const MAX_SUMMARY_LENGTH = 4000;

export interface CallAnalysisDeps {
  model: ModelStream;
  timers: Timers;
  /** Aborts the analysis (daemon shutdown). */
  signal?: AbortSignal;
}

/**
 * The instruction. It starts with ANALYZE: and names the fields on a last line starting with
 * FIELDS:, as JSON, so that local/echo recognises the request and can answer it (echo.ts).
 */
export function analysisPrompt(fields: readonly AnalysisField[]): string {
  const spec = fields.map((f) => ({ name: f.name, ...(f.description !== undefined ? { description: f.description } : {}), choices: f.choices }));
  return [
    `${ANALYZE_PREFIX} You review a finished phone call from its transcript (the user message: one line per turn, "agent: ...", "user: ..." or "tool: ...").`,
    'Answer with one JSON object and nothing else:',
    '{"summary": "<at most three sentences: who called, what they wanted, how it ended>", "fields": {"<field name>": "<one of its choices, exactly as written>" or null}}',
    'Give every field listed below; null when the call does not show which choice fits.',
    `${ANALYSIS_FIELDS_PREFIX} ${JSON.stringify(spec)}`,
  ].join('\n');
}

export async function analyzeCall(transcript: readonly TranscriptEntry[], fields: readonly AnalysisField[], deps: CallAnalysisDeps): Promise<CallAnalysis> {
  const abort = new AbortController();
  let timedOut = false;
  const timer = deps.timers.setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, ANALYSIS_TIMEOUT_MS);
  const onAbort = () => abort.abort();
  deps.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const messages: ChatMessage[] = [
      { role: 'system', content: analysisPrompt(fields) },
      { role: 'user', content: transcript.map((e) => `${e.role}: ${e.text}`).join('\n') },
    ];
    let answer = '';
    for await (const d of deps.model(messages, [], abort.signal)) if (d.type === 'text') answer += d.text;
    if (timedOut) throw new Error(`the model did not answer within ${ANALYSIS_TIMEOUT_MS} ms`);
    if (abort.signal.aborted) throw new Error('the analysis was aborted');
    return parseAnalysis(answer, fields);
  } finally {
    deps.timers.clearTimeout(timer);
    deps.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * The model's answer as a CallAnalysis. The JSON object is taken from the first `{` to the last
 * `}` (models like to wrap it in a code fence). A summary that is not a non-blank string is null;
 * a field's value is the choice it names (exactly, or differing only in case and surrounding
 * spaces), else null.
 * @throws Error when the answer holds no JSON object.
 */
export function parseAnalysis(answer: string, fields: readonly AnalysisField[]): CallAnalysis {
  const start = answer.indexOf('{');
  const end = answer.lastIndexOf('}');
  let parsed: unknown;
  try {
    parsed = start >= 0 && end > start ? JSON.parse(answer.slice(start, end + 1)) : undefined;
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new Error(`the model's analysis is not a JSON object (${answer.length} characters)`);
  }
  const o = parsed as { summary?: unknown; fields?: unknown };
  const summary = typeof o.summary === 'string' && o.summary.trim() !== '' ? o.summary.trim().slice(0, MAX_SUMMARY_LENGTH) : null;
  const answers = typeof o.fields === 'object' && o.fields !== null && !Array.isArray(o.fields) ? (o.fields as Record<string, unknown>) : {};
  const extracted_variables = fields.map((f): ContextVariable => {
    const v: ContextVariable = { name: f.name, type: 'extracted' };
    if (f.description !== undefined) v.description = f.description;
    v.dataType = 'string';
    v.value = choiceOf(f, Object.hasOwn(answers, f.name) ? answers[f.name] : undefined);
    return v;
  });
  return { summary, extracted_variables };
}

function choiceOf(field: AnalysisField, value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const v = value.trim();
  return field.choices.find((c) => c === v) ?? field.choices.find((c) => c.toLowerCase() === v.toLowerCase()) ?? null;
}
