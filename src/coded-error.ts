/**
 * The shape every error family of callbridge shares: a stable `code` from the family's list (what
 * callers and tests branch on), a message for people, the underlying failure as `cause`. One base
 * class instead of a copy per layer (SIP, SIP dialogs, SDP, media, agent providers).
 *
 * It imports nothing, so every folder may use it, media/ and domain/ included: a leaf like the
 * standard library (docs/decisions.md).
 */
export class CodedError<Code extends string> extends Error {
  constructor(
    readonly code: Code,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
