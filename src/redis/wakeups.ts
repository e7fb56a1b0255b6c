/**
 * The wake-up subscription of a store: a connection of its own, subscribed to this process's
 * channel, on which Redis's scripts push "your ticket was granted". A hint, and an unreliable
 * one: a message published while the connection is down is gone. So a dropped connection is
 * noticed at once (its own events), replaced by a fresh one (not the client's reconnect, which
 * a user may have turned off), and until it is back every queued ticket is polled; once it is
 * back, one re-check finds the grants pushed into the gap.
 */
import type { StoreClient, Subscriber } from './client.js';

/** `'push'`: wake-ups arrive on the subscription; `'poll'`: waiters are re-checked every `pollMs`. */
export type WakeupMode = 'push' | 'poll';

/** Pub/sub forbidden to this Redis user (ACL channel permissions): waiters poll, warned once. */
export const NO_WAKEUPS = 'HOSTGATE_STORE_NO_WAKEUPS';

export interface WakeupEvents {
  /** A message on the channel: a ticket id. */
  wake(id: string): void;
  /** The subscription was lost (or refused): waiters must be polled from now on. */
  down(error: unknown, forbidden: boolean): void;
  /** Subscribed again: grants pushed while it was down must be looked for once. */
  up(): void;
}

export class Wakeups {
  #subscriber: Subscriber | undefined = undefined;
  #subscribing: Promise<void> | undefined = undefined;
  #mode: WakeupMode = 'push';
  /** Counts losses: a ticket queued before the last one may have missed its wake-up. */
  #epoch = 0;
  #forbidden = false;
  #closed = false;
  readonly #closing = new AbortController();

  constructor(
    readonly client: StoreClient,
    readonly channel: string,
    readonly events: WakeupEvents,
    /** The connection's own errors and losses, counted with the store's. */
    readonly onError: () => void,
  ) {}

  get mode(): WakeupMode {
    return this.#mode;
  }
  get epoch(): number {
    return this.#epoch;
  }
  /** This Redis user may not subscribe: polling for good. */
  get forbidden(): boolean {
    return this.#forbidden;
  }

  /**
   * Subscribed (or known to be forbidden): the first call, and each heartbeat while the
   * subscription is down. Rejects on any other failure (the store then degrades).
   */
  ensure(): Promise<void> {
    if (this.#closed || this.#forbidden || this.#subscriber !== undefined) return Promise.resolve();
    this.#subscribing ??= this.#subscribe().finally(() => {
      this.#subscribing = undefined;
    });
    return this.#subscribing;
  }

  async #subscribe(): Promise<void> {
    let lost = false;
    let subscriber: Subscriber | undefined;
    let lostWith: unknown;
    const onLost = (error: unknown) => {
      if (lost || this.#closed) return;
      lost = true;
      lostWith = error;
      this.onError();
      // Before it subscribed: handled once the subscribe call settles.
      if (subscriber === undefined || this.#subscriber !== subscriber) return;
      this.#subscriber = undefined;
      void subscriber.close();
      this.#lost(error, false);
    };
    try {
      subscriber = await this.client.subscribe(
        this.channel,
        this.events.wake,
        onLost,
        this.#closing.signal,
      );
    } catch (error) {
      if (String((error as Error)?.message ?? error).startsWith('NOPERM')) {
        this.#forbidden = true;
        this.#lost(error, true);
        return;
      }
      throw error;
    }
    if (this.#closed || lost) {
      // It dropped while subscribing: a wake-up may be gone already; the next heartbeat retries.
      await subscriber.close();
      if (lost && !this.#closed) this.#lost(lostWith, false);
      return;
    }
    this.#subscriber = subscriber;
    const wasDown = this.#epoch > 0;
    this.#mode = 'push';
    if (wasDown) this.events.up();
  }

  #lost(error: unknown, forbidden: boolean): void {
    this.#mode = 'poll';
    this.#epoch++;
    this.events.down(error, forbidden);
  }

  /** Closes the connection (or drops it while it connects); never subscribes again. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    const subscribing = this.#subscribing;
    await subscriber?.close();
    await subscribing?.catch(() => undefined);
  }
}
