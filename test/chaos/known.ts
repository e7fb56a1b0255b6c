/**
 * Known-open violations (`--known-open`, test/chaos/known-open.json): which violations a run
 * excuses, each entry a mode x oracle x fault kinds with the issue item it is, narrowed by the
 * schedule's shape (a rate with costs, heavy weights, fewer units than replicas...).
 */
import { readFileSync } from 'node:fs';
import { rateShareOf } from '../../src/redis/leased-rate.js';
import type { OracleKind, Violation } from './oracle.js';
import type { FaultKind, Mode, Schedule } from './plan.js';

export interface KnownOpen {
  mode: Mode;
  oracle: OracleKind;
  /** Fault kinds (or 'none') whose violations of this oracle are excused; '*' any. */
  kinds: (FaultKind | 'none' | '*')[];
  item: string;
  note?: string;
  /**
   * Only schedules whose heaviest weight is at or above the cap's units per replica (cap /
   * replicas): every heavy head waits for a walk (docs/shared-gates.md, leased shares, weights).
   */
  heavy?: boolean;
  /**
   * Only schedules whose costliest call is more than the burst share of the rate's equal split
   * sends at once (cost − 1 > floor(burst × floor(limit / replicas) / limit), under a rate they
   * run under): each such call idles its process that many intervals (docs/rates.md, Costs).
   */
  overShare?: boolean;
  /** Only schedules with fewer units than replicas (cap < replicas): a handoff per turn. */
  small?: boolean;
  /**
   * Only schedules whose rate (the one they start with) has fewer calls per window than
   * replicas: the shares move from process to process as calls are sent (docs/rates.md).
   */
  fewCalls?: boolean;
}
/** The entries of a known-open file (test/chaos/known-open.json), none without one. */
export function readKnown(file: string | undefined): KnownOpen[] {
  return file === undefined
    ? []
    : (JSON.parse(readFileSync(file, 'utf8')) as { open: KnownOpen[] }).open;
}
const overShare = (s: Schedule, v: Violation) => {
  const cost = Math.max(...s.config.costs);
  // A fresh fleet is judged before the first step: only the rate it starts with (seed 98056,
  // rate 25/500 ms burst 8 at the start, was excused by a later set-rate's burst 2).
  const rates = [s.config.rate, ...(v.oracle === 'fresh' ? [] : s.steps.map((step) => step.rate))];
  return rates.some((rate) => {
    if (rate === undefined) return false;
    const split = Math.floor(rate.limit / s.config.replicas);
    return cost - 1 > rateShareOf(rate, split);
  });
};
const small = (s: Schedule) => s.config.cap < s.config.replicas;
const fewCalls = (s: Schedule) =>
  s.config.rate !== undefined && s.config.rate.limit < s.config.replicas;
// At cap / replicas too (seed 80110: cap 6 over 2 processes, weights up to 3, callers 8 and 1):
// a call that needs a whole equal part waits for a walk whenever its process's block follows a
// lighter demand down, and its process's rate share idles meanwhile.
const heavy = (s: Schedule) => {
  const weight = Math.max(...s.config.weights);
  return weight > 1 && weight >= s.config.cap / s.config.replicas;
};
/** The known-open entry that excuses `v` in `schedule`, if any. */
export const excusedBy = (known: readonly KnownOpen[], schedule: Schedule, v: Violation) =>
  known.find(
    (k) =>
      k.mode === schedule.config.mode &&
      (k.heavy !== true || heavy(schedule)) &&
      (k.overShare !== true || overShare(schedule, v)) &&
      (k.small !== true || small(schedule)) &&
      (k.fewCalls !== true || fewCalls(schedule)) &&
      k.oracle === v.oracle &&
      (k.kinds.includes('*') || v.kinds.some((kind) => k.kinds.includes(kind))),
  );
