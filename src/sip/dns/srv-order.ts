/**
 * RFC 2782 target selection: SRV records in ascending priority; within one priority, a weighted
 * random order (each pick's chance proportional to its weight, weight-0 records placed first in
 * the running sum so they are picked only rarely, as the RFC's algorithm does).
 */

export interface Weighted {
  priority: number;
  weight: number;
}

/**
 * The order in which to try `records` (a new array). `random` returns 0 <= x < 1 (injectable so
 * tests can pin the draw).
 */
export function orderSrv<T extends Weighted>(records: readonly T[], random: () => number = Math.random): T[] {
  const byPriority = new Map<number, T[]>();
  for (const r of records) {
    const list = byPriority.get(r.priority) ?? [];
    list.push(r);
    byPriority.set(r.priority, list);
  }
  const out: T[] = [];
  for (const priority of [...byPriority.keys()].sort((a, b) => a - b)) {
    // RFC 2782: "all those with weight 0 are placed at the beginning of the list", the rest in
    // any order: ascending weight, so the same draw gives the same order whatever order the
    // DNS answer listed them in.
    const left = [...byPriority.get(priority)!].sort((a, b) => a.weight - b.weight);
    while (left.length > 0) {
      const total = left.reduce((s, r) => s + r.weight, 0);
      // An integer in [0, total]; the first record whose running sum reaches it is taken.
      const draw = Math.floor(random() * (total + 1));
      let sum = 0;
      let pick = left.length - 1;
      for (let i = 0; i < left.length; i++) {
        sum += left[i]!.weight;
        if (sum >= draw) {
          pick = i;
          break;
        }
      }
      out.push(left.splice(pick, 1)[0]!);
    }
  }
  return out;
}
