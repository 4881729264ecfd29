/** The store: one SQLite database and a repository per resource. */
import { openDatabase, type Db } from './db.ts';
import { OrganizationRepo } from './organizations.ts';
import { AgentRepo } from './agents.ts';
import { VersionRepo } from './versions.ts';
import { TelcoNumberRepo } from './telco-numbers.ts';
import { SipTrunkRepo } from './sip-trunks.ts';
import { AssignmentRepo } from './assignments.ts';
import { CallRepo } from './calls.ts';
import { SessionRepo } from './sessions.ts';
import { RegistrationRepo } from './registrations.ts';
import { SecretBox } from './secret-box.ts';
import { loadOrCreateSecret } from './data-dir-secrets.ts';

export { SQLITE_DRIVER_PACKAGE } from './sqlite-driver.ts';

export interface Store {
  db: Db;
  secretBox: SecretBox;
  organizations: OrganizationRepo;
  agents: AgentRepo;
  versions: VersionRepo;
  telcoNumbers: TelcoNumberRepo;
  sipTrunks: SipTrunkRepo;
  assignments: AssignmentRepo;
  calls: CallRepo;
  sessions: SessionRepo;
  /** REGISTER bindings of PBXs on digest trunks (callbridge as their registrar). */
  registrations: RegistrationRepo;
  /** Runs fn in one transaction: all of its writes commit together or none does. */
  tx<T>(fn: () => T): T;
  close(): void;
}

export function openStore(dataDir: string, encryptionKey: string): Store {
  const db = openDatabase(dataDir);
  const secretBox = new SecretBox(loadOrCreateSecret(dataDir, 'encryption-key', encryptionKey));
  const calls = new CallRepo(db);
  return {
    db,
    secretBox,
    organizations: new OrganizationRepo(db),
    agents: new AgentRepo(db),
    versions: new VersionRepo(db),
    telcoNumbers: new TelcoNumberRepo(db, secretBox),
    sipTrunks: new SipTrunkRepo(db, secretBox),
    assignments: new AssignmentRepo(db),
    calls,
    sessions: new SessionRepo(db, calls),
    registrations: new RegistrationRepo(db),
    tx: <T>(fn: () => T): T => db.transaction(fn)(),
    close: () => {
      if (db.open) db.close();
    },
  };
}
