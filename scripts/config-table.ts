/**
 * Prints the configuration table of README.md from the convict schema, so the documentation
 * cannot drift from the code: `npx tsx scripts/config-table.ts`.
 */
import { configSchema } from '../src/config.ts';

interface Leaf {
  doc: string;
  default: unknown;
  env?: string;
  format?: unknown;
  sensitive?: boolean;
}

const rows: string[] = ['| setting | env var | default | meaning |', '|---|---|---|---|'];
const walk = (node: Record<string, unknown>, path: string[]) => {
  for (const [k, v] of Object.entries(node)) {
    const leaf = v as Leaf;
    if (leaf && typeof leaf === 'object' && 'doc' in leaf) {
      const def = Array.isArray(leaf.default) && leaf.default.length > 0 && typeof leaf.default[0] === 'object' ? '(see config/example.json)' : `\`${JSON.stringify(leaf.default)}\``;
      const values = Array.isArray(leaf.format) ? ` One of ${leaf.format.map((f) => `\`${String(f)}\``).join(', ')}.` : '';
      rows.push(`| \`${[...path, k].join('.')}\` | ${leaf.env ? `\`${leaf.env}\`` : ''} | ${def} | ${leaf.doc}${values} |`);
    } else {
      walk(v as Record<string, unknown>, [...path, k]);
    }
  }
};
walk(configSchema as unknown as Record<string, unknown>, []);
process.stdout.write(rows.join('\n') + '\n');
