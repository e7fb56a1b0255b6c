/**
 * Leaked permits, named while they can still be fixed: a permit held past its gate's
 * `leakWarnAfter` (default half of `maxHold`) is a suspect — an unread body, a missing
 * `release()`. Suspects are found by walking each gate's holders from the oldest, which are in
 * grant order, so a sweep stops at the first permit still young: no timer or work per permit.
 */

import { fileURLToPath, pathToFileURL } from 'node:url';
import { channels, type PermitRequestInfo } from '../diagnostics.js';
import { checkKnownKeys, checkObject, describe, durationMs } from '../options.js';
import { type Permit, Semaphore } from '../semaphore.js';

/** One permit held past its gate's `leakWarnAfter`. */
export interface LeakSuspect {
  /** Partner name, or the origin key of a per-origin gate. */
  partner: string;
  /** The request's method, when the HTTP layer recorded it (`GET` when it did not say). */
  method: string | undefined;
  /** The request's origin (`https://api.x.com`), when recorded. */
  origin: string | undefined;
  /** The request's path, without the query (queries carry tokens). */
  path: string | undefined;
  /** How long it has been held, ms. */
  heldMs: number;
  /** The gate's `leakWarnAfter` it exceeded, ms. */
  leakWarnAfterMs: number;
  /**
   * Where it was acquired: the caller's stack frames (hostgate's and undici's own left out),
   * when a leak detector was tracing the gate at the time; `undefined` otherwise.
   */
  acquiredFrom: string | undefined;
  /** The permit itself (`release()` it to cure the leak by hand). */
  permit: Permit;
}

/** Anything that lists gates by label: a `HostLimiter`. */
export interface GateSource {
  gates(): Map<string, Semaphore>;
  /** A partner's gate by name: tells partner gates from per-origin ones. */
  gate?(name: string): Semaphore | undefined;
}

/** Permits held past their gate's `leakWarnAfter`, oldest first per gate. */
export function leakSuspects(source: GateSource | Semaphore): LeakSuspect[] {
  const out: LeakSuspect[] = [];
  if (source instanceof Semaphore) collect(source, source.name ?? '', out);
  else for (const [key, gate] of source.gates()) collect(gate, gate.name ?? key, out);
  return out;
}

function collect(gate: Semaphore, partner: string, out: LeakSuspect[]): void {
  const warnAfter = gate.leakWarnAfter;
  if (warnAfter === undefined || gate.held === 0) return;
  const now = gate.now();
  for (const permit of gate.holders()) {
    const heldMs = now - permit.acquiredAt;
    if (heldMs < warnAfter) break; // grant order: every later holder is younger
    out.push(suspect(permit, partner, heldMs, warnAfter));
  }
}

function suspect(permit: Permit, partner: string, heldMs: number, warnAfter: number): LeakSuspect {
  const { method, origin, path } = describeRequest(permit.request);
  return {
    partner,
    method,
    origin,
    path,
    heldMs,
    leakWarnAfterMs: warnAfter,
    acquiredFrom: formatSite(permit.acquiredFrom?.stack),
    permit,
  };
}

function describeRequest(info: PermitRequestInfo | undefined): {
  method: string | undefined;
  origin: string | undefined;
  path: string | undefined;
} {
  if (info === undefined) return { method: undefined, origin: undefined, path: undefined };
  const method = (info.method ?? 'GET').toUpperCase();
  if (info.origin == null) return { method, origin: undefined, path: info.path ?? undefined };
  try {
    const url = new URL(info.path ?? '', info.origin);
    return { method, origin: url.origin, path: url.pathname };
  } catch {
    return { method, origin: String(info.origin), path: undefined };
  }
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
  /** Hold time (ms) past which a permit is reported; default each gate's own (`maxHold / 2`). */
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
    for (const found of leakSuspects(this.#source)) {
      if (this.#reported.has(found.permit)) continue;
      this.#reported.add(found.permit);
      fresh.push(found);
      if (channels.leak.hasSubscribers) channels.leak.publish({ suspect: found });
      try {
        this.#onLeak?.(found);
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
