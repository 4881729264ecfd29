/**
 * Errors of the agent runtime and its vendor adapters. Each carries a stable `code` that the
 * runtime switches on (fallback LLM, session end with reason error) and logs; messages are for
 * humans and never contain credentials. The vendor's HTTP status, when there is one, is kept as
 * `status`; the underlying failure as `cause`.
 */
import { CodedError } from '../coded-error.ts';

export const AGENT_ERROR_CODES = [
  /** The vendor answered with an HTTP error status (401, 429, 500, ...). */
  'VENDOR_HTTP_STATUS',
  /** The vendor could not be reached, or the connection broke mid-stream. */
  'VENDOR_UNREACHABLE',
  /** The vendor's response did not follow its own protocol (bad JSON, bad SSE, bad audio). */
  'VENDOR_BAD_RESPONSE',
  /** The vendor did not answer within its deadline (first token, first audio, transcript). */
  'VENDOR_TIMEOUT',
  /** A model, voice or provider that the configuration does not know. */
  'VENDOR_NOT_CONFIGURED',
  /** A local engine (WASM speech synthesizer, noise suppressor) failed to load or run. */
  'LOCAL_ENGINE_FAILED',
] as const;

export type AgentErrorCode = (typeof AGENT_ERROR_CODES)[number];

export class AgentError extends CodedError<AgentErrorCode> {
  override name = 'AgentError';
  constructor(code: AgentErrorCode, message: string, options?: { cause?: unknown; status?: number }) {
    super(code, message, options?.cause === undefined ? undefined : { cause: options.cause });
    if (options?.status !== undefined) this.status = options.status;
  }
  /** The vendor's HTTP status, when the failure was one. */
  status?: number;
}

export class LlmError extends AgentError {
  override name = 'LlmError';
}

export class SttError extends AgentError {
  override name = 'SttError';
}

export class TtsError extends AgentError {
  override name = 'TtsError';
}
