/**
 * Sliding windows over a log of times (ms, ascending): the most entries (or summed weights) in
 * any half-open window `[t, t + windowMs)`, each window starting at an entry. A rate's promise,
 * "at most limit + burst in any window of per ms", is `maxInWindow(log, per) <= limit + burst`.
 */
export function maxInWindow(
  times: readonly number[],
  windowMs: number,
  weights?: readonly number[],
): number {
  let best = 0;
  let sum = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    sum += weights?.[end] ?? 1;
    while (times[end]! - times[start]! >= windowMs) {
      sum -= weights?.[start] ?? 1;
      start++;
    }
    if (sum > best) best = sum;
  }
  return best;
}
