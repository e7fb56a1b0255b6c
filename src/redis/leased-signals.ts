/**
 * A leased gate's signals (issue 35): Redis tells the processes of a gate, on one channel in the
 * gate's slot (`<prefix>{<name>}:wake:give`, SPUBLISH from the refresh script), that a process
 * waits for capacity (`give <level> <top>`: the fair level as of the last walk), that units came
 * free which heads met at the walk are owed (`owed`), that such a head lacks units held over the
 * level (`floor`: given back now, not at the interval), or that the gate's state was missing
 * (`lost`: a first use or a loss). A hint, never a grant: a busy process
 * refreshes on change only while this channel is subscribed (the wake-up connection of the
 * store, pushed), and every refresh interval as before while it is not, and once more after each
 * loss of the subscription (a message of the gap may be gone).
 */
import type { Wakeups } from './wakeups.js';

export class LeasedSignals {
  readonly #gates = new Map<string, (message: string) => void>();
  readonly #added = new Set<string>();

  constructor(readonly wakeups: Wakeups) {}

  /** Subscribes `channel` on the store's wake-up connection; `heard` gets its messages. */
  listen(channel: string, heard: (message: string) => void): void {
    this.#gates.set(channel, heard);
    void this.wakeups.add(channel).then(() => {
      this.#added.add(channel);
    });
  }

  /** A message on a wake-up channel: true if a leased gate's (delivered to it). */
  wake(message: string, channel: string): boolean {
    const heard = this.#gates.get(channel);
    if (heard === undefined) return false;
    heard(message);
    return true;
  }

  /** The subscription's epoch while `channel`'s messages can arrive, else -1. */
  epoch(channel: string): number {
    if (this.wakeups.mode !== 'push' || !this.#added.has(channel)) return -1;
    return this.wakeups.epoch;
  }
}
