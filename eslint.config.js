import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';


// The dependency direction of DESIGN.md, between the folders of src/ and between the SIP layers:
//   main | cli | sip-service -> api | bridge | sip -> session | agent | telco | events -> media | store -> domain
// (config.ts and log.ts are leaves for the middle tiers; coded-error.ts and log-fields.ts import nothing and are
// open to all). A wrong import fails `npm run lint`, naming the rule it breaks.
const ROOT_MODULES = 'main|cli|sip-service';
/** An import of one of src/'s folders (or top-level modules), from any depth below src/. */
const folders = (names) => ({ regex: `^(\\.\\./)+(${names})(/|\\.ts$)`, message: '' });
/** Outside sip/, a SIP layer is imported through its entry module only. */
const SIP_ENTRY = { regex: '^(\\.\\.?/)+sip/[a-z]+/(?!index\\.ts$)', message: 'import a SIP layer through its entry module, sip/<layer>/index.ts' };
const rule = (files, forbidden, why) => ({
  files,
  rules: {
    'no-restricted-imports': ['error', { patterns: [...forbidden.map((names) => ({ ...folders(names), message: why })), ...(files[0].startsWith('src/sip/') ? [] : [SIP_ENTRY])] }],
  },
});
/** sip/'s folder rule; the SIP layers' rules below repeat its patterns. */
const SIP_FOLDER_RULE = rule(['src/sip/**/*.ts'], ['api|bridge|session|agent|telco|store|config|log|' + ROOT_MODULES], 'sip/ knows nothing of agents, sessions or the store: it hands routed calls to whoever registered (DESIGN.md)');
const direction = [
  rule(['src/domain/**/*.ts'], ['api|bridge|sip|session|agent|telco|media|store|config|log|' + ROOT_MODULES], 'domain/ imports nothing of ours (DESIGN.md)'),
  rule(['src/media/**/*.ts'], ['api|bridge|sip|session|agent|telco|store|domain|config|log|' + ROOT_MODULES], 'media/ imports nothing of ours (DESIGN.md)'),
  rule(['src/store/**/*.ts'], ['api|bridge|sip|session|agent|telco|media|' + ROOT_MODULES], 'store/ sits below everything but domain/ (DESIGN.md)'),
  rule(['src/session/**/*.ts'], ['api|bridge|sip|agent|telco|' + ROOT_MODULES], 'session/ sits below api/bridge/sip and never imports the agent runtime (main.ts injects it)'),
  rule(['src/agent/**/*.ts', 'src/telco/**/*.ts'], ['api|bridge|sip|' + ROOT_MODULES], 'agent/ and telco/ sit below api/, bridge/ and sip/ (DESIGN.md)'),
  rule(['src/events/**/*.ts'], ['api|bridge|sip|session|agent|telco|' + ROOT_MODULES], 'events/ (webhook endpoints, the outbox, delivery, signing) sits beside session/agent/telco and is wired in by the composition root'),
  rule(['src/api/**/*.ts'], ['bridge|sip|' + ROOT_MODULES], 'api/ does not reach into the bridge or SIP; the composition root wires them'),
  rule(['src/bridge/**/*.ts'], ['api|' + ROOT_MODULES], 'bridge/ does not import the API or the composition root'),
  rule(['src/*.ts'], [], ''),
  SIP_FOLDER_RULE,
];
/** Between SIP layers: only downward, and only through the layer's entry module (index.ts). */
const SIP_LAYERS = ['message', 'transport', 'transaction', 'dialog', 'digest', 'sdp', 'ua'];
const sipBelow = { message: [], transport: ['message'], transaction: ['message', 'transport'], dialog: ['message', 'transport', 'transaction'], digest: [], sdp: [], ua: ['message', 'transport', 'transaction', 'dialog', 'digest', 'sdp'] };
const sipLayers = SIP_LAYERS.map((layer) => {
  const notBelow = SIP_LAYERS.filter((l) => l !== layer && !sipBelow[layer].includes(l));
  const patterns = [{ regex: '^\\.\\./(' + SIP_LAYERS.join('|') + ')/(?!index\\.ts$)', message: 'import another SIP layer through its entry module, ../<layer>/index.ts' }];
  if (notBelow.length > 0) patterns.push({ regex: `^\\.\\./(${notBelow.join('|')})/`, message: `the SIP ${layer} layer may import only ${sipBelow[layer].join(', ') || 'no other SIP layer'} (message <- transport <- transaction <- dialog <- ua; digest and sdp stand alone)` });
  // The folder rule above stays in force for these files: flat config replaces a rule's options, so repeat it.
  patterns.push(...SIP_FOLDER_RULE.rules['no-restricted-imports'][1].patterns);
  return { files: [`src/sip/${layer}/**/*.ts`], rules: { 'no-restricted-imports': ['error', { patterns }] } };
});

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'data/', 'coverage/'] },
  js.configs.recommended,
  { languageOptions: { globals: globals.node } },
  // The operator console runs in the browser (docs/console.md): browser globals, not Node's.
  { files: ['web/**/*.js'], languageOptions: { globals: globals.browser } },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Tests read JSON response bodies of many shapes; `any` there is the honest type.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The store is asynchronous (docs/decisions.md, "Store: one set of repositories, two
    // databases"): a promise nobody awaits or catches loses its error and its order, and a
    // promise where a value is expected (a condition, a callback whose result is ignored) is
    // always truthy or never awaited. Type-aware, so for src/ only.
    files: ['src/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  {
    // One process must never load both better-sqlite3 majors: 12 aborts Node 24 at a later GC
    // (src/store/sqlite-driver.ts picks the one that runs here). Tests and benches open
    // databases through that module's `Database`, as the daemon does.
    files: ['test/**/*.ts', 'bench/**/*.ts', 'scripts/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: [{ name: 'better-sqlite3', allowTypeImports: true, message: "open SQLite through src/store/sqlite-driver.ts's Database (the better-sqlite3 major that runs on this Node)" }] }],
    },
  },
  ...direction,
  ...sipLayers,
);
