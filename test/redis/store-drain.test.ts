/**
 * close() with calls still at the partner (both modes): a held permit is given back only when
 * it is released, never by close() while its call may still run. The leased schedule test's
 * seed 32001 found it in CI: a clean close gave back the permits of its calls in flight, a
 * newcomer took them, and the partner saw 9 at cap 8. The partner's own count is the oracle.
 */
import { afterEach, expect, it } from 'vitest';
import { QueueTimeoutError } from '../../src/common/errors.js';
import type { RedisStore } from '../../src/redis/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { leasedCounted, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();
const LEASE_MS = 1000;

type Mode = 'fifo' | 'leased';

function gateOf(store: RedisStore, mode: Mode, name: string, limit: number) {
  return mode === 'leased'
    ? store.semaphore({ name, limit, mode, leaseMs: LEASE_MS, refreshMs: 100 })
    : store.semaphore({ name, limit });
}

/** What Redis counts for the gate: FIFO leases, or Σ max(block, held) over live leased entries. */
function counted(mode: Mode, gate: string): Promise<number> {
  return mode === 'fifo' ? zcard(redis(), gate, 'h') : leasedCounted(redis(), gate);
}

for (const mode of ['fifo', 'leased'] as const) {
  describeRedis(`close() while calls are at the partner (${mode})`, () => {
    const fleet = useFleet('node-redis', redis);
    let partner: Partner | undefined;
    afterEach(async () => {
      partner?.openHeld();
      await partner?.close();
    });

    it('keeps their permits counted until they end: a newcomer waits, the partner never over the cap (seed 32001: 9 at cap 8)', async () => {
      partner = await startPartner();
      const p = partner;
      const [a, b] = [await fleet.store({ leaseMs: LEASE_MS }), await fleet.store()];
      const [ga, gb] = [gateOf(a, mode, 'drain', 2), gateOf(b, mode, 'drain', 2)];
      const held = () => fetch(`${p.origin}/held`).then((res) => res.text());
      const quick = () => fetch(`${p.origin}/ok?delay=20`).then((res) => res.text());
      const calls = [ga.run(held, { timeout: 5000 }), ga.run(held, { timeout: 5000 })];
      await p.waitForActive(2);

      let closed = false;
      const closing = a.close().then(() => {
        closed = true;
      });
      // The newcomer asks while A's two calls run: nothing is free at the partner.
      await expect(gb.run(quick, { timeout: 1500 })).rejects.toBeInstanceOf(QueueTimeoutError);
      expect(p.peak).toBe(2);
      expect(closed).toBe(false); // close() waits for the calls
      expect(await counted(mode, 'drain')).toBe(2);

      p.release();
      await Promise.all(calls);
      await closing;
      await gb.run(quick, { timeout: 5000 }); // their permits came back with the calls
      expect(p.peak).toBe(2);
    });

    it('permits still held after drainMs stay counted in Redis until their lease runs out', async () => {
      partner = await startPartner();
      const p = partner;
      const a = await fleet.store({ leaseMs: LEASE_MS, drainMs: 200 });
      const b = await fleet.store({ leaseMs: LEASE_MS });
      const [ga, gb] = [gateOf(a, mode, 'stuck', 1), gateOf(b, mode, 'stuck', 1)];
      const held = () => fetch(`${p.origin}/held`).then((res) => res.text());
      const quick = () => fetch(`${p.origin}/ok?delay=20`).then((res) => res.text());
      const call = ga.run(held, { timeout: 5000 });
      await p.waitForActive(1);

      await a.close(); // gives up on the call after 200 ms
      expect(p.active).toBe(1);
      expect(await counted(mode, 'stuck')).toBe(1);
      await expect(gb.run(quick, { timeout: 300 })).rejects.toBeInstanceOf(QueueTimeoutError);
      expect(p.peak).toBe(1);

      p.openHeld();
      await call; // released after close: nothing sent, its lease runs out on its own
      await gb.run(quick, { timeout: 5000 });
      expect(p.peak).toBe(1);
    });
  });
}
