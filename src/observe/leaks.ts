/**
 * Leaked permits, named while they can still be fixed: a permit without progress past its
 * gate's `leakWarnAfter` (default half of `maxHold`) is a suspect — an unread body, a missing
 * `release()`. Suspects are found by walking each gate's holders, which are kept least recently
 * alive first, so a sweep stops at the first permit seen alive lately: no timer or work per permit.
 */

import { fileURLToPath, pathToFileURL } from 'node:url';
import { checkKnownKeys, checkObject, describe, durationMs } from '../common/options.js';
import { channels } from '../gate/diagnostics.js';
import { permitTarget } from '../gate/permit-target.js';
import { type Permit, Semaphore } from '../gate/semaphore.js';

/**
 * One permit without progress past its gate's `leakWarnAfter`: plain data (JSON-serialisable,
 * safe to log), never the permit itself, and never a query string, header or body.
 */
export interface LeakSuspect {
  /** Partner name, or the origin key of a per-origin gate. */
  partner: string;
  /** The request's method, when the HTTP layer recorded it. */
  method: string | undefined;
  /** The request's origin (`https://api.x.com`), when recorded. */
  origin: string | undefined;
  /** The request's path, without the query (queries carry tokens). */
  path: string | undefined;
  /** How long it has been held, ms. */
  heldMs: number;
  /** How long since its grant or its last response progress, ms. */
  quietMs: number;
  /** The gate's `leakWarnAfter` it exceeded, ms. */
  leakWarnAfterMs: number;
  /**
   * Where it was acquired: the caller's stack frames (hostgate's and undici's own left out),
   * when a leak detector was tracing the gate at the time; `undefined` otherwise.
   */
  acquiredFrom: string | undefined;
}

/** Anything that lists gates by label: a `HostLimiter`. */
export interface GateSource {
  gates(): Map<string, Semaphore>;
  /** A partner's gate by name: tells partner gates from per-origin ones. */
  gate?(name: string): Semaphore | undefined;
}

/** The `hostgate:leak` channel's message: a leak detector's first report of a permit. */
export interface LeakMessage {
  suspect: LeakSuspect;
}

/** A suspect with the permit and gate behind it: for hostgate's own bookkeeping only. */
export interface FoundLeak {
  gate: Semaphore;
  permit: Permit;
  suspect: LeakSuspect;
}

/** Permits without progress past their gate's `leakWarnAfter`, least recently alive first per gate. */
export function leakSuspects(source: GateSource | Semaphore): LeakSuspect[] {
  return findLeaks(source).map((found) => found.suspect);
}

/** {@link leakSuspects} with the permit and gate of each. */
export function findLeaks(source: GateSource | Semaphore): FoundLeak[] {
  const out: FoundLeak[] = [];
  if (source instanceof Semaphore) collect(source, source.name ?? '', out);
  else for (const [key, gate] of source.gates()) collect(gate, gate.name ?? key, out);
  return out;
}

function collect(gate: Semaphore, partner: string, out: FoundLeak[]): void {
  const warnAfter = gate.leakWarnAfter;
  if (warnAfter === undefined || gate.held === 0) return;
  const now = gate.now();
  for (const permit of gate.holders()) {
    const quietMs = now - permit.aliveAt;
    if (quietMs < warnAfter) break; // holders are least recently alive first
    out.push({ gate, permit, suspect: suspect(permit, partner, now, quietMs, warnAfter) });
  }
}

function suspect(
  permit: Permit,
  partner: string,
  now: number,
  quietMs: number,
  warnAfter: number,
): LeakSuspect {
  // Defensive: the permit keeps only method, origin and path, reduced again here.
  const target = permitTarget(permit.request);
  return {
    partner,
    method: target?.method,
    origin: target?.origin || undefined,
    path: target?.path || undefined,
    heldMs: now - permit.acquiredAt,
    quietMs,
    leakWarnAfterMs: warnAfter,
    acquiredFrom: formatSite(permit.acquiredFrom?.stack),
  };
}

// hostgate's own frames (src/ and middleware/, from source or dist/) and undici's say nothing
// about where the leak is; the caller's frames below them do.
const root = new URL('../../', import.meta.url);
const OWN_FRAMES = ['src/', 'middleware/'].flatMap((dir) => [
  fileURLToPath(new URL(dir, root)),
  pathToFileURL(fileURLToPath(new URL(dir, root))).href,
]);
const FOREIGN_FRAMES = [
  'node:internal',
  '/node_modules/undici/',
  'node:diagnostics_channel',
  '(<anonymous>)',
];
const SITE_LINES = 8;

function formatSite(stack: string | undefined): string | undefined {
  if (stack === undefined) return undefined;
  const frames = stack.split('\n').filter((line) => line.trimStart().startsWith('at '));
  const caller = frames.filter(
    (line) =>
      !OWN_FRAMES.some((dir) => line.includes(dir)) &&
      !FOREIGN_FRAMES.some((dir) => line.includes(dir)),
  );
  const kept = (caller.length > 0 ? caller : frames).slice(0, SITE_LINES);
  return kept.map((line) => line.trim()).join('\n');
}

export interface LeakDetectorOptions {
  /** Time without progress (ms) past which a permit is reported; default each gate's own (`maxHold / 2`). */
  leakWarnAfter?: number;
  /** Called once per suspect permit, from the sweep. A throw is swallowed. */
  onLeak?: (suspect: LeakSuspect) => void;
  /** Sweep period, ms. Default a quarter of the threshold, within [50 ms, 5 s]. */
  sweepEvery?: number;
  /**
   * Capture where each permit was acquired (default true): about 2–5 µs per acquire while the
   * detector runs. Without, suspects are still found and reported, with `acquiredFrom` unset.
   */
  stacks?: boolean;
}

const DETECTOR_KEYS = ['leakWarnAfter', 'onLeak', 'sweepEvery', 'stacks'] as const;
/** Threshold assumed for the sweep period when no gate has one yet: half the default maxHold. */
const FALLBACK_WARN_AFTER_MS = 30_000;

/**
 * Watches a limiter's gates (or one gate) for leaked permits: while on, every acquire captures
 * a cheap stack (V8's raw frames, formatted only for a report), and one sweep per period
 * reports each permit held past `leakWarnAfter` once — to `onLeak` and the `hostgate:leak`
 * channel. Gates created later (per-origin gates) are picked up at the next sweep. The sweep
 * timer is unref'd: it never keeps the process alive.
 *
 * @example
 * const leaks = detectLeaks(limiter, { onLeak: (s) => log.warn(s, 'permit held too long') });
 * limiter.leaks(); // the current suspects, at any time
 * leaks.close();
 */
export function detectLeaks(
  source: GateSource | Semaphore,
  options: LeakDetectorOptions = {},
): LeakDetector {
  return new LeakDetector(source, options);
}

export class LeakDetector implements Disposable {
  readonly #source: GateSource | Semaphore;
  readonly #warnAfter: number | undefined;
  readonly #onLeak: ((suspect: LeakSuspect) => void) | undefined;
  readonly #stacks: boolean;
  readonly #reported = new WeakSet<Permit>();
  readonly #traced = new Set<Semaphore>();
  readonly #timer: ReturnType<typeof setInterval>;
  #closed = false;

  constructor(source: GateSource | Semaphore, options: LeakDetectorOptions = {}) {
    if (!(source instanceof Semaphore) && typeof (source as GateSource)?.gates !== 'function') {
      throw new TypeError(
        `detectLeaks: expected a HostLimiter or a Semaphore, got ${describe(source)}`,
      );
    }
    checkObject('detectLeaks options', options);
    checkKnownKeys('detectLeaks', options, DETECTOR_KEYS);
    this.#source = source;
    this.#warnAfter =
      options.leakWarnAfter === undefined
        ? undefined
        : durationMs('leakWarnAfter', options.leakWarnAfter);
    if (options.onLeak !== undefined && typeof options.onLeak !== 'function') {
      throw new TypeError(
        `detectLeaks: onLeak must be a function, got ${describe(options.onLeak)}`,
      );
    }
    this.#onLeak = options.onLeak;
    if (options.stacks !== undefined && typeof options.stacks !== 'boolean') {
      throw new TypeError(`detectLeaks: stacks must be a boolean, got ${describe(options.stacks)}`);
    }
    this.#stacks = options.stacks ?? true;
    this.#adopt();
    const period =
      options.sweepEvery === undefined
        ? Math.min(5000, Math.max(50, this.#smallestWarnAfter() / 4))
        : durationMs('sweepEvery', options.sweepEvery);
    this.#timer = setInterval(() => this.sweep(), period);
    this.#timer.unref?.();
  }

  /** The current suspects (reported or not), oldest first per gate. */
  leaks(): LeakSuspect[] {
    return leakSuspects(this.#source);
  }

  /** Sweeps now: reports suspects not reported before, and returns them. */
  sweep(): LeakSuspect[] {
    if (this.#closed) return [];
    this.#adopt();
    const fresh: LeakSuspect[] = [];
    for (const { permit, suspect } of findLeaks(this.#source)) {
      if (this.#reported.has(permit)) continue;
      this.#reported.add(permit);
      fresh.push(suspect);
      if (channels.leak.hasSubscribers) channels.leak.publish({ suspect });
      try {
        this.#onLeak?.(suspect);
      } catch {
        // A failing logger must not stop the sweep.
      }
    }
    return fresh;
  }

  /** Stops sweeping and stack capture on the gates this detector turned it on for. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    for (const gate of this.#traced) gate.traceAcquires = false;
    this.#traced.clear();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** Turns tracing (and the threshold) on for gates not seen before. */
  #adopt(): void {
    const source = this.#source;
    const gates = source instanceof Semaphore ? [source] : source.gates().values();
    for (const gate of gates) {
      if (this.#traced.has(gate)) continue;
      if (this.#warnAfter !== undefined) gate.leakWarnAfter = this.#warnAfter;
      if (this.#stacks && !gate.traceAcquires) {
        gate.traceAcquires = true;
        this.#traced.add(gate);
      }
    }
    // Evicted per-origin gates: forget them, so this set stays as bounded as the limiter's map.
    if (!(source instanceof Semaphore) && this.#traced.size > 0) {
      const live = new Set(source.gates().values());
      for (const gate of this.#traced) if (!live.has(gate)) this.#traced.delete(gate);
    }
  }

  #smallestWarnAfter(): number {
    if (this.#warnAfter !== undefined) return this.#warnAfter;
    let smallest = Number.POSITIVE_INFINITY;
    const source = this.#source;
    const gates = source instanceof Semaphore ? [source] : source.gates().values();
    for (const gate of gates) smallest = Math.min(smallest, gate.leakWarnAfter ?? smallest);
    return Number.isFinite(smallest) ? smallest : FALLBACK_WARN_AFTER_MS;
  }
}
