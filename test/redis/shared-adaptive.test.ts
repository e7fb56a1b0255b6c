import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { Agent, type Dispatcher, request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { statusHandler } from '../../middleware/index.js';
import { HostLimiter, limitHosts, MetricsCollector, type Permit } from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import type { RedisStore, SharedSemaphore } from '../../src/redis/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { loadPhase } from '../helpers/load-phase.js';
import { describeRedis } from '../helpers/redis-server.js';
import { storeOutage } from '../helpers/store-outage.js';
import { deferred, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();

/** Resolves with the next message on a store diagnostics channel about `store`. */
function nextStoreMessage(name: string, store: RedisStore): Promise<void> {
  const { promise, resolve } = deferred<void>();
  const listener = (message: unknown) => {
    if ((message as { store?: unknown }).store !== store) return;
    unsubscribe(name, listener);
    resolve();
  };
  subscribe(name, listener);
  return promise;
}

/** The shared cap: the partner's contract, the same number in every process. */
const CAP = 12;
/**
 * The partner's service time while under its capacity: 100 ms, so that a busy machine's
 * event-loop lag stays small against the RTT the gradient reads (at 20 ms, beside a CPU hog
 * and two other test files, the limits once never grew back within the request budget).
 */
const SERVICE_MS = 100;

/**
 * A loopback partner that counts its own concurrency (from request arrival until its response
 * is written or the connection closes) and answers 503 at once to any request beyond its
 * current capacity, which the test changes mid-run.
 */
async function startCapacityPartner(capacity: number) {
  const state = { capacity, active: 0, peak: 0, refused: 0 };
  const server = http.createServer((req, res) => {
    state.active++;
    state.peak = Math.max(state.peak, state.active);
    let done = false;
    const end = () => {
      if (done) return;
      done = true;
      state.active--;
    };
    res.once('finish', end);
    res.once('close', end);
    req.resume();
    if (state.active > state.capacity) {
      state.refused++;
      res.writeHead(503).end('over capacity');
    } else {
      // The partner's own service time (what it does, not a wait of the test).
      setTimeout(() => res.end('ok'), SERVICE_MS);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    state,
    origin: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describeRedis('adaptive limits on a shared gate: each process adapts within the shared cap', () => {
  const fleet = useFleet('node-redis', redis);
  const agents: Dispatcher[] = [];
  let partner: Awaited<ReturnType<typeof startCapacityPartner>> | undefined;
  afterEach(async () => {
    await Promise.all(agents.splice(0).map((a) => a.destroy()));
    await partner?.close();
    partner = undefined;
  });

  it("a process's limit bounds its share: waiters past it take no ticket, other processes keep the rest", async () => {
    const [a, b] = [await fleet.store(), await fleet.store()];
    const ga = a.semaphore({ name: 'share', limit: 5, queueTimeout: 10_000 }) as SharedSemaphore;
    const gb = b.semaphore({ name: 'share', limit: 5, queueTimeout: 10_000 });
    ga.setLimit(2);
    expect(ga.sharedLimit).toBe(5);
    const mine = Array.from({ length: 4 }, () => ga.acquire());
    const [first, second] = (await Promise.all(mine.slice(0, 2))) as [Permit, Permit];
    await a.settled();
    expect(ga.held).toBe(2);
    expect(ga.queued).toBe(2);
    expectInvariant(ga);
    expect(await zcard(redis(), 'share', 'q')).toBe(0); // held back here, not queued in Redis
    expect(await zcard(redis(), 'share', 'h')).toBe(2); // though the cap has 3 free
    // This process's lowered limit did not lower the cap: the other process gets the rest.
    const theirs = await Promise.all([gb.acquire(), gb.acquire(), gb.acquire()]);
    expect(await zcard(redis(), 'share', 'h')).toBe(5);
    // One of ours goes back: the next local waiter takes its place.
    first.release();
    const third = await mine[2]!;
    expect(ga.held).toBe(2);
    expect(ga.queued).toBe(1);
    // Raising this process's limit sends the last waiter; it is granted once the cap has room.
    ga.setLimit(3);
    theirs[0]!.release();
    const fourth = await mine[3]!;
    expect(ga.held).toBe(3);
    expectInvariant(ga);
    expect(() => ga.setLimit(6)).toThrow(RangeError);
    expect(() => ga.setLimit(6)).toThrow('at most its shared cap 5');
    for (const p of [second, third, fourth, theirs[1]!, theirs[2]!]) p.release();
    await Promise.all([a.settled(), b.settled()]);
    expect(await zcard(redis(), 'share', 'h')).toBe(0);
  });

  it("while Redis is down a process's lowered limit also bounds its local share; once back, its held-back waiters take tickets as its limit allows", async () => {
    const store = await fleet.store({ leaseMs: 1500, heartbeatMs: 100, commandTimeoutMs: 200 });
    const gate = store.semaphore({ name: 'outage', limit: 4, queueTimeout: 10_000 });
    gate.setLimit(1);
    const first = await gate.acquire();
    const second = gate.acquire(); // held back here: this process's limit is full
    await store.settled();
    expect(await zcard(redis(), 'outage', 'q')).toBe(0);
    const down = storeOutage(store);
    await redis().kill();
    await down;
    expect(gate.stats().shared.mode).toBe('local');
    expect(gate.held).toBe(1); // the local share is min(limit 1, ceil(4 / 1)): no second permit
    expect(gate.queued).toBe(1);
    first.release();
    const secondPermit = await second; // served from the local share
    const third = gate.acquire();
    expect(gate.held).toBe(1);
    const up = nextStoreMessage('hostgate:store-up', store);
    await redis().restart();
    await up;
    expect(gate.held).toBe(1); // back on Redis, still within this process's limit
    expect(gate.queued).toBe(1);
    secondPermit.release();
    const thirdPermit = await third;
    expect(gate.held).toBe(1);
    expectInvariant(gate);
    thirdPermit.release();
    await store.settled();
    expect(await zcard(redis(), 'outage', 'h')).toBe(0);
  });

  // Each phase runs until its goal is seen once (see loadPhase: a goal re-checked by each caller
  // for itself left three callers spending a 4,000-request budget, 90 s, in CI). Beside a CPU
  // hog, two other test files and a loaded machine: 3-8 s, the phases at most 32, 554 and 58
  // requests (20 runs); the budgets fail a real stall, with what each process saw, before the
  // timeout.
  it("each process's effective limit follows the partner's capacity down and up; the partner never sees more than the shared cap", {
    timeout: 60_000,
  }, async () => {
    partner = await startCapacityPartner(CAP);
    const p = partner;
    const replicas = await Promise.all(
      [0, 1].map(async () => {
        const store = await fleet.store();
        const limiter = new HostLimiter({
          store,
          partners: [
            {
              name: 'partner',
              hosts: [p.origin],
              limit: CAP,
              shared: true,
              maxQueue: 100,
              queueTimeout: 10_000,
              // A busy machine adds event-loop lag to every RTT: a looser tolerance keeps growth possible.
              adaptive: { min: 1, initial: CAP, tolerance: 1.5 },
            },
          ],
          unknownHosts: 'reject',
        });
        const agent = new Agent({ keepAliveTimeout: 10_000 }).compose(limitHosts(limiter));
        agents.push(agent);
        return { store, limiter, agent, gate: limiter.gate('partner') as SharedSemaphore };
      }),
    );
    const limits = () => replicas.map((r) => r.gate.limit);
    const total = () => limits().reduce((x, y) => x + y, 0);
    /** 8 callers per process; the partner's peak is checked after every response. */
    const callers = replicas.flatMap(({ agent }) =>
      Array.from({ length: 8 }, () => async () => {
        const res = await request(`${p.origin}/`, { dispatcher: agent });
        await res.body.text();
        expect(p.state.peak).toBeLessThanOrEqual(CAP);
      }),
    );
    /** What each process saw, for a phase that ran out of budget. */
    const seen = (phase: string, sent: number) =>
      `${phase} (${sent} requests): ${JSON.stringify(
        replicas.map((r) => ({
          limit: r.gate.limit,
          held: r.gate.held,
          queued: r.gate.queued,
          adaptive: r.limiter.stats().partner?.adaptive,
        })),
      )}`;

    // Full capacity: the shared cap binds; nothing is refused.
    const full = await loadPhase(callers, () => p.state.peak === CAP, 2000);
    expect(full.reached, seen('the cap never filled', full.sent)).toBe(true);
    expect(p.state.refused).toBe(0);
    // Capacity 12 -> 3: both processes see 503s and cut their own limit.
    p.state.capacity = 3;
    const down = await loadPhase(callers, () => replicas.every((r) => r.gate.limit <= 4), 4000);
    expect(down.reached, seen('limits did not come down', down.sent)).toBe(true);
    expect(p.state.refused).toBeGreaterThan(0);
    for (const { gate } of replicas) {
      expect(gate.sharedLimit).toBe(CAP); // one process's drops never move the cap
    }
    // Capacity back to 12: they grow again until together they fill the shared cap.
    p.state.capacity = CAP;
    const up = await loadPhase(callers, () => total() >= CAP, 600);
    expect(up.reached, seen('limits did not grow back', up.sent)).toBe(true);
    expect(p.state.peak).toBeLessThanOrEqual(CAP);

    const [{ limiter, gate, store }] = replicas as [(typeof replicas)[number]];
    await store.settled();
    const stats = limiter.stats().partner!;
    expect(stats.limit).toBe(gate.limit);
    expect(stats.adaptive).toMatchObject({ contractLimit: CAP, effectiveLimit: gate.limit });
    expect(stats.adaptive!.limitChanges).toBeGreaterThan(2);
    expect(stats.adaptive!.drops).toBeGreaterThan(0);
    expect((stats as { shared?: { processes: number } }).shared?.processes).toBe(2);
    expect(new MetricsCollector(limiter).collect()[0]).toMatchObject({
      partner: 'partner',
      limit: gate.limit,
      contractLimit: CAP,
      adaptive: true,
    });
    const registry = new Registry();
    registerMetrics(limiter, { registry });
    const text = await registry.metrics();
    expect(text).toContain(`hostgate_permits_limit{partner="partner"} ${gate.limit}`);
    expect(text).toContain(`hostgate_permits_contract_limit{partner="partner"} ${CAP}`);
    let html = '';
    const res = { setHeader() {}, end: (body: string) => (html = body) };
    statusHandler(limiter)({ url: '/', headers: {} } as never, res as never);
    expect(html).toContain(`adaptive: limit ${gate.limit} of contract ${CAP}`);
    expect(html).toMatch(new RegExp(`all replicas: \\d+ / ${CAP} held`));
  });
});
