/**
 * The admin pages (agents, numbers, trunks, keys), mounted by the console's router. Each entry:
 * `{ path, title, component }`; `path` is a hash path such as '/agents' (parameters as ':id'),
 * `title` the navigation label (entries without one are not in the navigation).
 * docs/console-admin.md describes them.
 */
import { AgentPage, AgentsPage } from './agents.js';
import { NumbersPage } from './numbers.js';
import { TrunksPage } from './trunks.js';
import { KeysPage } from './keys.js';

export const adminPages = [
  { path: '/agents', title: 'Agents', component: AgentsPage },
  { path: '/agents/:id', component: AgentPage },
  { path: '/numbers', title: 'Numbers', component: NumbersPage },
  { path: '/trunks', title: 'Trunks', component: TrunksPage },
  { path: '/keys', title: 'API keys', component: KeysPage },
];
