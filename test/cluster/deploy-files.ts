/**
 * The files of deploy/ as the cluster tests read them: the directory, and docker-compose.yml
 * parsed (YAML, merge keys resolved). Compose itself is not run here (no Docker): the tests hold
 * the file to the configs they do run.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const DEPLOY = fileURLToPath(new URL('../../deploy', import.meta.url));

/** The services of deploy/docker-compose.yml; undefined when no YAML library is installed (it is a transitive dependency, not ours). */
export async function composeServices(): Promise<Record<string, any> | undefined> {
  let YAML: typeof import('yaml');
  try {
    YAML = await import('yaml');
  } catch {
    return undefined;
  }
  return YAML.parse(readFileSync(join(DEPLOY, 'docker-compose.yml'), 'utf8'), { merge: true }).services as Record<string, any>;
}
