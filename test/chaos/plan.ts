/**
 * The fault campaign's schedules (issue 32, "The campaign"): a fleet and the faults it meets,
 * drawn from one seed, so any schedule replays from its seed alone. Pure: no Redis, no
 * processes (test/chaos/plan.test.ts checks it in milliseconds).
 *
 * A schedule is a fleet configuration (mode, replicas, callers, cap, rate, weights, costs, call
 * lengths, lease, timeouts, client) and 1–3 steps, each a fault drawn at random with a random
 * start and length, shorter or longer than the lease. Replicas are *slots* 0..n-1: a SIGKILL or
 * a clean close empties a slot, a new start fills it with a new process; a step aimed at an
 * empty slot does nothing, so dropping steps (the shrinker) never makes a schedule invalid.
 */
import { prng } from '../helpers/prng.js';

export type Mode = 'fifo' | 'leased';
export const MODES: readonly Mode[] = ['fifo', 'leased'];

/** Every fault the campaign draws from (`--faults` filters by these names). */
export const FAULT_KINDS = [
  'redis-stop', // SIGSTOP, then SIGCONT after `ms`
  'redis-restart-empty', // SIGKILL, down `ms`, started again without its data
  'redis-restart-data', // SAVE, SIGKILL, down `ms`, started again from the dump
  'flushall', // FLUSHALL
  'redis-oom', // maxmemory 1 + noeviction for `ms` (every write answers OOM), then restored
  'client-pause', // CLIENT PAUSE `ms` ALL
  'debug-sleep', // DEBUG SLEEP `ms`
  'clock-step', // Redis's clock steps by `ms` (forward; `sign` -1 back): emulated, see redis.ts
  'replica-stop', // SIGSTOP of a replica for `ms`
  'replica-kill', // SIGKILL of a replica; a new one starts `restartMs` later (if set)
  'replica-roll', // rolling deploy: `count` replicas closed cleanly and replaced, `every` ms apart
  'replica-stall', // the replica's event loop blocked `ms` (a synchronous busy loop)
  'demand-shift', // callers of one replica (or all) set to `callers`
  'set-limit', // setSharedLimit(`value`) from a live replica
  'set-rate', // setSharedRate(`rate`) from a live replica (rated gates only)
  // The replica cut off from Redis for `ms`, the others not (test/chaos/link.ts): `cut`
  // blackhole (nothing passes, held until it heals) or reset (connections reset and refused).
  // Drawn from a stream of its own (generateSchedule), so every other schedule stayed as it was.
  'replica-partition',
  // The replica's link to Redis (or every replica's: slot -1) slowed for `ms`: every chunk
  // waits `delay` ms each way, about a command timeout (test/chaos/link.ts). A stream of its own.
  'replica-slow',
  // Redis SAVEd, `stale` ms later SIGKILLed, down `ms`, started again from that dump: a restart
  // from a snapshot older than the state (`save` points, a failover to a lagging replica): what
  // changed between the SAVE and the kill is lost, the rest is there. A stream of its own.
  'redis-restart-stale',
] as const;

/** Kinds drawn from streams of their own, added after thousands of seeds had run. */
const OWN_STREAM: ReadonlySet<FaultKind> = new Set([
  'replica-partition',
  'replica-slow',
  'redis-restart-stale',
]);
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Faults that make Redis unreachable or slow for `ms`. */
export const REDIS_AWAY: ReadonlySet<FaultKind> = new Set([
  'redis-stop',
  'redis-restart-empty',
  'redis-restart-data',
  'redis-restart-stale',
  'redis-oom',
  'client-pause',
  'debug-sleep',
]);

export interface Rate {
  limit: number;
  per: number;
  burst: number;
}

export interface FleetConfig {
  mode: Mode;
  /** Replica slots at the start. */
  replicas: number;
  /** Concurrent callers per slot (closed loops: call, release, call again). */
  callers: number[];
  cap: number;
  rate?: Rate;
  /** Weights a call draws from (uniformly). */
  weights: number[];
  /** Rate costs a call draws from (uniformly; [1] without a rate). */
  costs: number[];
  /** A partner call lasts [min, max) ms. */
  callMs: [number, number];
  leaseMs: number;
  /** FIFO: the store's heartbeat (undefined: its default, lease / 5). */
  heartbeatMs?: number;
  /** Leased: the gate's refresh interval (undefined: its default, min(1000, lease / 2)). */
  refreshMs?: number;
  commandTimeoutMs: number;
  onStoreError: 'reject' | 'local';
  client: 'ioredis' | 'node-redis';
  /** Every call's wait deadline (ms): far above a fair wait, so a timeout is a finding. */
  queueTimeout: number;
  /** From the fleet's start to the end of the schedule (then every replica closes). */
  durationMs: number;
}

export interface Step {
  /** Ms after the fleet's start. */
  at: number;
  kind: FaultKind;
  /** Length (stop, down time, pause, sleep, stall) or size (clock step), ms. */
  ms?: number;
  /** clock-step: +1 forward (Redis's timestamps moved back), -1 back. */
  sign?: 1 | -1;
  /** Replica slot (replica-*, set-*: the slot that calls setShared*); demand-shift -1: all. */
  slot?: number;
  /** replica-kill: a new process starts in the slot this long after (undefined: never). */
  restartMs?: number;
  /** replica-roll: how many slots, one after another. */
  count?: number;
  /** replica-roll: ms between replacements. */
  every?: number;
  /** demand-shift: the new number of callers. */
  callers?: number;
  /** set-limit: the new cap. */
  value?: number;
  /** set-rate: the new rate. */
  rate?: Rate;
  /** replica-partition: how the replica's link to Redis is cut (test/chaos/link.ts). */
  cut?: 'blackhole' | 'reset';
  /** replica-slow: ms each chunk waits, each way. */
  delay?: number;
  /** redis-restart-stale: ms from the SAVE to the kill (the dump is that much behind). */
  stale?: number;
}

export interface Schedule {
  seed: number;
  mode: Mode;
  config: FleetConfig;
  steps: Step[];
}

type Random = () => number;
const int = (r: Random, lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
const pick = <T>(r: Random, items: readonly T[]): T => items[Math.floor(r() * items.length)]!;

/**
 * Until a client sees Redis again after `away` ms without it: it reconnects on its own backoff
 * (after an outage: ioredis 6 up to 5 s + 200 ms jitter, node-redis up to 2 s + 200 ms; seed
 * 99370, ioredis, 4 s away: 2.9 s after Redis was back).
 */
export function reconnectMs(client: FleetConfig['client'], away: number): number {
  return Math.min(client === 'ioredis' ? 5000 : 2000, Math.max(0, away)) + 200;
}

/** The configuration's derived timings (defaults as the library resolves them). */
export function timings(config: FleetConfig) {
  const heartbeatMs = config.heartbeatMs ?? Math.max(1, Math.floor(config.leaseMs / 5));
  const refreshMs = config.refreshMs ?? Math.min(1000, Math.floor(config.leaseMs / 2));
  /** How often a process talks to Redis without being asked: heartbeat or refresh. */
  const tickMs = config.mode === 'fifo' ? heartbeatMs : refreshMs;
  return { heartbeatMs, refreshMs, tickMs };
}

function drawRate(r: Random): Rate {
  const per = pick(r, [500, 1000]);
  // At least 10 calls a second: a gap between calls at the rate is at most 100 ms.
  const limit = per === 500 ? pick(r, [5, 10, 15, 25, 40]) : pick(r, [10, 20, 30, 50, 80]);
  const burst = int(r, 0, Math.min(10, Math.floor(limit / 2)));
  return { limit, per, burst };
}

/**
 * The schedule of `seed` in `mode`: the same seed and mode always give the same schedule
 * (whatever `kinds` is, the fleet is the same; `kinds` only narrows the faults drawn).
 */
export function generateSchedule(
  seed: number,
  mode: Mode,
  kinds: readonly FaultKind[] = FAULT_KINDS,
): Schedule {
  // Two streams: the fleet's draws do not depend on the fault filter.
  const r = prng(seed * 2 + (mode === 'fifo' ? 0 : 1));
  const rf = prng((seed ^ 0x5bd1e995) * 2 + (mode === 'fifo' ? 0 : 1));
  const replicas = 2 + Math.floor(r() ** 1.6 * 7); // 2..8, mostly small fleets
  const callers = Array.from({ length: replicas }, () => int(r, 1, 12));
  const cap = int(r, 1, 10);
  const rated = r() < 0.5;
  const rate = rated ? drawRate(r) : undefined;
  const weights =
    r() < 0.7 || cap === 1 ? [1] : [1, 1, 1, 2, 3].filter((w) => w <= Math.max(1, cap - 1));
  const costs =
    rate === undefined || r() < 0.7 ? [1] : [1, 1, 2, 3].filter((c) => c <= rate.burst + 1);
  // Short calls, and calls that outlast a Redis outage (an LLM's answer, a report).
  const callMs = pick<[number, number]>(r, [
    [5, 30],
    [5, 30],
    [20, 100],
    [20, 100],
    [100, 500],
    [300, 2500],
  ]);
  const leaseMs = pick(r, [1000, 1500, 1500, 2000, 2000, 3000]);
  const heartbeatMs = r() < 0.7 ? undefined : Math.floor(leaseMs / 3);
  const refreshMs = r() < 0.7 ? undefined : Math.floor(leaseMs / 4);
  const commandTimeoutMs = pick(r, [300, 500, 800]);
  const onStoreError = r() < 0.7 ? 'reject' : 'local';
  const client = r() < 0.5 ? 'ioredis' : 'node-redis';
  const config: FleetConfig = {
    mode,
    replicas,
    callers,
    cap,
    ...(rate === undefined ? {} : { rate }),
    weights: weights.length === 0 ? [1] : weights,
    costs: costs.length === 0 ? [1] : costs,
    callMs,
    leaseMs,
    ...(mode === 'fifo' && heartbeatMs !== undefined ? { heartbeatMs } : {}),
    ...(mode === 'leased' && refreshMs !== undefined ? { refreshMs } : {}),
    commandTimeoutMs,
    onStoreError,
    client,
    queueTimeout: 0,
    durationMs: 0,
  };
  config.queueTimeout = deadlineFor(config);

  const allowed = kinds.filter((k) => k !== 'set-rate' || rate !== undefined);
  // A replica's partition or slow link is drawn below, from a stream of its own (added after the
  // campaign had run thousands of seeds: drawn with the rest, it would have changed every one).
  const others = allowed.filter((k) => !OWN_STREAM.has(k));
  const drawn = others.length === 0 ? allowed : others;
  const steps: Step[] = [];
  const count = drawn.length === 0 ? 0 : rf() < 0.6 ? 1 : rf() < 0.75 ? 2 : 3;
  // 40% of the schedules leave the first 4 s alone: the fresh-fleet check needs a second
  // from one refresh after the first call, and a leased gate's first use waits a refresh and a
  // command timeout (up to 1.8 s here).
  let at = rf() < 0.4 ? 4000 + int(rf, 0, 300) : int(rf, 300, 1800);
  for (let i = 0; i < count; i++) {
    steps.push(drawStep(rf, pick(rf, drawn), at, config));
    at += int(rf, 200, 800);
  }
  // One schedule in six (with other faults drawn) also cuts a replica off from Redis, one in
  // eight slows a replica's link (or every replica's), and one in eight restarts Redis from a
  // stale dump.
  for (const [kind, salt, odds] of [
    ['replica-partition', 0x27d4eb2f, 1 / 6],
    ['replica-slow', 0x165667b1, 1 / 8],
    ['redis-restart-stale', 0x7feb352d, 1 / 8],
  ] as const) {
    const rs = prng((seed ^ salt) * 2 + (mode === 'fifo' ? 0 : 1));
    if (drawn !== allowed && allowed.includes(kind) && rs() < odds) {
      steps.push(drawStep(rs, kind, int(rs, 300, 4500), config));
      steps.sort((x, y) => x.at - y.at);
    }
  }
  config.durationMs = durationFor(config, steps);
  return { seed, mode, config, steps };
}

function drawStep(r: Random, kind: FaultKind, at: number, config: FleetConfig): Step {
  const lease = config.leaseMs;
  const length = (lo: number, hi: number) => Math.round(lease * (lo + r() * (hi - lo)));
  const slot = int(r, 0, config.replicas - 1);
  switch (kind) {
    case 'redis-stop':
    case 'redis-oom':
    case 'client-pause':
    case 'debug-sleep':
      return { at, kind, ms: length(0.3, 1.7) };
    case 'redis-restart-empty':
    case 'redis-restart-data':
      return { at, kind, ms: length(0, 1.7) };
    case 'redis-restart-stale':
      // The dump a tenth of a lease to a lease and a half behind: grants and releases, refreshes
      // and expiries of that long are lost.
      return { at, kind, ms: length(0, 1.2), stale: length(0.1, 1.5) };
    case 'flushall':
      return { at, kind };
    case 'clock-step':
      return { at, kind, ms: length(0.3, 2.5), sign: r() < 0.8 ? 1 : -1 };
    case 'replica-stop':
      return { at, kind, slot, ms: length(0.3, 1.7) };
    case 'replica-stall':
      // A busy loop burns a core: at most 2.5 s of it.
      return { at, kind, slot, ms: Math.min(2500, length(0.3, 1.7)) };
    case 'replica-partition':
      // Shorter and longer than the lease (up to 2.5 leases: the others take its units).
      return { at, kind, slot, ms: length(0.3, 2.5), cut: r() < 0.6 ? 'blackhole' : 'reset' };
    case 'replica-slow': {
      // About a command timeout each way: answers before it, just after it, and long after.
      const delay = Math.round(config.commandTimeoutMs * pick(r, [0.3, 0.6, 1, 1.5]));
      return { at, kind, slot: r() < 0.3 ? -1 : slot, ms: length(0.3, 2.5), delay };
    }
    case 'replica-kill':
      return r() < 0.5 ? { at, kind, slot } : { at, kind, slot, restartMs: int(r, 0, 1000) };
    case 'replica-roll':
      return {
        at,
        kind,
        slot,
        count: int(r, 1, Math.min(3, config.replicas)),
        every: int(r, 300, 1000),
      };
    case 'demand-shift':
      return { at, kind, slot: r() < 0.3 ? -1 : slot, callers: int(r, 0, 10) };
    case 'set-limit':
      // Never below the heaviest weight: a call that could never be granted is the caller's
      // error (RangeError), not lost capacity (seed 99343 drew 2 under weights up to 3).
      return { at, kind, slot, value: int(r, Math.max(...config.weights), 12) };
    case 'set-rate': {
      // A new rate whose burst still lets the fleet's costliest call through (cost ≤ burst + 1),
      // as the first one was drawn: a call that could never be granted is the caller's error
      // (RangeError), not lost capacity (seed 10243 drew burst 0 under costs up to 3).
      const rate = drawRate(r);
      const burst = Math.max(rate.burst, Math.max(...config.costs) - 1);
      return { at, kind, slot, rate: { ...rate, burst } };
    }
  }
}

/** When a step's fault is over (its last action), ms after the fleet's start. */
export function stepEnd(step: Step): number {
  if (step.kind === 'replica-roll') return step.at + (step.count! - 1) * step.every!;
  if (step.kind === 'replica-kill') return step.at + (step.restartMs ?? 0);
  if (step.kind === 'clock-step') return step.at;
  return step.at + (step.stale ?? 0) + (step.ms ?? 0);
}

/** Long enough for the last fault to end and the fleet to recover (a lease and some). */
export function durationFor(config: FleetConfig, steps: readonly Step[]): number {
  const last = Math.max(0, ...steps.map(stepEnd));
  const tail = config.leaseMs + config.commandTimeoutMs + 600;
  return Math.min(10_000, Math.max(4500, last + tail));
}

/**
 * A deadline no healthy fleet comes near: every caller of every replica ahead in one FIFO queue,
 * each holding the heaviest weight for the longest call, or waiting its rate slot, three times
 * over, and never under 2.5 s (a waiter that is passed over for good times out within a
 * schedule; faults that explain a timeout are excused by the oracle).
 */
export function deadlineFor(config: FleetConfig): number {
  const callers = config.callers.reduce((a, b) => a + b, 0) + 10; // a demand shift adds some
  const weight = Math.max(...config.weights);
  const byCap = (callers * weight * config.callMs[1]) / config.cap;
  const cost = Math.max(...config.costs);
  const byRate = config.rate ? (callers * cost * config.rate.per) / config.rate.limit : 0;
  return Math.round(Math.max(2500, 3 * (byCap + byRate)));
}

/** The schedule with only the steps at `keep` (indices into `steps`), for replay and shrinking. */
export function withSteps(schedule: Schedule, steps: readonly Step[]): Schedule {
  const config = { ...schedule.config, durationMs: durationFor(schedule.config, steps) };
  return { ...schedule, config, steps: [...steps] };
}

/** One line per step, for the failure report. */
export function describeStep(step: Step): string {
  const parts = [`t=${step.at}ms ${step.kind}`];
  if (step.slot !== undefined) parts.push(step.slot < 0 ? 'all replicas' : `replica ${step.slot}`);
  if (step.ms !== undefined) parts.push(`${step.sign === -1 ? '-' : ''}${step.ms}ms`);
  if (step.restartMs !== undefined) parts.push(`new start after ${step.restartMs}ms`);
  if (step.cut !== undefined) parts.push(step.cut);
  if (step.delay !== undefined) parts.push(`+${step.delay}ms each way`);
  if (step.stale !== undefined) parts.push(`dump ${step.stale}ms old`);
  if (step.count !== undefined) parts.push(`${step.count} replicas every ${step.every}ms`);
  if (step.callers !== undefined) parts.push(`callers ${step.callers}`);
  if (step.value !== undefined) parts.push(`limit ${step.value}`);
  if (step.rate !== undefined)
    parts.push(`rate ${step.rate.limit}/${step.rate.per}ms burst ${step.rate.burst}`);
  return parts.join(' ');
}

export function describeConfig(c: FleetConfig): string {
  const rate = c.rate ? ` rate ${c.rate.limit}/${c.rate.per}ms burst ${c.rate.burst}` : '';
  const weights = c.weights.length > 1 ? ` weights ${c.weights.join(',')}` : '';
  const costs = c.costs.length > 1 ? ` costs ${c.costs.join(',')}` : '';
  return (
    `${c.mode} cap ${c.cap}${rate}${weights}${costs}, ${c.replicas} replicas × callers ` +
    `[${c.callers.join(',')}], calls ${c.callMs[0]}–${c.callMs[1]}ms, lease ${c.leaseMs}ms` +
    (c.heartbeatMs ? ` heartbeat ${c.heartbeatMs}ms` : '') +
    (c.refreshMs ? ` refresh ${c.refreshMs}ms` : '') +
    `, command timeout ${c.commandTimeoutMs}ms, onStoreError ${c.onStoreError}, ${c.client}`
  );
}

/**
 * Shrinks a failing schedule: drops one step at a time and keeps the drop while the schedule
 * still fails (`fails` reruns it), until no single drop keeps it failing or `maxTries` reruns
 * are spent. Returns the smallest failing step list found (the original when none is smaller).
 */
export async function shrink<S>(
  steps: readonly S[],
  fails: (steps: readonly S[]) => Promise<boolean>,
  maxTries = 6,
): Promise<{ steps: S[]; tries: number }> {
  let current = [...steps];
  let tries = 0;
  let progress = true;
  while (progress && current.length > 0 && tries < maxTries) {
    progress = false;
    for (let i = 0; i < current.length && tries < maxTries; i++) {
      const candidate = current.filter((_, j) => j !== i);
      tries++;
      if (await fails(candidate)) {
        current = candidate;
        progress = true;
        break;
      }
    }
  }
  return { steps: current, tries };
}
