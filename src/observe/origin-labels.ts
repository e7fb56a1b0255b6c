/**
 * Which per-origin gates get a metrics label of their own. A partner gate is always labelled with
 * its name; of the per-origin gates, the `maxOriginLabels` origins with the most traffic (calls
 * granted or shed, decaying with a half-life of a minute) get their origin key, the rest
 * `(other origins)`. By traffic, not by arrival: a flood of one-call origins (URLs an attacker
 * chooses) cannot take the labels of the unnamed hosts a service really calls (issue 36). An
 * origin whose traffic falls below half of a newcomer's gives its label up; its series ends (its
 * later calls count in `(other origins)`). The overflow gate of a limiter past `maxHosts` is a
 * label of its own.
 */

import { ACQUIRED, SHED_FULL, SHED_TIMEOUT } from './gate-totals.js';

/** The label of per-origin gates past `maxOriginLabels` (the retry layer uses the same). */
export const OTHER_ORIGINS = '(other origins)';
/**
 * The stats key and gate name of a limiter's overflow gate: origins that found every
 * per-origin place taken share it (`HostLimiter`, `maxHosts`). A label of its own.
 */
export const OVERFLOW_ORIGINS = '(overflow origins)';
/** Default `maxOriginLabels`: enough to name the few unknown hosts a service really calls. */
export const DEFAULT_MAX_ORIGIN_LABELS = 20;
/** Half-life of an origin's traffic score, which picks the origins that get a label. */
const TRAFFIC_HALF_LIFE_MS = 60_000;
/** A newcomer takes the weakest origin label only with more than this many times its traffic. */
const RELABEL_MARGIN = 2;

/** The origins labelled now, and the traffic scores that pick them; one per collector. */
export class OriginLabels {
  readonly #max: number;
  /** Origins with a label of their own now (at most `max`), picked by traffic. */
  readonly #labels = new Set<string>();
  /** Traffic score per origin (live per-origin gates and labelled origins only). */
  #traffic = new Map<string, number>();
  /** When (the collector's clock) the scores were last decayed. */
  #trafficAt: number | undefined = undefined;

  constructor(max: number) {
    this.#max = max;
  }

  /** The origin has a label of its own (as of the last {@link rank}). */
  has(key: string): boolean {
    return this.#labels.has(key);
  }

  /**
   * After a read: decays every origin's score, adds the calls each made since the previous read,
   * and gives the labels to the busiest. A newcomer takes the weakest label only with more than
   * {@link RELABEL_MARGIN} times its score, so two origins of equal traffic do not trade it at
   * every read. Returns the labels given up: their series end (the caller drops their totals,
   * so memory stays bounded).
   */
  rank(calls: Map<string, number>, now: number): string[] {
    const elapsed = this.#trafficAt === undefined ? 0 : Math.max(0, now - this.#trafficAt);
    this.#trafficAt = now;
    const decay = 0.5 ** (elapsed / TRAFFIC_HALF_LIFE_MS);
    const scores = new Map<string, number>();
    for (const key of new Set([...calls.keys(), ...this.#labels])) {
      scores.set(key, (this.#traffic.get(key) ?? 0) * decay + (calls.get(key) ?? 0));
    }
    this.#traffic = scores;
    const labels = this.#labels;
    const dropped: string[] = [];
    const candidates = [...scores]
      .filter(([key, score]) => score > 0 && !labels.has(key))
      .sort((a, b) => b[1] - a[1]);
    for (const [key, score] of candidates) {
      if (labels.size < this.#max) {
        labels.add(key);
        continue;
      }
      let weakest: string | undefined;
      let weakestScore = Number.POSITIVE_INFINITY;
      for (const label of labels) {
        const s = scores.get(label) ?? 0;
        if (s < weakestScore) {
          weakest = label;
          weakestScore = s;
        }
      }
      if (weakest === undefined || score <= RELABEL_MARGIN * weakestScore) break; // sorted
      labels.delete(weakest);
      dropped.push(weakest);
      labels.add(key);
    }
    return dropped;
  }
}

/** Calls a gate granted or shed between two reads: the traffic that earns an origin its label. */
export function callsSince(current: Float64Array, previous: Float64Array | undefined): number {
  let calls = 0;
  for (const i of [ACQUIRED, SHED_FULL, SHED_TIMEOUT]) calls += current[i]! - (previous?.[i] ?? 0);
  return calls;
}
