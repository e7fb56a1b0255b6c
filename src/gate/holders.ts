/**
 * The permits a gate has granted and not yet taken back, least recently alive first (by
 * `aliveAt`: the grant or the last progress). With one `maxHold` per gate the holders' deadlines
 * are then monotonic, so one timer at the oldest serves them all (hold-bounds.ts); leak reports
 * read them in the same order. The permit's queue links (`prev`, `next`) are reused: a held
 * permit is in no queue.
 */
import type { Waiter } from './permit.js';

export class Holders {
  oldest: Waiter | undefined = undefined;
  newest: Waiter | undefined = undefined;

  /** A permit was granted, or made progress: it becomes the newest. */
  link(permit: Waiter): void {
    const newest = this.newest;
    if (newest === undefined) this.oldest = permit;
    else {
      newest.next = permit;
      permit.prev = newest;
    }
    this.newest = permit;
  }

  unlink(permit: Waiter): void {
    const { prev, next } = permit;
    if (prev === undefined) this.oldest = next;
    else prev.next = next;
    if (next === undefined) this.newest = prev;
    else next.prev = prev;
    permit.prev = permit.next = undefined;
  }

  /** A holder made progress: it moves to the young end. */
  touch(permit: Waiter): void {
    if (this.newest === permit) return;
    this.unlink(permit);
    this.link(permit);
  }
}
