import { randomUUID } from 'node:crypto';

/** uuid of any version (the API's "uuid string"); v4 is what we generate. */
export const UUID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
const UUID_RE = new RegExp(UUID_PATTERN);

export const newId = (): string => randomUUID();
export const isUuid = (s: string): boolean => UUID_RE.test(s);
/** ISO 8601 UTC with milliseconds, as every timestamp of the API. */
export const nowIso = (): string => new Date().toISOString();
