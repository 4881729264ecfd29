export { SipDnsResolver, SIP_DNS_DEFAULTS, type SipDnsOptions, type ResolveRequest, type ResolvedTarget } from './resolver.ts';
export { orderSrv, type Weighted } from './srv-order.ts';
export { TargetStatus, endpointKey, type TargetStatusOptions } from './target-status.ts';
