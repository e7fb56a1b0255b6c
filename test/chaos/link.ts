/**
 * A replica's own way to Redis (the campaign's `replica-partition`): a TCP relay on 127.0.0.1
 * that a fault cuts for one replica while the others go on, the one fault no Redis-side fault can
 * make (every one of those cuts the whole fleet off at once, so nobody gains from a lease the
 * cut-off process still believes in). Cut two ways:
 * - `blackhole`: nothing passes either way and nothing closes (a partition shorter than TCP's
 *   own timeouts); what was sent meanwhile arrives when it heals, in order: a command the
 *   client gave up on may still run then.
 * - `reset`: every connection is reset, and new ones are reset as they come (a host unreachable
 *   or a proxy gone); the client reconnects on its own backoff once it heals.
 */
import net, { type AddressInfo } from 'node:net';

export type Cut = 'blackhole' | 'reset';

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  /** Held while blackholed: to Redis, to the client. */
  up: Buffer[];
  down: Buffer[];
}

export class Link {
  port = 0;
  readonly #server: net.Server;
  readonly #pairs = new Set<Pair>();
  #cut: Cut | undefined;

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

  #accept(client: net.Socket): void {
    if (this.#cut === 'reset') {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(this.target, '127.0.0.1');
    const pair: Pair = { client, upstream, up: [], down: [] };
    this.#pairs.add(pair);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const close = () => {
      this.#pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.on('data', (chunk: Buffer) => {
      if (this.#cut === 'blackhole') pair.up.push(chunk);
      else upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (this.#cut === 'blackhole') pair.down.push(chunk);
      else client.write(chunk);
    });
  }

  /** Cuts the link: `blackhole` holds everything, `reset` resets every connection. */
  cut(how: Cut): void {
    this.#cut = how;
    if (how !== 'reset') return;
    for (const pair of [...this.#pairs]) {
      this.#pairs.delete(pair);
      pair.client.resetAndDestroy();
      pair.upstream.destroy();
    }
  }

  /** Heals it: what a blackhole held goes on, in order, before anything newer. */
  heal(): void {
    this.#cut = undefined;
    for (const pair of this.#pairs) {
      for (const chunk of pair.up.splice(0)) pair.upstream.write(chunk);
      for (const chunk of pair.down.splice(0)) pair.client.write(chunk);
    }
  }

  async close(): Promise<void> {
    this.#cut = undefined;
    for (const pair of this.#pairs) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    this.#pairs.clear();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
