/**
 * A leased gate when Redis comes back from a dump older than its state (a restart from its last
 * `save` point, a failover to a replica that lagged): the writes since the dump are lost, the
 * rest is there. Fault campaign (stop 52), leased seed 130015: the partner at 4 at cap 3 after
 * such a restart. Judged at the partner, which counts its own concurrent requests.
 *
 * The race: process A held the whole cap when the dump was written, then gave it back, and B
 * took it; Redis comes back counting A's block, not B's. A's next refresh, its demand back, is
 * answered as if A's block were still its own and B held nothing: 4-6 at the partner, 3 runs in
 * 4, before stop 52 (commands/leasedRefresh-4.lua, Lost writes).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { type LeasedSemaphore, type RedisStore, redisStore } from '../../src/redis/index.js';
import { startPartner } from '../helpers/partner.js';
import { describeRedis, type RedisServer, startRedis } from '../helpers/redis-server.js';
import { connectClient, keepDump, type TestClient, untilAsync } from './clients.js';

const CAP = 3;
const LEASE_MS = 3000;

const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeRedis('a leased gate back from a stale dump', () => {
  it('the cap holds at the partner when Redis restarts from a dump older than its state (the stale dump race)', async () => {
    const first = await startRedis();
    let server: RedisServer = first;
    const dir = mkdtempSync(join(tmpdir(), 'hostgate-leased-stale-'));
    const partner = await startPartner();
    const clients: TestClient[] = [];
    const stores: RedisStore[] = [];
    const calls: Promise<unknown>[] = [];
    try {
      const gate = async (): Promise<LeasedSemaphore> => {
        const client = await connectClient('node-redis', server);
        clients.push(client);
        const store = redisStore({
          client: client.client,
          prefix: 'test:',
          commandTimeoutMs: 300,
          onStoreError: 'reject',
        });
        stores.push(store);
        return store.semaphore({
          name: 'stale',
          limit: CAP,
          mode: 'leased',
          leaseMs: LEASE_MS,
          refreshMs: 1000,
          queueTimeout: 20_000,
        });
      };
      const a = await gate();
      const b = await gate();
      const call = (g: LeasedSemaphore) => {
        const p = g
          .run(async () => {
            const res = await fetch(`${partner.origin}/held`);
            await res.arrayBuffer();
          })
          .catch((e: unknown) => e);
        calls.push(p);
        return p;
      };
      const block = async (id: string) => {
        const entry = (await server.command('HGET', 'test:{stale}:l', id)) as string | null;
        return Number(entry?.split(' ')[1] ?? 0);
      };
      // A holds the whole cap; the dump is written then.
      const firstCalls = [call(a), call(a), call(a)];
      await partner.waitForActive(CAP);
      await untilAsync(async () => a.block === CAP, "A's block of the whole cap");
      await keepDump(first, dir);
      // A gives it back and B takes it (written after the dump: lost with the restart).
      partner.release();
      await Promise.all(firstCalls);
      for (let i = 0; i < CAP; i++) void call(b);
      await partner.waitForActive(CAP);
      await untilAsync(async () => b.block === CAP, "B's block of the whole cap");
      const ids = ((await server.command('HKEYS', 'test:{stale}:l')) as string[]).filter(
        (k) => !k.startsWith('_'),
      );
      expect(ids.length).toBe(2);
      // Redis restarts from the dump (A's block of 3 is back, B's is gone) just after B's timer
      // refreshed, so that A's demand, back at once, is the first to refresh after it (B's
      // refresh would tell Redis what B holds).
      const blocks = await Promise.all(ids.map(block));
      const bId = ids[blocks.indexOf(CAP)]!;
      const entryOf = () => server.command('HGET', 'test:{stale}:l', bId);
      const was = await entryOf();
      await untilAsync(async () => (await entryOf()) !== was, "B's next refresh");
      await first.kill();
      server = await startRedis({ port: first.port, args: ['--dir', dir] });
      expect(Math.max(...(await Promise.all(ids.map(block))))).toBe(CAP);
      partner.resetPeak();
      // A's demand is back; B still holds the cap at the partner.
      for (let i = 0; i < CAP; i++) void call(a);
      const end = performance.now() + LEASE_MS + 1000;
      while (performance.now() < end) {
        expect(partner.peak).toBeLessThanOrEqual(CAP);
        await hold(10);
      }
      expect(partner.active).toBe(CAP);
    } finally {
      partner.openHeld();
      await Promise.all(stores.map((s) => s.close()));
      await Promise.all(calls);
      await Promise.all(clients.map((c) => c.close()));
      await partner.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);
});
