/**
 * A carrier media-stream call's control through the carrier's call API (Calls/{CallSid}.json):
 * hang up (`Status=completed`) and redirect to a dial of another number (a transfer). The number's
 * credentials are read when needed, within the call's organization, and never logged. Both never
 * throw: a failure is logged and reported, the caller decides what follows.
 */
import type { Logger } from '../log.ts';
import type { Store } from '../store/index.ts';
import type { CarrierClient } from '../telco/carrier-client.ts';
import { dialTwiml } from '../telco/twilio-twiml.ts';

export interface CarrierCallControl {
  /** Ends the phone call at the carrier (once; later calls do nothing). */
  hangUp(): Promise<void>;
  /** Redirects the live call to `<Dial>number</Dial>`; whether the carrier took it. */
  redirectToDial(number: string): Promise<boolean>;
}

export interface CarrierCallRef {
  orgId: string;
  /** The imported number the call is on (its credentials). */
  numberId: string;
  callSid: string;
}

export function carrierCallControl(client: CarrierClient, numbers: Pick<Store['telcoNumbers'], 'credentials'>, call: CarrierCallRef, log: Logger): CarrierCallControl {
  let hungUp = false;
  const update = async (fields: { Status: 'completed' } | { Twiml: string }, what: string): Promise<boolean> => {
    try {
      const creds = await numbers.credentials(call.orgId, call.numberId);
      if (creds === undefined) throw new Error('the imported number was deleted: no credentials for the call API');
      await client.updateCall(creds.account_sid, creds.auth_token, call.callSid, fields);
      log.info({ callSid: call.callSid }, `carrier call API: ${what}`);
      return true;
    } catch (err) {
      log.warn({ callSid: call.callSid, err: err instanceof Error ? err.message : String(err) }, `carrier call API: ${what} failed`);
      return false;
    }
  };
  return {
    async hangUp() {
      if (hungUp) return;
      hungUp = true;
      await update({ Status: 'completed' }, 'call hung up (Status=completed)');
    },
    async redirectToDial(number) {
      const ok = await update({ Twiml: dialTwiml(number) }, `call redirected to <Dial> ${number}`);
      // A transferred call is the target's now: it must not be hung up afterwards.
      if (ok) hungUp = true;
      return ok;
    },
  };
}
