/**
 * The clock gates read for their own timestamps: `performance.now()`, read at most once per
 * synchronous stretch of work (until the next microtask checkpoint) and shared by every gate on
 * the platform clock, like nginx's cached time per event-loop iteration: a burst of 100,000
 * calls reads it once, not 100,000 times. Each reading is the time its stretch began, so it is
 * never late; timers read the clock afresh.
 */

/** The platform's performance object: fake timers replace the global one. */
const REAL_PERFORMANCE = globalThis.performance;
/**
 * Schedules the cache's reset: a reaction to a settled promise is a microtask like
 * `queueMicrotask`'s, but on Node 20 queueMicrotask also builds an AsyncResource and a bound
 * function per call (about 80 ns against 35 ns), and an HTTP request misses the cache about
 * twice (its response, its next dispatch).
 */
const SETTLED = Promise.resolve();

let cachedNow: number | undefined;
const forgetNow = (): void => {
  cachedNow = undefined;
};

/**
 * The global, looked up per call: fake timers (vitest, sinon) replace globalThis.performance,
 * and a gate's clock must run on the same time as the setTimeout deadlines it is compared with.
 */
export const platformNow = (): number => performance.now();

/** The platform clock, cached for the current synchronous stretch (see above). */
export function cachedPlatformNow(): number {
  let now = cachedNow;
  if (now === undefined) {
    // Fake timers' performance is never cached: checked only on a miss (the global is an accessor).
    if (globalThis.performance !== REAL_PERFORMANCE) return performance.now();
    now = REAL_PERFORMANCE.now();
    cachedNow = now;
    void SETTLED.then(forgetNow);
  }
  return now;
}

/**
 * Calls `fn` once `ms` have passed on the platform clock (the timer unref'd). A Node timer counts
 * whole ms on the event loop's clock, so by `performance.now()` it can end early: up to 1 ms
 * (Node 24), and once 16 ms in CI under load (a 150 ms `holdAfterAbort` ended 134 ms after the
 * close; not reproduced here). Early, it is set again for what is left.
 */
export function afterAtLeast(ms: number, fn: () => void): void {
  const due = performance.now() + ms;
  const fire = (): void => {
    const left = due - performance.now();
    if (left > 0) setTimeout(fire, Math.ceil(left)).unref?.();
    else fn();
  };
  setTimeout(fire, ms).unref?.();
}
