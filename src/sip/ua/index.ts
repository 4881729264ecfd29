/** The SIP user agent: UAS and UAC cores, calls, routing hooks, trunk health: the layer's one entry module; the other layers and the bridge import from here. */
export * from './user-agent.ts';
export type { SipCall } from './call.ts';
export type { DigestAccountOf, InboundDirectory, InboundRoute, InboundTrunk, NumberClaimOf } from './inbound-routing.ts';
export type { AdmissionRefusal } from './uas.ts';
export type { OutboundTrunk } from './outbound-call.ts';
export { TrunkHealth } from './trunk-health.ts';
export type { RegistrationStore, RegistrarOptions } from './registrar.ts';
export type { RegistrationBinding, RegistrarLimits } from './register-bindings.ts';
export type { RegisteredContact } from './registered-route.ts';
export { OutboundRegistrations, type RegisteringTrunk } from './outbound-registrations.ts';
export type { OutboundRegistrationState, RegistrationAttemptOutcome } from './outbound-registration.ts';
