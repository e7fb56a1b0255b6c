import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { type RedisStore, redisStore } from '../../src/redis/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import {
  describeRedis,
  type RedisCluster,
  startRedisCluster,
  stopAllRedis,
} from '../helpers/redis-server.js';

/**
 * A real Redis Cluster of three primaries (redis-server --cluster-enabled, slots assigned with
 * redis-cli): every key of one gate shares a hash slot, so each gate's scripts run on one node
 * and different gates spread over nodes. One store on node-redis' `createCluster()` and one on
 * ioredis' `Cluster` stand for two processes.
 */
describeRedis('a shared gate on Redis Cluster (node-redis and ioredis cluster clients)', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster(3);
  }, 30_000);
  afterAll(stopAllRedis);

  const GATES = ['billing', 'inventory', 'shipping', 'search'] as const;
  const LIMIT = 2;
  const TASKS_PER_STORE = 12;

  /** The port of the primary that serves `key`'s slot. */
  async function ownerOf(key: string): Promise<number> {
    const slot = Number(await cluster.nodes[0]!.command('CLUSTER', 'KEYSLOT', key));
    const ranges = (await cluster.nodes[0]!.command('CLUSTER', 'SLOTS')) as [
      number,
      number,
      [string, number, ...unknown[]],
    ][];
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    if (range === undefined) throw new Error(`no node serves slot ${slot}`);
    return Number(range[2][1]);
  }

  it("shares each cap across both clients, routes each script to its node, wakes waiters by sharded push (SPUBLISH on the gate's node, no PUBLISH), and leaves no lease", async () => {
    // Gates spread over more than one node: the test would prove little on one.
    const owners = new Set(await Promise.all(GATES.map((g) => ownerOf(`cl:{${g}}:h`))));
    expect(owners.size).toBeGreaterThan(1);

    const nodeRedis = createCluster({ rootNodes: [{ url: cluster.nodes[0]!.url }] });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
    const ioredis = new Cluster([{ host: '127.0.0.1', port: cluster.nodes[1]!.port }]);
    ioredis.on('error', () => {});
    // The heartbeat (the safety re-check for a lost wake-up) is far beyond every wait here: a
    // waiter in one store is served only if the other store's release reaches it by pub/sub.
    const options = {
      prefix: 'cl:',
      onStoreError: 'reject',
      leaseMs: 120_000,
      heartbeatMs: 50_000,
      commandTimeoutMs: 2000,
    } as const;
    const stores: RedisStore[] = [
      redisStore({ client: nodeRedis, ...options }),
      redisStore({ client: ioredis, ...options }),
    ];
    try {
      const active = new Map<string, number>(GATES.map((g) => [g, 0]));
      const peak = new Map<string, number>(GATES.map((g) => [g, 0]));
      const gates: Semaphore[] = [];
      const runs: Promise<unknown>[] = [];
      for (const store of stores) {
        for (const name of GATES) {
          const gate = store.semaphore({ name, limit: LIMIT, maxQueue: 100, queueTimeout: 20_000 });
          gates.push(gate);
          for (let i = 0; i < TASKS_PER_STORE; i++) {
            runs.push(
              gate.run(async () => {
                const now = active.get(name)! + 1;
                active.set(name, now);
                peak.set(name, Math.max(peak.get(name)!, now));
                // Work that lasts a few ms, so the other store's callers queue in Redis.
                await new Promise((resolve) => setTimeout(resolve, 3));
                active.set(name, active.get(name)! - 1);
                expectInvariant(gate);
              }),
            );
          }
        }
      }
      await Promise.all(runs);
      for (const name of GATES) expect(peak.get(name), name).toBe(LIMIT);
      for (const gate of gates) {
        expectInvariant(gate);
        expect(gate.stats()).toMatchObject({ acquired: TASKS_PER_STORE, held: 0, queued: 0 });
      }
      // Each script went straight to its gate's node: one round trip, no MOVED redirection.
      for (const node of cluster.nodes) {
        expect(String(await node.command('INFO', 'errorstats')), `:${node.port}`).not.toMatch(
          /errorstat_MOVED/,
        );
      }
      // Wake-ups are sharded: SPUBLISH ran on the nodes that own gates (inside their scripts),
      // and no classic PUBLISH anywhere (on a Cluster it is broadcast to every node).
      for (const node of cluster.nodes) {
        const stats = String(await node.command('INFO', 'commandstats'));
        const spublish = Number(/^cmdstat_spublish:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
        expect(stats, `:${node.port}`).not.toMatch(/^cmdstat_publish:/m);
        if (owners.has(node.port)) expect(spublish, `spublish on :${node.port}`).toBeGreaterThan(0);
        else expect(spublish, `spublish on :${node.port}`).toBe(0);
      }
      // Every lease and ticket is gone from the node that owns its gate.
      await Promise.all(stores.map((store) => store.settled()));
      for (const name of GATES) {
        expect(await ioredis.zcard(`cl:{${name}}:h`), `${name} leases`).toBe(0);
        expect(await ioredis.zcard(`cl:{${name}}:q`), `${name} tickets`).toBe(0);
      }
    } finally {
      await Promise.all(stores.map((store) => store.close()));
      nodeRedis.destroy();
      ioredis.disconnect();
    }
  });

  it('refuses strict mode (WAIT) on a cluster client, whose WAIT could reach another node', async () => {
    const ioredis = new Cluster([{ host: '127.0.0.1', port: cluster.nodes[0]!.port }], {
      lazyConnect: true,
    });
    try {
      expect(() => redisStore({ client: ioredis, replicas: 1 })).toThrow(
        /replicas \(strict mode, WAIT\) needs a single-node client/,
      );
    } finally {
      ioredis.disconnect();
    }
  });
});
