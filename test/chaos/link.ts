/**
 * A replica's own way to Redis (the campaign's `replica-partition` and `replica-slow`): a TCP
 * relay on 127.0.0.1 that a fault cuts or slows for one replica while the others go on, the
 * faults no Redis-side fault can make (every one of those hits the whole fleet at once, so
 * nobody gains from a lease the cut-off process still believes in). Cut two ways:
 * - `blackhole`: nothing passes either way and nothing closes (a partition shorter than TCP's
 *   own timeouts); what was sent meanwhile arrives when it heals, in order: a command the
 *   client gave up on may still run then.
 * - `reset`: every connection is reset, and new ones are reset as they come (a host unreachable
 *   or a proxy gone); the client reconnects on its own backoff once it heals.
 * Slowed: every chunk waits `delay` ms each way, in order (a congested link: commands that time
 * out at the client and still run in Redis, answers that come after their command timeout).
 */
import net, { type AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';

export type Cut = 'blackhole' | 'reset';

/** One direction of a connection: chunks in order, each sent once its time comes. */
class Lane {
  readonly #queue: { chunk: Buffer; at: number }[] = [];
  #timer: NodeJS.Timeout | undefined;

  constructor(readonly to: net.Socket) {}

  /** Sends `chunk` at `at` (performance.now()), never ahead of a chunk queued before it. */
  push(chunk: Buffer, at: number): void {
    if (this.#queue.length === 0 && at <= performance.now()) {
      this.to.write(chunk);
      return;
    }
    this.#queue.push({ chunk, at });
    this.#schedule();
  }

  /** Held chunks go now, in order (a blackhole healed); slowed ones keep their time. */
  flush(): void {
    const now = performance.now();
    for (const item of this.#queue) if (!Number.isFinite(item.at)) item.at = now;
    this.#drain();
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#queue.length === 0) return;
    const wait = this.#queue[0]!.at - performance.now();
    if (!Number.isFinite(wait)) return; // held until flushed
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#drain();
      },
      Math.max(0, wait),
    );
  }

  #drain(): void {
    const now = performance.now();
    while (this.#queue.length > 0 && this.#queue[0]!.at <= now) {
      this.to.write(this.#queue.shift()!.chunk);
    }
    if (this.#queue.length === 0 && this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.#schedule();
  }

  close(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#queue.length = 0;
  }
}

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  up: Lane;
  down: Lane;
}

export class Link {
  port = 0;
  readonly #server: net.Server;
  readonly #pairs = new Set<Pair>();
  #cut: Cut | undefined;
  /** Ms each chunk waits: to Redis (up), and from it (down). */
  #delay = { up: 0, down: 0 };

  constructor(readonly target: number) {
    this.#server = net.createServer((client) => this.#accept(client));
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(0, '127.0.0.1', () => resolve());
    });
    this.port = (this.#server.address() as AddressInfo).port;
  }

  /** When a chunk arriving now goes on: never while blackholed (until it heals). */
  #at(way: 'up' | 'down'): number {
    if (this.#cut === 'blackhole') return Number.POSITIVE_INFINITY;
    return performance.now() + this.#delay[way];
  }

  #accept(client: net.Socket): void {
    if (this.#cut === 'reset') {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(this.target, '127.0.0.1');
    const pair: Pair = { client, upstream, up: new Lane(upstream), down: new Lane(client) };
    this.#pairs.add(pair);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const close = () => {
      this.#pairs.delete(pair);
      pair.up.close();
      pair.down.close();
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.on('data', (chunk: Buffer) => pair.up.push(chunk, this.#at('up')));
    upstream.on('data', (chunk: Buffer) => pair.down.push(chunk, this.#at('down')));
  }

  /** Cuts the link: `blackhole` holds everything, `reset` resets every connection. */
  cut(how: Cut): void {
    this.#cut = how;
    if (how !== 'reset') return;
    for (const pair of [...this.#pairs]) {
      this.#pairs.delete(pair);
      pair.up.close();
      pair.down.close();
      pair.client.resetAndDestroy();
      pair.upstream.destroy();
    }
  }

  /**
   * Slows the link: every chunk from now waits `ms` each way (0: no more), or one way only
   * (`down`: Redis's answers and messages to the replica; `up`: its commands).
   */
  slow(ms: number, way: 'both' | 'up' | 'down' = 'both'): void {
    if (way !== 'down') this.#delay.up = ms;
    if (way !== 'up') this.#delay.down = ms;
  }

  /** Heals a cut: what a blackhole held goes on, in order, before anything newer (a slowed
   * link stays slowed until `slow(0)`). */
  heal(): void {
    this.#cut = undefined;
    for (const pair of this.#pairs) {
      pair.up.flush();
      pair.down.flush();
    }
  }

  async close(): Promise<void> {
    this.#cut = undefined;
    for (const pair of this.#pairs) {
      pair.up.close();
      pair.down.close();
      pair.client.destroy();
      pair.upstream.destroy();
    }
    this.#pairs.clear();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
