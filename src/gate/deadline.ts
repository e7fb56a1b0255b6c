/**
 * Deadlines carried from an inbound request to its outbound calls: parsing a client's budget
 * from a header, and the early-shed rule that refuses a call which cannot finish in time.
 */

import { DeadlineShedError } from '../common/errors.js';
import { channels } from './diagnostics.js';
import type { Semaphore } from './semaphore.js';
import { MAX_RETRY_AFTER_MS } from './semaphore-options.js';

/** Longest budget a header can carry, ms (~24.8 days: setTimeout's bound). Longer counts as this. */
export const MAX_BUDGET_MS = 2_147_483_647;

const GRPC_UNIT_MS: Record<string, number> = {
  H: 3_600_000,
  M: 60_000,
  S: 1000,
  m: 1,
  u: 0.001,
  n: 0.000_001,
};
// gRPC's TimeoutValue is at most 8 ASCII digits; its unit one case-sensitive letter.
const GRPC_TIMEOUT = /^(\d{1,8})([HMSmun])$/;

const DURATION_UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
// A plain number is milliseconds; 16 digits is past any budget, so no float surprises.
const DURATION = /^(\d{1,16}(?:\.\d{1,6})?)(ms|s|m|h)?$/;

/**
 * A `grpc-timeout` value (`100m`, `2S`, `1H`; units n, u, m, S, M, H) in ms, or `undefined`
 * when it is not one. `0m` is a valid, already expired budget.
 *
 * @example parseGrpcTimeout('250m') // 250
 */
export function parseGrpcTimeout(value: string): number | undefined {
  const match = GRPC_TIMEOUT.exec(value.trim());
  if (match === null) return undefined;
  return Math.min(MAX_BUDGET_MS, Number(match[1]) * GRPC_UNIT_MS[match[2]!]!);
}

/**
 * A duration header value in ms: a plain number of milliseconds (`250`, `1.5`) or a number
 * with a unit `ms`, `s`, `m`, `h` (`300ms`, `2s`, `1.5m`). `undefined` when it is not one:
 * negative, empty, several values (`100, 200`), or any other text.
 *
 * @example parseDuration('2s') // 2000
 */
export function parseDuration(value: string): number | undefined {
  const match = DURATION.exec(value.trim());
  if (match === null) return undefined;
  const ms = Number(match[1]) * DURATION_UNIT_MS[match[2] ?? 'ms']!;
  return Number.isFinite(ms) ? Math.min(MAX_BUDGET_MS, ms) : undefined;
}

/**
 * `ms` as a `grpc-timeout` value: whole milliseconds (`250m`), or whole seconds (`S`) past
 * gRPC's 8 digits. Rounded down, so a partner never gets more time than is left.
 */
export function formatGrpcTimeout(ms: number): string {
  const whole = Math.max(0, Math.floor(ms));
  return whole <= 99_999_999 ? `${whole}m` : `${Math.min(99_999_999, Math.floor(whole / 1000))}S`;
}

/** `ms` as a duration header value: whole milliseconds, rounded down. */
export function formatDuration(ms: number): string {
  return String(Math.max(0, Math.floor(ms)));
}

/** The counters and shape {@link expectedWaitMs} reads; a `Semaphore` has them all. */
export interface GateLoad {
  readonly limit: number;
  readonly held: number;
  readonly queued: number;
}

/**
 * How long a call arriving now should expect to wait for a permit, ms: 0 when a permit is free
 * and nobody waits; otherwise `(queued + 1) / limit × holdMs` — the arrival is served after the
 * `queued` callers ahead of it and one more release, and the `limit` holders release at about
 * one per `holdMs / limit`. `holdMs` is the gate's typical (p50) hold time.
 */
export function expectedWaitMs(gate: GateLoad, holdMs: number): number {
  if (gate.queued === 0 && gate.held < gate.limit) return 0;
  return ((gate.queued + 1) / gate.limit) * holdMs;
}

const deadlineSheds = new WeakMap<Semaphore, number>();

/** Calls refused by the deadline rule on `gate` so far (`shed_total{reason="deadline"}`). */
export function deadlineShedCount(gate: Semaphore): number {
  return deadlineSheds.get(gate) ?? 0;
}

/**
 * The early-shed rule: a `DeadlineShedError` when `remainingMs` is shorter than the gate's
 * expected wait (plus `extraWaitMs`, e.g. a per-request gate in front of it) plus its p50 hold
 * time; `undefined` when the call may go ahead. A gate with no completed call yet knows no
 * typical hold time and sheds nothing. A refusal touches no queue slot and no permit; it is
 * counted per gate and published on `hostgate:shed` with reason `deadline`.
 */
export function shedForDeadline(
  gate: Semaphore,
  remainingMs: number,
  extraWaitMs = 0,
): DeadlineShedError | undefined {
  const holds = gate.holdTimes;
  if (holds.count === 0) return undefined;
  const holdMs = holds.quantile(0.5);
  // A shared gate (hostgate/redis) offers its cluster-wide load: other replicas' holders and
  // waiters are ahead of this call too.
  const load = (gate as { load?: GateLoad }).load ?? gate;
  const waitMs = expectedWaitMs(load, holdMs) + extraWaitMs;
  if (remainingMs >= waitMs + holdMs) return undefined;
  // Retry-After: when the queue ahead has drained (the caller's next request brings a new budget).
  const retryAfterMs = Math.min(MAX_RETRY_AFTER_MS, Math.max(1, Math.ceil(waitMs)));
  const error = new DeadlineShedError(gate.name, remainingMs, waitMs + holdMs, retryAfterMs);
  deadlineSheds.set(gate, (deadlineSheds.get(gate) ?? 0) + 1);
  const shedChannel = channels.shed;
  if (shedChannel.hasSubscribers) {
    shedChannel.publish({
      gate,
      partner: gate.name,
      reason: 'deadline',
      error,
      queued: gate.queued,
    });
  }
  return error;
}
