/**
 * Errors of the dialog layer (dialog*.ts). Kept here rather than in errors.ts until the codes
 * are merged into SIP_ERROR_CODES there; same shape: a stable `code`, the cause as `cause`.
 */
import { CodedError } from '../../coded-error.ts';
export const SIP_DIALOG_ERROR_CODES = [
  /** The dialog is terminated (or closed): no further requests. */
  'SIP_DIALOG_TERMINATED',
  /** The next hop (first Route without `lr`, RFC 3261 12.2.1.1) needs strict routing, which is not done. */
  'SIP_DIALOG_STRICT_ROUTE',
  /** The next hop's URI is not a sip:/sips: URI with a numeric host (DNS is not done here, RFC 3263). */
  'SIP_DIALOG_DESTINATION',
  /** The message cannot create or act on a dialog (no tag, no Contact, not a 1xx/2xx to INVITE). */
  'SIP_DIALOG_INVALID',
  /** A listener of a dialog's or the manager's events threw (caught, logged, never rethrown). */
  'SIP_DIALOG_LISTENER',
] as const;

export type SipDialogErrorCode = (typeof SIP_DIALOG_ERROR_CODES)[number];

export class SipDialogError extends CodedError<SipDialogErrorCode> {
  override name = 'SipDialogError';
}
