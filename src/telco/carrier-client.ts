// PLACEHOLDER: replaced by the telco-numbers work (helper).
import type { Config } from '../config.ts';
export interface CarrierNumber { phone_sid: string; phone_number: string }
export interface CarrierClient { lookupNumber(accountSid: string, authToken: string, phoneNumber: string): Promise<CarrierNumber> }
export function createCarrierClient(_config: Config): CarrierClient {
  return { lookupNumber: async () => { throw new Error('not implemented'); } };
}
