/**
 * SIP Digest authentication (RFC 3261 section 22, RFC 7616, RFC 8760): the public entry point.
 *
 *  - params.ts  header grammar: parse and format challenges and credentials
 *  - core.ts    algorithms, the response computation, Request-URI comparison
 *  - server.ts  DigestServer: challenges and verification for inbound requests (UAS)
 *  - client.ts  DigestClient: credentials for outbound requests (UAC)
 *
 * Everything works on plain strings (header values, method, Request-URI) so any layer can use
 * it without the SIP message types. See docs/sip-digest.md for the choices and their reasons.
 */
export {
  MAX_AUTH_HEADER_LENGTH,
  MAX_AUTH_PARAMS,
  formatDigestChallenge,
  formatDigestCredentials,
  isToken,
  parseAuthHeader,
  parseDigestChallenges,
  parseDigestCredentials,
  quoteString,
  toDigestChallenge,
  toDigestCredentials,
  type AuthChallenge,
  type DigestChallenge,
  type DigestChallengeFields,
  type DigestCredentials,
  type DigestCredentialsFields,
  type ParseResult,
} from './params.ts';
export {
  DIGEST_ALGORITHMS,
  DIGEST_ALGORITHM_STRENGTH,
  computeDigestResponse,
  digestHexLength,
  formatNonceCount,
  isSessionAlgorithm,
  parseDigestAlgorithm,
  parseNonceCount,
  sipUrisEquivalent,
  uriMatches,
  type DigestAlgorithm,
  type DigestResponseInput,
  type UriMatchMode,
} from './core.ts';
export {
  DigestServer,
  digestFailureAction,
  wallClock,
  type ChallengeOptions,
  type DigestAccount,
  type DigestAction,
  type DigestClock,
  type DigestFailureReason,
  type DigestServerOptions,
  type DigestVerifyInput,
  type DigestVerifyResult,
} from './server.ts';
export {
  DigestClient,
  authorize,
  authorizationHeaderName,
  challengeHeaderName,
  type AuthorizeInput,
  type DigestAuthorization,
  type DigestClientFailureReason,
  type DigestClientOptions,
  type DigestRequestInput,
  type DigestRespondInput,
  type DigestRespondResult,
} from './client.ts';

