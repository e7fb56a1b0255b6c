/** A gate's counters: plain integers, kept whether or not anything observes the gate. */
export class GateCounts {
  acquired = 0;
  released = 0;
  shedQueueFull = 0;
  shedQueueTimeout = 0;
  abortedWaiting = 0;
  abortedInFlight = 0;
  holdTimeouts = 0;
  doubleReleases = 0;
}
