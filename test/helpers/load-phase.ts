/** What a load phase ended with. */
export interface LoadPhaseResult {
  /** `reached()` held after one of the calls (the phase's goal was seen). */
  reached: boolean;
  /** Calls started, all callers together. */
  sent: number;
}

/**
 * Drives a load phase of an adaptive-limit test: every caller loops on its `call` until
 * `reached()` holds after a call, or `budget` calls have been started in all. The first caller
 * to see `reached()` ends the phase for every caller, and so does the first call that throws.
 *
 * A caller must not re-check the goal for itself alone: an adaptive limit is not monotone (a cut
 * on a latency spike of a busy machine, the RTT probe's dip to 3/4), so the callers that saw the
 * goal stopped, the limit moved back a moment later, and the few callers left could not move it
 * again: an adaptive limit grows only while in flight ≥ limit / 2 (and three callers never
 * overload a partner of capacity 3). They then spent the whole budget at a fraction of the
 * load: 90 s, a test timeout, for a phase that takes a second.
 */
export async function loadPhase(
  callers: readonly (() => Promise<void>)[],
  reached: () => boolean,
  budget: number,
): Promise<LoadPhaseResult> {
  let sent = 0;
  let seen = false;
  let failed = false;
  const loop = async (call: () => Promise<void>) => {
    while (!seen && !failed && sent < budget) {
      sent++;
      try {
        await call();
      } catch (error) {
        failed = true;
        throw error;
      }
      if (reached()) seen = true;
    }
  };
  await Promise.all(callers.map(loop));
  return { reached: seen, sent };
}
