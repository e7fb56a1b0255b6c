/** A gate's `onIdle()` callers: each is called once nothing is held or queued. */
export class IdleWaiters {
  #waiting: (() => void)[] | undefined = undefined;

  /** Calls `resolve` now when the gate is `idle`, else at the first `released()` that gets there. */
  add(resolve: () => void, idle: boolean): void {
    if (idle) resolve();
    else if (this.#waiting === undefined) this.#waiting = [resolve];
    else this.#waiting.push(resolve);
  }

  /** A permit went back: with `held` units held and `queued` waiters, the gate may be idle. */
  released(held: number, queued: number): void {
    const waiting = this.#waiting;
    if (waiting === undefined || held !== 0 || queued !== 0) return;
    this.#waiting = undefined;
    for (const resolve of waiting) resolve();
  }
}
