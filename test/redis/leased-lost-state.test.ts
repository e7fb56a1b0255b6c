/**
 * Issue 32, item 1 (leased mode): Redis away longer than a lease (SIGSTOP, OOM errors, a
 * restart with its data) must not push the fleet past its cap when Redis answers again. Cap 8,
 * 4 processes × 6 callers, lease 3 s, fault 4.5 s. The oracle is a partner that counts its own
 * concurrent requests; each test also reports how long after the fault the fleet held its
 * whole cap again (docs/shared-gates.md).
 */
import { afterEach, expect, it } from 'vitest';
import { startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { caller, Fleet, privateRedis, untilAsync } from './clients.js';
import { afterFault, busyFleet, type LeasedFleet, leasedFleet } from './leased-fleet.js';

const redis = privateRedis();
const CAP = 8;
const FAULT_MS = 4500;

let fleet: LeasedFleet | undefined;
afterEach(async () => {
  redis().resume();
  await redis().command('CONFIG', 'SET', 'maxmemory', '0');
  await fleet?.stop();
  fleet = undefined;
  await redis().command('FLUSHALL');
});

/** Sleeps on a timer: the fault's length, not a wait for an event. */
const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeRedis(
  'a leased gate when Redis comes back after a fault longer than a lease (issue 32)',
  () => {
    it('Redis SIGSTOPped 4.5 s with a 3 s lease: no excess at the partner when it resumes', async () => {
      const f = await busyFleet('stopped', redis);
      fleet = f;
      redis().pause();
      await hold(FAULT_MS);
      redis().resume();
      await afterFault(f, CAP);
    }, 20_000);

    it('Redis answering OOM errors (maxmemory, noeviction) for 4.5 s: no excess when it recovers', async () => {
      const f = await busyFleet('oom', redis);
      fleet = f;
      await redis().command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
      await redis().command('CONFIG', 'SET', 'maxmemory', '1');
      await hold(FAULT_MS);
      await redis().command('CONFIG', 'SET', 'maxmemory', '0');
      await afterFault(f, CAP);
    }, 20_000);

    // The learning window's ratchet (fault campaign, leased seed 117042: cap 4, rate 10 per
    // 500 ms, 4 replicas under 'reject', Redis out of memory 4.6 s with a 3 s lease: the fleet
    // sent nothing for 3.2 s after Redis answered again). Under 'reject' a process whose lease
    // lapsed sends nothing and its callers are shed, so its first refresh back reports no use
    // and no demand; the window let nobody grow past what it used, and its block and share,
    // lowered to that, stayed at 0 for the whole window (a lease), whatever demand came back.
    // Nothing anybody gives back in the window can be taken (nobody grows), so the window now
    // keeps what Redis counted for each process: the calls resume with Redis.
    it("a rated fleet under 'reject', Redis out of memory past a lease: it sends again when Redis answers, not a lease later", async () => {
      const rate = { limit: 10, per: 500, burst: 2 };
      const f = await leasedFleet(redis, {
        name: 'ratchet',
        processes: 3,
        callers: 4,
        cap: CAP,
        leaseMs: 3000,
        refreshMs: 750,
        onStoreError: 'reject',
        rate,
        delayMs: 10,
      });
      fleet = f;
      await f.partner.waitForArrived(30);
      await redis().command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
      await redis().command('CONFIG', 'SET', 'maxmemory', '1');
      await hold(FAULT_MS);
      await redis().command('CONFIG', 'SET', 'maxmemory', '0');
      const before = f.partner.arrived;
      await hold(3000); // the lease after Redis answers: the learning window
      const sent = f.partner.arrived - before;
      console.log(
        `rated leased fleet after OOM past the lease: ${sent} calls in the lease after (rate: 60)`,
      );
      // At the rate, 60; a refresh (750 ms) or two to hear of Redis again. Before: 0-2.
      expect(sent).toBeGreaterThanOrEqual(20);
      expect(f.partner.peak).toBeLessThanOrEqual(CAP);
    }, 25_000);

    // Fault campaign, leased seed 134065 (cap 1 over 4 processes under 'reject', Redis out of
    // memory 2.2 s): the only unit was between processes when it began, and the learning window
    // that every outage opened let nobody grow for a lease: the partner at 0 for 5.2 s. Back from
    // an outage of the same server, each process granted within the block Redis counts for it:
    // no window, unless a process's fallback grants past its count (a localLimit, a rate's).
    it("a unit between processes when Redis answers OOM past a refresh, under 'reject': it moves when Redis answers, not a lease later (campaign seed 134065)", async () => {
      const LEASE_MS = 4000;
      const partner = await startPartner();
      const fleet = new Fleet('node-redis', redis);
      const calls: Promise<unknown>[] = [];
      const call = caller(partner, calls);
      try {
        const gate = async () =>
          (await fleet.store({ commandTimeoutMs: 300, onStoreError: 'reject' })).semaphore({
            name: 'between',
            limit: 1,
            mode: 'leased',
            leaseMs: LEASE_MS,
            refreshMs: 750,
            queueTimeout: 20_000,
          });
        const a = await gate();
        const b = await gate();
        // A holds the unit at the partner; B waits for it, and Redis knows B wants it.
        call(a, '/held');
        await partner.waitForActive(1);
        call(b, '/ok');
        const wants = async () => {
          const entries = (await redis().command('HVALS', 'test:{between}:l')) as string[];
          return entries.filter((e) => e.split(' ')[3] === '1').length;
        };
        await untilAsync(async () => (await wants()) === 2, "both processes' demand in Redis");
        await redis().command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
        await redis().command('CONFIG', 'SET', 'maxmemory', '1');
        // A's call ends while Redis refuses writes: A cannot give the unit back until it answers.
        partner.release();
        await hold(2000);
        await redis().command('CONFIG', 'SET', 'maxmemory', '0');
        const back = performance.now();
        await partner.waitForArrived(2);
        const movedMs = performance.now() - back;
        console.log(
          `the unit moved ${Math.round(movedMs)} ms after Redis answered (a lease: ${LEASE_MS})`,
        );
        // A refresh or two (750 ms) and a handoff; before: the learning window, a lease.
        expect(movedMs).toBeLessThan(LEASE_MS / 2);
        expect(partner.peak).toBeLessThanOrEqual(1);
      } finally {
        partner.openHeld();
        await fleet.closeAll();
        await Promise.all(calls);
        await partner.close();
      }
    }, 20_000);
  },
);
