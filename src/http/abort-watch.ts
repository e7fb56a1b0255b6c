/**
 * One 'abort' listener per caller signal, however many calls share it. A listener per call on
 * a long-lived signal (a server's shutdown signal, a batch's) trips Node's
 * MaxListenersExceededWarning at the 11th concurrent call; and each is removed when its call
 * settles, so nothing is left on the signal afterwards.
 */

/** What watches a signal: told once, synchronously, when it aborts. */
export interface AbortWatcher {
  signalAborted(reason: unknown): void;
}

const watchers = new WeakMap<AbortSignal, Set<AbortWatcher>>();

/** EventListener object: one for every signal, the signal is the event's target. */
const fanOut = {
  handleEvent(event: Event): void {
    const signal = event.target as AbortSignal;
    const set = watchers.get(signal);
    if (set === undefined) return;
    watchers.delete(signal);
    for (const watcher of set) watcher.signalAborted(signal.reason);
  },
};

export function watchAbort(signal: AbortSignal, watcher: AbortWatcher): void {
  let set = watchers.get(signal);
  if (set === undefined) {
    set = new Set();
    watchers.set(signal, set);
    signal.addEventListener('abort', fanOut, { once: true });
  }
  set.add(watcher);
}

export function unwatchAbort(signal: AbortSignal, watcher: AbortWatcher): void {
  const set = watchers.get(signal);
  if (set === undefined || !set.delete(watcher) || set.size > 0) return;
  watchers.delete(signal);
  signal.removeEventListener('abort', fanOut);
}
