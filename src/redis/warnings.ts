/**
 * Process warnings of a store (`process.emitWarning`): what default logs show, where a
 * diagnostics channel is seen only by those who subscribed. Never a key, a URL or a reply.
 */

/** A leased gate with more processes than units of its cap: once per gate and process. */
export const LEASED_SMALL_CAP = 'HOSTGATE_LEASED_SMALL_CAP';

/** A leased rate whose calls cost more than an equal share sends at once: once per gate and process. */
export const LEASED_SMALL_BURST = 'HOSTGATE_LEASED_SMALL_BURST';

/** A clean close that could not leave its FIFO gates (Redis unreachable then): once per close. */
export const STORE_CLOSE_UNFINISHED = 'HOSTGATE_STORE_CLOSE_UNFINISHED';

/** Redis unreachable at start, or for longer than a heartbeat: once per outage. */
export const STORE_UNAVAILABLE = 'HOSTGATE_STORE_UNAVAILABLE';

/** Warns once per outage: at once if Redis was never reached, else once it outlasts a heartbeat. */
export class OutageWarning {
  #since: number | undefined = undefined;
  #warned = false;
  #reached = false;

  constructor(
    readonly heartbeatMs: number,
    /** What shared gates do meanwhile, for the message. */
    readonly policy: string,
  ) {}

  /** Redis answered. */
  reached(): void {
    this.#reached = true;
  }

  /** A Redis call failed or timed out (every failure of the outage, not only the first). */
  failed(error: unknown): void {
    const now = performance.now();
    this.#since ??= now;
    if (this.#warned) return;
    const atStart = !this.#reached;
    if (!atStart && now - this.#since < this.heartbeatMs) return;
    this.#warned = true;
    const why = error instanceof Error ? error.message : String(error);
    const meanwhile =
      this.policy === 'reject'
        ? 'they shed every caller with StoreUnavailableError'
        : 'each process admits only its local share of every cap';
    process.emitWarning(
      `hostgate: Redis ${atStart ? 'cannot be reached' : `has not answered for ${Math.round(now - this.#since)} ms`} (${why.slice(0, 200)}): shared gates are not shared until it answers; ${meanwhile}`,
      { code: STORE_UNAVAILABLE },
    );
  }

  /** Redis answers again: the next outage warns again. */
  recovered(): void {
    this.#since = undefined;
    this.#warned = false;
    this.#reached = true;
  }
}
