/**
 * What stands in for pushed wake-ups while there are none (the subscription is down, or an ACL
 * forbids it): every queued ticket is looked up in Redis every `pollMs`, and once more when
 * wake-ups are pushed again (the grants published into the gap are gone).
 */
import { storeChannels } from './channels.js';
import type { ResolvedStoreOptions } from './options.js';
import type { SharedSemaphore } from './shared-semaphore.js';
import { NO_WAKEUPS, type NoWakeupsReason } from './wakeups.js';

export class WakeupPoll {
  #timer: ReturnType<typeof setInterval> | undefined = undefined;
  /** Gates with a look-up on its way: one at a time per gate. */
  readonly #checking = new Set<SharedSemaphore>();

  constructor(
    readonly store: object,
    readonly options: ResolvedStoreOptions,
    readonly gates: () => Iterable<SharedSemaphore>,
    /** One look-up of this process's tickets and leases of a gate (its heartbeat script). */
    readonly check: (gate: SharedSemaphore) => Promise<unknown>,
    /** Degraded or closed: nothing to look up now. */
    readonly paused: () => boolean,
  ) {}

  /** Looks up `gate`'s queued tickets now, unless a look-up is on its way already. */
  recheck(gate: SharedSemaphore): void {
    if (this.paused() || this.#checking.has(gate)) return;
    this.#checking.add(gate);
    void this.check(gate)
      .catch(() => undefined)
      .then(() => this.#checking.delete(gate));
  }

  /** Wake-ups stopped: published, warned when refused for good, and polled from now on. */
  down(error: unknown, refusal: NoWakeupsReason | undefined): void {
    const { pollMs, prefix } = this.options;
    const forbidden = refusal !== undefined;
    if (storeChannels.wakeupsDown.hasSubscribers) {
      storeChannels.wakeupsDown.publish({ store: this.store, error, forbidden, pollMs });
    }
    const polling = `shared gates work, but a waiter learns of its grant by polling every ${pollMs} ms instead of at once`;
    if (refusal === 'forbidden') {
      process.emitWarning(
        `hostgate: this Redis user may not subscribe to ${prefix}{…}:wake:* (ACL channel permissions): ${polling}; grant it with &${prefix}*`,
        { code: NO_WAKEUPS },
      );
    } else if (refusal === 'unsupported') {
      process.emitWarning(
        `hostgate: this Redis has no sharded pub/sub (SSUBSCRIBE, Redis 7.0 and later): ${polling}; upgrade Redis for pushed wake-ups`,
        { code: NO_WAKEUPS },
      );
    }
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#pollAll(), pollMs);
      this.#timer.unref?.();
    }
  }

  /** Wake-ups are pushed again: one last look-up finds what was granted meanwhile. */
  up(): void {
    this.close();
    if (storeChannels.wakeupsUp.hasSubscribers) {
      storeChannels.wakeupsUp.publish({ store: this.store });
    }
    this.#pollAll();
  }

  close(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #pollAll(): void {
    for (const gate of this.gates()) {
      if (gate.ticketIds().length > 0) this.recheck(gate);
    }
  }
}
