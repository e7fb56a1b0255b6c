/**
 * What a set (`setSharedLimit`, `setSharedRate`) may have left in Redis, as the fault campaign's
 * fleet records it (test/chaos/fleet.ts): a set's answer does not say when Redis ran it.
 */
import type { Rate } from './plan.js';

/**
 * The looser of two caps, or of two rates when one allows as much as the other in every way;
 * of two rates neither of which covers the other, `b` (the value the set asked for).
 */
export function looser(a: unknown, b: unknown): unknown {
  if (typeof a === 'number' && typeof b === 'number') return Math.max(a, b);
  const [x, y] = [a as Rate, b as Rate];
  const covers = (p: Rate, q: Rate) =>
    p.limit / p.per >= q.limit / q.per && p.burst >= q.burst && p.limit >= q.limit;
  if (covers(x, y)) return x;
  if (covers(y, x)) return y;
  // Neither covers the other (80 per s burst 3, 30 per s burst 9): one that covers both, at the
  // faster one's `per`. Before, the new one was taken: a set of 30/s burst 9 that Redis refused
  // (out of memory) judged a fleet rightly at 80/s against 39 (campaign seed 112189).
  const [fast, slow] = x.limit / x.per >= y.limit / y.per ? [x, y] : [y, x];
  return {
    limit: Math.max(fast.limit, Math.ceil((slow.limit * fast.per) / slow.per)),
    per: fast.per,
    burst: Math.max(fast.burst, slow.burst),
  };
}

/**
 * A set (`entry`, pushed on `series` when it was sent) answered: one that failed may as well not
 * have run (the looser of it and the value `before` it), and one answered after later sets were
 * sent may have run after them (its link slowed: campaign seed 133034, a replica's 30 per s sent
 * at 1.79 s landed after another's 5 per 500 ms sent at 2.12 s, and the fleet rightly ran at 30
 * per s, judged against 6 per 500 ms): from each of those on, the looser of the two.
 */
export function answeredSet(
  series: [number, unknown][],
  entry: [number, unknown],
  ok: boolean,
  before: unknown,
): void {
  if (!ok && before !== undefined) entry[1] = looser(before, entry[1]);
  const at = series.indexOf(entry);
  if (at < 0) return;
  for (let i = at + 1; i < series.length; i++) series[i]![1] = looser(series[i]![1], entry[1]);
}

/**
 * A run recorded before `answeredSet` looked at later sets (stop 52): each set's later sets sent
 * before it was answered (`applied`: its step's start and end) judged as `answeredSet` would.
 */
export function settleRecorded(
  series: [number, unknown][],
  applied: readonly { at: number; end: number }[],
): void {
  for (const a of applied) {
    const i = series.findIndex(([t]) => t >= a.at - 1 && t <= a.end);
    if (i < 0) continue;
    for (let j = i + 1; j < series.length && series[j]![0] < a.end; j++) {
      series[j]![1] = looser(series[j]![1], series[i]![1]);
    }
  }
}
