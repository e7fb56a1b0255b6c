/**
 * The wake-up subscription of a store: a connection of its own, subscribed with `SSUBSCRIBE` to
 * this process's channel of each gate (`<prefix>{<name>}:wake:<process id>`, in the gate's hash
 * slot, so on a Redis Cluster a grant's `SPUBLISH` stays on the gate's shard), on which Redis's
 * scripts push "your ticket was granted". A hint, and an unreliable one: a message published
 * while the connection is down is gone. So a dropped connection is noticed at once (its own
 * events), replaced by a fresh one (not the client's reconnect, which a user may have turned
 * off), and until it is back every queued ticket is polled; once it is back, one re-check finds
 * the grants pushed into the gap. A Redis without sharded pub/sub (before 7.0) is polled for
 * good, as a user whose ACL forbids channels is.
 */
import type { StoreClient, Subscriber } from './client.js';

/** `'push'`: wake-ups arrive on the subscription; `'poll'`: waiters are re-checked every `pollMs`. */
export type WakeupMode = 'push' | 'poll';

/**
 * No pushed wake-ups for good: pub/sub forbidden to this Redis user (ACL channel permissions), or
 * a Redis without sharded pub/sub (before 7.0). Waiters poll, warned once.
 */
export const NO_WAKEUPS = 'HOSTGATE_STORE_NO_WAKEUPS';

/** Why wake-ups are never pushed: an ACL forbids the channels, or this Redis has no SSUBSCRIBE. */
export type NoWakeupsReason = 'forbidden' | 'unsupported';

/** The refusal of a subscription that no retry will change, or undefined. */
function permanentRefusal(error: unknown): NoWakeupsReason | undefined {
  const message = String((error as Error)?.message ?? error);
  if (message.startsWith('NOPERM')) return 'forbidden';
  if (/unknown command .?ssubscribe/i.test(message)) return 'unsupported';
  return undefined;
}

export interface WakeupEvents {
  /** A message on a gate's channel: a ticket id, or `'lost'` on the gate's `lost` channel. */
  wake(message: string, channel: string): void;
  /** The subscription was lost (or refused for good: `refusal`): waiters are polled from now on. */
  down(error: unknown, refusal: NoWakeupsReason | undefined): void;
  /** Subscribed again: grants pushed while it was down must be looked for once. */
  up(): void;
}

export class Wakeups {
  #subscriber: Subscriber | undefined = undefined;
  /** Every gate's channel of this process: subscribed together, and again after a loss. */
  readonly #channels: string[] = [];
  /** The channels the live connection is subscribed to (or subscribing). */
  #subscribed = new Set<string>();
  #subscribing: Promise<void> | undefined = undefined;
  #mode: WakeupMode = 'push';
  /** Counts losses: a ticket queued before the last one may have missed its wake-up. */
  #epoch = 0;
  #forbidden = false;
  #closed = false;
  readonly #closing = new AbortController();

  constructor(
    readonly client: StoreClient,
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
  /** This Redis user may not subscribe, or this Redis cannot: polling for good. */
  get forbidden(): boolean {
    return this.#forbidden;
  }

  /**
   * Adds a gate's channel: subscribed on the live connection now (or with the others on the next
   * one). Resolves once it is, or once wake-ups are polled instead; never rejects.
   */
  add(channel: string): Promise<void> {
    this.#channels.push(channel);
    return this.ensure().then(
      () => {
        const subscriber = this.#subscriber;
        if (subscriber === undefined || this.#subscribed.has(channel)) return;
        this.#subscribed.add(channel);
        return this.#addTo(subscriber, channel);
      },
      () => undefined,
    );
  }

  #addTo(subscriber: Subscriber, channel: string): Promise<void> {
    return subscriber.add(channel).catch((error: unknown) => {
      // The connection failed under it: dropped, and subscribed again with every channel.
      if (this.#subscriber !== subscriber) return;
      this.#subscriber = undefined;
      this.onError();
      void subscriber.close();
      this.#lost(error, undefined);
    });
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
      this.#lost(error, undefined);
    };
    const channels = [...this.#channels];
    try {
      subscriber = await this.client.subscribe(
        channels,
        this.events.wake,
        onLost,
        this.#closing.signal,
      );
    } catch (error) {
      const refusal = permanentRefusal(error);
      if (refusal !== undefined) {
        this.#forbidden = true;
        this.#lost(error, refusal);
        return;
      }
      throw error;
    }
    if (this.#closed || lost) {
      // It dropped while subscribing: a wake-up may be gone already; the next heartbeat retries.
      await subscriber.close();
      if (lost && !this.#closed) this.#lost(lostWith, undefined);
      return;
    }
    this.#subscriber = subscriber;
    this.#subscribed = new Set(channels); // a gate added meanwhile subscribes its own next
    const wasDown = this.#epoch > 0;
    this.#mode = 'push';
    if (wasDown) this.events.up();
  }

  #lost(error: unknown, refusal: NoWakeupsReason | undefined): void {
    this.#mode = 'poll';
    this.#epoch++;
    this.events.down(error, refusal);
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
