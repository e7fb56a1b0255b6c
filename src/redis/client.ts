/**
 * One small interface over the two Redis clients hostgate supports, node-redis (`redis` 6) and
 * ioredis 6: raw commands, and a subscriber on a connection of the store's own.
 */
import { describe } from '../options.js';

/** What the store needs from a Redis client: nothing else is ever called on the user's client. */
export interface StoreClient {
  /** Sends one command; resolves with the raw reply. */
  command(args: readonly (string | number)[]): Promise<unknown>;
  /**
   * Opens a second connection (`client.duplicate()`), with its own error listener, subscribed to
   * `channel`. The store owns it and closes it with {@link Subscriber.close}.
   */
  subscribe(
    channel: string,
    onMessage: (message: string) => void,
    onError: (error: unknown) => void,
  ): Promise<Subscriber>;
}

export interface Subscriber {
  close(): Promise<void>;
}

/** node-redis 6 (`createClient()` from `redis` or `@redis/client`), the parts we use. */
interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
  duplicate(): NodeRedisLike & {
    connect(): Promise<unknown>;
    subscribe(channel: string, listener: (message: string) => void): Promise<void>;
    on(event: 'error', listener: (error: unknown) => void): unknown;
    destroy(): void;
    close?(): Promise<void>;
  };
}

/** ioredis 6 (`new Redis()`), the parts we use. */
interface IoRedisLike {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  duplicate(): IoRedisLike & {
    subscribe(channel: string): Promise<unknown>;
    on(event: 'message', listener: (channel: string, message: string) => void): unknown;
    on(event: 'error', listener: (error: unknown) => void): unknown;
    disconnect(): void;
  };
}

/** Wraps a node-redis or ioredis client; throws a `TypeError` for anything else. */
export function storeClient(client: unknown): StoreClient {
  const c = client as Partial<NodeRedisLike & IoRedisLike> | null;
  if (c !== null && typeof c === 'object' && typeof c.duplicate === 'function') {
    // ioredis has a sendCommand too (taking its own Command objects): look for call() first.
    if (typeof c.call === 'function') return ioRedis(c as IoRedisLike);
    if (typeof c.sendCommand === 'function') return nodeRedis(c as NodeRedisLike);
  }
  throw new TypeError(
    `client must be a connected node-redis (redis 6) or ioredis (6) client, got ${describe(client)}`,
  );
}

function nodeRedis(client: NodeRedisLike): StoreClient {
  return {
    command: (args) => client.sendCommand(args.map(String)),
    async subscribe(channel, onMessage, onError) {
      const sub = client.duplicate();
      sub.on('error', onError); // before connect: a refused connection must not be unhandled
      try {
        await sub.connect();
        await sub.subscribe(channel, onMessage);
      } catch (error) {
        sub.destroy();
        throw error;
      }
      return {
        async close() {
          // destroy(): no QUIT round trip to a Redis that may be paused.
          sub.destroy();
        },
      };
    },
  };
}

function ioRedis(client: IoRedisLike): StoreClient {
  return {
    command: ([name, ...args]) => client.call(name as string, ...args),
    async subscribe(channel, onMessage, onError) {
      const sub = client.duplicate();
      sub.on('error', onError);
      sub.on('message', (_channel, message) => onMessage(message));
      try {
        await sub.subscribe(channel);
      } catch (error) {
        sub.disconnect();
        throw error;
      }
      return {
        async close() {
          sub.disconnect();
        },
      };
    },
  };
}
