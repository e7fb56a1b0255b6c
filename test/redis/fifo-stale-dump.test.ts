/**
 * A FIFO gate when Redis comes back from a dump older than its state (a restart from its last
 * `save` point, a failover to a replica that lagged): the tickets withdrawn or served since the
 * dump are queued again. Each such stray, granted to its live owner, held its units for nobody
 * for a claim window (or, at a rated queue's head, its slot until passed over): fault campaign,
 * FIFO seed 132012, the fleet at 0 for 3.1 s after such a restart. Judged at the partner: how
 * long a caller queued behind the strays waits once the cap comes free.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { startPartner } from '../helpers/partner.js';
import { describeRedis, type RedisServer, startRedis } from '../helpers/redis-server.js';
import { caller, Fleet, keepDump, untilAsync } from './clients.js';

const HEARTBEAT_MS = 300;
const TIMEOUT_MS = 300;
const STRAYS = 8;

describeRedis('a FIFO gate back from a stale dump', () => {
  it('tickets queued in the dump and withdrawn since hold no units once the cap is free (the stray ticket race)', async () => {
    const first = await startRedis();
    let server: RedisServer = first;
    const fleet = new Fleet('node-redis', () => server);
    const dir = mkdtempSync(join(tmpdir(), 'hostgate-fifo-stale-'));
    const partner = await startPartner();
    const calls: Promise<unknown>[] = [];
    try {
      const options = { heartbeatMs: HEARTBEAT_MS, commandTimeoutMs: TIMEOUT_MS };
      const storeA = await fleet.store(options);
      const a = storeA.semaphore({ name: 'stale', limit: 2, queueTimeout: 400 });
      const b = (await fleet.store(options)).semaphore({
        name: 'stale',
        limit: 2,
        queueTimeout: 10_000,
      });
      const call = caller(partner, calls);
      const queuedInRedis = async () => Number(await server.command('ZCARD', 'test:{stale}:q'));
      // B holds the cap; A's waiters queue behind it, and are queued when the dump is written.
      call(b, '/held');
      call(b, '/held');
      await partner.waitForActive(2);
      const strays = Array.from({ length: STRAYS }, () => call(a, '/ok'));
      await untilAsync(async () => (await queuedInRedis()) === STRAYS, "A's tickets queued");
      await keepDump(first, dir);
      // Their deadline passes: withdrawn. A stays alive, listening.
      await Promise.all(strays);
      await untilAsync(async () => (await queuedInRedis()) === 0, "A's tickets withdrawn");
      await first.kill();
      server = await startRedis({ port: first.port, args: ['--dir', dir] });
      expect(await queuedInRedis()).toBe(STRAYS);
      const channel = `test:{stale}:wake:${storeA.processId}`;
      await untilAsync(async () => {
        const reply = (await server.command('PUBSUB', 'SHARDNUMSUB', channel)) as unknown[];
        return Number(reply[1]) > 0;
      }, "A's wake-ups subscribed again");
      // B's next caller queues behind the strays; then B's two calls end.
      let arrivedAt = Number.NaN;
      const next = b.run(async () => {
        arrivedAt = performance.now();
      });
      calls.push(next);
      await untilAsync(async () => (await queuedInRedis()) === STRAYS + 1, "B's ticket queued");
      const freed = performance.now();
      partner.release();
      await next;
      // Before: each pair of strays held the two units for a claim window (a heartbeat and a
      // command timeout, 600 ms): 2.4 s. A stray is given back by its owner the moment it hears
      // of it: a round trip or two per pair.
      expect(arrivedAt - freed).toBeLessThan(HEARTBEAT_MS + TIMEOUT_MS);
    } finally {
      partner.openHeld();
      await Promise.all(calls);
      await fleet.closeAll();
      await partner.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);
});
