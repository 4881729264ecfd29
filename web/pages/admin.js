/**
 * The admin pages (agents, numbers, trunks, keys), mounted by the console's router. Each entry:
 * `{ path, title, component }`; `path` is a hash path such as '/agents' (parameters as ':id'),
 * `title` the navigation label (entries without one are not in the navigation).
 */
export const adminPages = [];
