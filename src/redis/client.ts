/**
 * One small interface over the two Redis clients hostgate supports, node-redis (`redis` 6) and
 * ioredis 6 — each as a single-node client or a Redis Cluster client: raw commands, and a
 * sharded-pub/sub subscriber (`SSUBSCRIBE`, Redis 7) on a connection of the store's own.
 */
import { describe } from '../common/options.js';

/** What the store needs from a Redis client: nothing else is ever called on the user's client. */
export interface StoreClient {
  /**
   * Sends one command; resolves with the raw reply. A cluster client routes EVAL / EVALSHA by
   * their first key (all keys of one gate share a hash slot); keyless commands go to any node.
   */
  command(args: readonly (string | number)[]): Promise<unknown>;
  /** A Redis Cluster client: commands spread over nodes, so a keyless `WAIT` cannot be routed. */
  readonly cluster: boolean;
  /**
   * Opens a second connection (`client.duplicate()`; a cluster client's routes each shard
   * channel to the node serving its slot), with its own error listener, subscribed with
   * `SSUBSCRIBE` to `channels`. The store owns it and closes it with {@link Subscriber.close};
   * `signal` drops it while it is still connecting or subscribing (the promise then rejects, or
   * never settles). `onLost` hears of every error, close or end of that connection (more than
   * once, and after `close()` too): a message published while it is down is lost, whatever the
   * client's reconnect does.
   */
  subscribe(
    channels: readonly string[],
    onMessage: (message: string, channel: string) => void,
    onLost: (error: unknown) => void,
    signal: AbortSignal,
  ): Promise<Subscriber>;
}

export interface Subscriber {
  /** Subscribes one more shard channel on the same connection (a gate created later). */
  add(channel: string): Promise<void>;
  close(): Promise<void>;
}

/** node-redis 6 (`createClient()` from `redis` or `@redis/client`), the parts we use. */
interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
  /** False until `connect()`, and after `close()`/`destroy()` or a reconnect that gave up. */
  readonly isOpen?: boolean;
  duplicate(): NodeRedisLike & {
    connect(): Promise<unknown>;
    sSubscribe(
      channels: string | string[],
      listener: (message: string, channel: string) => void,
    ): Promise<void>;
    on(event: 'error', listener: (error: unknown) => void): unknown;
    on(event: 'end', listener: () => void): unknown;
    destroy(): void;
    close?(): Promise<void>;
  };
}

/** node-redis 6 `createCluster()`: commands take the key that routes them. */
interface NodeRedisClusterLike {
  sendCommand(
    firstKey: string | undefined,
    isReadonly: boolean | undefined,
    args: string[],
  ): Promise<unknown>;
  getSlotMaster(slot: number): unknown;
}

/** ioredis 6 (`new Redis()`, or `new Cluster()`, which routes by key itself), the parts we use. */
interface IoRedisLike {
  /** Set on ioredis' `Cluster`. */
  isCluster?: boolean;
  /** `'wait'` (lazyConnect, not yet connected) … `'ready'` … `'end'` (closed for good). */
  readonly status?: string;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  /** A `Cluster` takes overrides: `shardedSubscribers` routes SSUBSCRIBE to each slot's node. */
  duplicate(
    nodes?: unknown[],
    options?: { shardedSubscribers: boolean },
  ): IoRedisLike & {
    ssubscribe(...channels: string[]): Promise<unknown>;
    on(event: 'smessage', listener: (channel: string, message: string) => void): unknown;
    on(event: 'error', listener: (error: unknown) => void): unknown;
    on(event: 'close' | 'end', listener: () => void): unknown;
    disconnect(): void;
  };
}

/** Wraps a node-redis or ioredis client; throws a `TypeError` for anything else. */
export function storeClient(client: unknown): StoreClient {
  const c = client as Partial<NodeRedisLike & IoRedisLike> | null;
  if (c !== null && typeof c === 'object' && typeof c.duplicate === 'function') {
    // ioredis has a sendCommand too (taking its own Command objects): look for call() first.
    if (typeof c.call === 'function') {
      // 'wait' (lazyConnect) connects on the first command; 'end' never will again.
      if (c.status === 'end') {
        throw new TypeError(
          'client must be a connected ioredis client, got one that was closed (status "end": disconnect() or quit() was called, or it gave up reconnecting)',
        );
      }
      return ioRedis(c as IoRedisLike);
    }
    if (typeof c.sendCommand === 'function') {
      // node-redis queues nothing for a client never connected: every call would fail.
      if (c.isOpen === false) {
        throw new TypeError(
          'client must be a connected node-redis client, got one that is not open: call `await client.connect()` before redisStore()',
        );
      }
      // createCluster(): the same duplicate/subscribe shape, commands routed by a key.
      const cluster = c as Partial<NodeRedisClusterLike>;
      const routed = typeof cluster.getSlotMaster === 'function';
      return nodeRedis(c as NodeRedisLike, routed ? (cluster as NodeRedisClusterLike) : undefined);
    }
  }
  throw new TypeError(
    `client must be a connected node-redis (redis 6) or ioredis (6) client or cluster, got ${describe(client)}`,
  );
}

/** The key a cluster routes a command by: EVAL / EVALSHA's first key, if it has one. */
function firstKeyOf(args: readonly string[]): string | undefined {
  const [name, , numKeys, key] = args;
  return (name === 'EVALSHA' || name === 'EVAL') && Number(numKeys) > 0 ? key : undefined;
}

function nodeRedis(client: NodeRedisLike, cluster?: NodeRedisClusterLike): StoreClient {
  return {
    cluster: cluster !== undefined,
    command(args) {
      const strings = args.map(String);
      if (cluster === undefined) return client.sendCommand(strings);
      return cluster.sendCommand(firstKeyOf(strings), false, strings);
    },
    async subscribe(channels, onMessage, onLost, signal) {
      const sub = client.duplicate();
      sub.on('error', onLost); // before connect: a refused connection must not be unhandled
      sub.on('end', () => onLost(new Error('the wake-up connection ended')));
      const drop = () => sub.destroy();
      signal.addEventListener('abort', drop, { once: true });
      try {
        await sub.connect();
        // One channel a call: on a cluster, channels of different slots live on different nodes.
        for (const channel of channels) await sub.sSubscribe(channel, onMessage);
      } catch (error) {
        sub.destroy();
        throw error;
      } finally {
        signal.removeEventListener('abort', drop);
      }
      return {
        add: (channel) => sub.sSubscribe(channel, onMessage),
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
    cluster: client.isCluster === true,
    command: ([name, ...args]) => client.call(name as string, ...args),
    async subscribe(channels, onMessage, onLost, signal) {
      const cluster = client.isCluster === true;
      const sub = cluster ? client.duplicate([], { shardedSubscribers: true }) : client.duplicate();
      sub.on('error', onLost);
      sub.on('close', () => onLost(new Error('the wake-up connection closed')));
      sub.on('end', () => onLost(new Error('the wake-up connection ended')));
      sub.on('smessage', (channel, message) => onMessage(message, channel));
      const drop = () => sub.disconnect();
      signal.addEventListener('abort', drop, { once: true });
      try {
        for (const channel of channels) await sub.ssubscribe(channel);
      } catch (error) {
        sub.disconnect();
        throw error;
      } finally {
        signal.removeEventListener('abort', drop);
      }
      return {
        add: async (channel) => {
          await sub.ssubscribe(channel);
        },
        async close() {
          sub.disconnect();
        },
      };
    },
  };
}
