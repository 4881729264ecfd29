/**
 * The one pino root. Components take child loggers (`{ component }`, `{ reqId }`, `{ callId }`).
 * Secrets are redacted by path wherever they could appear: headers, bodies, config.
 */
import { pino, type Logger, type DestinationStream } from 'pino';

export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'authorization',
  '*.authorization',
  'auth_token',
  '*.auth_token',
  'password',
  '*.password',
  'inbound_sip_password',
  '*.inbound_sip_password',
  'outbound_sip_password',
  '*.outbound_sip_password',
  'token',
  '*.token',
  'webrtc_token',
  '*.webrtc_token',
  'api_key',
  '*.api_key',
  'key',
  '*.key',
  'secret',
  '*.secret',
  'api_secret',
  '*.api_secret',
  'token_secret',
  'encryption_key',
  '*.token_secret',
  '*.encryption_key',
  'digest_secret',
  '*.digest_secret',
  'credentials',
  '*.credentials',
];

export type { Logger };

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'callbridge' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}
