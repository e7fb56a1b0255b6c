/**
 * What a gate measures about its permits, outside the counting core: wait and hold histograms,
 * the hold-time estimate behind `retryAfterMs`, the holders' last sign of life, and whether
 * acquire sites are traced. A gate calls its observer only when one is attached, so an
 * unobserved gate reads no clock and records no sample per permit.
 *
 * A gate is observed from construction when `observe: true`, `maxHold`, `maxHoldTotal` or
 * `leakWarnAfter` is set (every HostLimiter gate), and from the first read of what only an
 * observer knows: `stats()`, `waitTimes`, `holdTimes`, `lastProgressAt`, a leak detector, a
 * metrics collector or a deadline check.
 */
import { DurationHistogram } from '../common/histogram.js';
import type { Holders } from './holders.js';
import { DEFAULT_CLASS, type QueueClass } from './wait-queue.js';

/** Weight of a new hold time in the moving estimate `retryAfterMs` uses. */
const HOLD_ESTIMATE_WEIGHT = 0.1;

export class GateObserver {
  /** Grant wait times, ms (0 for an immediate grant). */
  readonly waitTimes = new DurationHistogram();
  /** Hold times, ms. */
  readonly holdTimes = new DurationHistogram();
  /** Per priority class, in the gate's class order: wait times of that class's grants. */
  readonly classWaits: readonly DurationHistogram[];
  /** Exponentially weighted hold time, ms; `undefined` before the first release. */
  holdEstimate: number | undefined = undefined;
  /** Clock of the holders' last sign of life: a grant, a release or a permit's progress. */
  lastProgressAt: number;
  /** Capture a stack per acquire (a leak detector turns it on). */
  traceAcquires = false;

  /** An observer for a gate first measured `now`: the permits it holds are stamped `now`. */
  static attach(now: number, classes: readonly QueueClass[], holders: Holders): GateObserver {
    const named = classes.length > 1 || classes[0]!.name !== DEFAULT_CLASS;
    const observer = new GateObserver(now, named ? classes.length : 0);
    for (let p = holders.oldest; p !== undefined; p = p.next) {
      if (Number.isNaN(p.acquiredAt)) p.acquiredAt = p.aliveAt = now;
    }
    return observer;
  }

  constructor(now: number, classes: number) {
    this.lastProgressAt = now;
    const waits: DurationHistogram[] = [];
    for (let i = 0; i < classes; i++) waits.push(new DurationHistogram());
    this.classWaits = waits;
  }

  granted(waitedMs: number, now: number, classIndex: number): void {
    this.waitTimes.record(waitedMs);
    this.classWaits[classIndex]?.record(waitedMs);
    this.lastProgressAt = now;
  }

  released(heldMs: number, now: number): void {
    this.holdTimes.record(heldMs);
    const estimate = this.holdEstimate;
    this.holdEstimate =
      estimate === undefined ? heldMs : estimate + (heldMs - estimate) * HOLD_ESTIMATE_WEIGHT;
    this.lastProgressAt = now;
  }
}
