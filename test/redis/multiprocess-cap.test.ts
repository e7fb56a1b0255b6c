import { performance } from 'node:perf_hooks';
import { expect, it } from 'vitest';
import type { Worker } from '../../bench/lib/fleet.js';
import { connectResp } from '../../bench/lib/resp.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import {
  dropGates,
  leftInRedis,
  openGates,
  queueBehindHolder,
  TEST_HEARTBEAT_MS,
  TEST_LEASE_MS,
  untilRedis,
  useReplicaFleet,
} from './replicas.js';

/**
 * Six replicas (forked once for the file; each scenario gives them a fresh client, store and
 * limiter) share one cap through a private redis-server. The partner counts what it sees.
 */
const REPLICAS = 6;
/** Per replica; `HOSTGATE_REDIS_HEAVY=1` runs 6 × 2,000. */
const LOAD_REQUESTS = process.env.HOSTGATE_REDIS_HEAVY ? 2000 : 350;

async function heldBy(worker: Worker): Promise<number> {
  worker.send({ type: 'stats' });
  const { stats } = await worker.next<{ stats: Record<string, { held: number }> }>('stats');
  return stats.billing?.held ?? Number.NaN;
}

/** Counts the commands clients send (MONITOR; commands run inside scripts show as `lua`). */
async function countClientCommands(port: number, windowMs: number): Promise<string[]> {
  const monitor = await connectResp(port);
  const seen: string[] = [];
  monitor.onPush((line) => {
    if (typeof line === 'string' && !line.includes(' lua]')) seen.push(line);
  });
  await monitor.command('MONITOR');
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  monitor.close();
  return seen;
}

describeRedis('replicas sharing one cap through Redis', () => {
  const fleet = useReplicaFleet(REPLICAS);
  /** A fresh partner for the test (closed after it). */
  const partnerFor = async (): Promise<Partner> => {
    fleet.partner = await startPartner();
    return fleet.partner;
  };

  it('6 replicas × a shared cap of 20: the partner never sees more, through aborts and errors, and no lease is left', async () => {
    const cap = 20;
    const partner = await partnerFor();
    const prefix = 'load:';
    await openGates(fleet.replicas, {
      redisPort: fleet.redis.port,
      partnerOrigin: partner.origin,
      limit: cap,
      prefix,
    });
    fleet.replicas.forEach((w, i) => {
      w.send({ type: 'load', requests: LOAD_REQUESTS, concurrency: 30, seed: 1100 + i });
    });
    type Counts = { ok: number; failed: number; aborted: number; shed: number; other: number };
    const results = await Promise.all(fleet.replicas.map((w) => w.next<Counts>('loaded', 90_000)));
    const sum = (key: keyof Counts) => results.reduce((n, r) => n + r[key], 0);
    expect(sum('ok') + sum('failed') + sum('aborted') + sum('shed') + sum('other')).toBe(
      REPLICAS * LOAD_REQUESTS,
    );
    expect(sum('other')).toBe(0);
    expect(sum('ok')).toBeGreaterThan(REPLICAS * LOAD_REQUESTS * 0.5);
    expect(sum('aborted')).toBeGreaterThan(0);
    // The only excess the issue allows: a cancelled request whose close reaches the partner a
    // moment after its permit went to the next request.
    expect(partner.peak).toBeLessThanOrEqual(cap + Math.min(partner.closedEarly, 1));
    await dropGates(fleet.replicas);
    expect(await leftInRedis(fleet.redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 120_000);

  it('gives each of 3 contending replicas at least 20% of the grants of a cap of 4', async () => {
    const cap = 4;
    const three = fleet.replicas.slice(0, 3);
    const partner = await partnerFor();
    await openGates(three, {
      redisPort: fleet.redis.port,
      partnerOrigin: partner.origin,
      limit: cap,
      prefix: 'fair:',
    });
    for (const w of three) w.send({ type: 'contend', callers: 6 });
    await partner.waitForArrived(300);
    for (const w of three) w.send({ type: 'stop' });
    const grants = (
      await Promise.all(three.map((w) => w.next<{ grants: number }>('contended', 20_000)))
    ).map((r) => r.grants);
    const total = grants.reduce((a, b) => a + b, 0);
    for (const g of grants) {
      expect(g / total, `grants ${grants.join(', ')}`).toBeGreaterThanOrEqual(0.2);
    }
    expect(partner.peak).toBeLessThanOrEqual(cap);
    await dropGates(three);
  }, 30_000);

  it('grants tickets in arrival order across processes (FIFO, no barging)', async () => {
    const cap = 4;
    const [holder, b, c] = fleet.replicas as [Worker, Worker, Worker];
    const partner = await partnerFor();
    const prefix = 'fifo:';
    await openGates([holder, b, c], {
      redisPort: fleet.redis.port,
      partnerOrigin: partner.origin,
      limit: cap,
      prefix,
    });
    holder.send({ type: 'hold', count: cap });
    await partner.waitForActive(cap);
    // Tickets in the order b, c, b, c: each queued in Redis before the next is asked for.
    const order = [b, c, b, c];
    for (const [i, w] of order.entries()) {
      w.send({ type: 'request', count: 1, path: '/held' });
      await untilRedis(
        fleet.redis,
        async () => (await leftInRedis(fleet.redis, prefix)).tickets === i + 1,
      );
    }
    // Each release at the partner ends one of the holder's requests: its permit goes to the
    // oldest ticket, whose request then parks at the partner.
    const expected = { b: 0, c: 0 };
    for (const [i, w] of order.entries()) {
      partner.release(1);
      await partner.waitForArrived(cap + i + 1);
      expected[w === b ? 'b' : 'c']++;
      expect({ b: await heldBy(b), c: await heldBy(c) }).toEqual(expected);
    }
    partner.openHeld();
    for (const w of order) await w.next('answered', 10_000);
    await dropGates([holder, b, c]);
    expect(await leftInRedis(fleet.redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 30_000);

  it('lets 50 waiters wait quietly (< 50 commands/s from the clients) and wakes the first within 500 ms of a release', async () => {
    const cap = 4;
    const waiters = 50;
    const windowMs = 2000;
    const [holder, waiter] = fleet.replicas as [Worker, Worker];
    const partner = await partnerFor();
    const prefix = 'wake:';
    await queueBehindHolder({ ...fleet, partner }, holder, waiter, {
      cap,
      prefix,
      waiting: waiters,
      path: '/ok',
    });

    const commands = await countClientCommands(fleet.redis.port, windowMs);
    const perSecond = commands.length / (windowMs / 1000);
    expect(perSecond, commands.slice(0, 20).join('\n')).toBeLessThan(50);
    expect(partner.arrived).toBe(cap);

    const released = performance.now();
    partner.release(1);
    await partner.waitForArrived(cap + 1);
    expect(performance.now() - released).toBeLessThan(500);

    partner.openHeld();
    for (let i = 0; i < waiters; i++) {
      expect(await waiter.next('answered', 15_000)).toMatchObject({ status: 200 });
    }
    expect(partner.peak).toBeLessThanOrEqual(cap);
    await dropGates([holder, waiter]);
    expect(await leftInRedis(fleet.redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 30_000);

  // Last: it kills one of the replicas.
  it('SIGKILL of the replica holding every permit: another is served within lease + heartbeat', async () => {
    const cap = 4;
    const holder = fleet.replicas[REPLICAS - 1]!;
    const other = fleet.replicas[REPLICAS - 2]!;
    const partner = await partnerFor();
    const prefix = 'kill:';
    await queueBehindHolder({ ...fleet, partner }, holder, other, {
      cap,
      prefix,
      waiting: 1,
      path: '/ok',
    });
    expect(partner.arrived).toBe(cap);

    const killedAt = performance.now();
    holder.kill('SIGKILL');
    await holder.exited;
    expect(await other.next('answered', 10_000)).toMatchObject({ status: 200 });
    const servedAfterMs = performance.now() - killedAt;
    expect(partner.arrived).toBe(cap + 1);
    // A lease runs out leaseMs after its last renewal, at most a heartbeat before the kill;
    // the waiter's heartbeat (or any script's expiry sweep) then hands the permit on. A second
    // of slack for a busy machine.
    expect(servedAfterMs).toBeLessThan(TEST_LEASE_MS + TEST_HEARTBEAT_MS + 1000);
    await dropGates([other]);
  }, 30_000);
});
