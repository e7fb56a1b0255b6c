import { Agent, type Dispatcher, interceptors, request, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  HostLimiter,
  limitFetch,
  limitHosts,
  Retrier,
  type RetrierOptions,
  type Semaphore,
} from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';

// Real loopback partners that count their own concurrency: the undici-dispatcher path, and
// limitFetch over Node's global fetch.

let partner: Partner;
let agent: Agent | undefined;

beforeEach(async () => {
  partner = await startPartner();
});
afterEach(async () => {
  await agent?.close();
  agent = undefined;
  await partner.close();
});

function gated(limit: number, maxQueue = 200) {
  const limiter = new HostLimiter({
    partners: [{ name: 'billing', hosts: [partner.origin], limit, maxQueue, queueTimeout: 10_000 }],
    unknownHosts: 'reject',
  });
  return { limiter, gate: limiter.gate('billing')! };
}

function expectIdle(gate: Semaphore) {
  expectInvariant(gate);
  expect(gate.held).toBe(0);
  expect(gate.queued).toBe(0);
  expect(gate.stats().doubleReleases).toBe(0);
}

/** undici.fetch over `agent.compose(limitHosts(limiter))`, wrapped by a retrier. */
function retryingFetch(limiter: HostLimiter, options: RetrierOptions) {
  agent = new Agent();
  const dispatcher = agent.compose(limitHosts(limiter));
  const retrier = new Retrier({ limiter, ...options });
  const fetchOverGate = (input: string, init?: Parameters<typeof undiciFetch>[1]) =>
    undiciFetch(input, { ...init, dispatcher });
  return { retrier, fetch: retrier.wrap(fetchOverGate) };
}

describe('retrier over a limitHosts dispatcher (undici.fetch)', () => {
  it('keeps the partner within its cap across attempts, holding no permit while backing off', async () => {
    const { limiter, gate } = gated(3);
    const heldWhileSleeping: number[] = [];
    const callers = 20;
    const { retrier, fetch } = retryingFetch(limiter, {
      retries: 2,
      minRetryConcurrency: callers, // this test is about the cap; the budget has its own below
      sleep: async () => {
        heldWhileSleeping.push(gate.held);
      },
      onRetry: (event) => {
        if (event.gate !== gate) throw new Error('budget keyed by the wrong gate');
      },
    });

    const results = await Promise.all(
      Array.from({ length: callers }, async (_, i) => {
        const res = await fetch(`${partner.url}/flaky?id=${i}&fails=2&delay=2`);
        return [res.status, await res.text()];
      }),
    );

    expect(results).toEqual(Array.from({ length: callers }, () => [200, 'xx']));
    expect(partner.arrived).toBe(callers * 3);
    expect(partner.peak).toBe(3); // saturated, never over
    expect(gate.stats().acquired).toBe(callers * 3); // one permit per attempt
    expect(heldWhileSleeping).toHaveLength(callers * 2);
    expect(retrier.stats().billing).toMatchObject({ attempts: 60, retries: 40, activeRetries: 0 });
    expectIdle(gate);
  });

  it('holds no permit while sleeping: the sleeper is not counted in the gate', async () => {
    const { limiter, gate } = gated(1);
    const seen: { held: number; available: number }[] = [];
    const { fetch } = retryingFetch(limiter, {
      sleep: async () => {
        seen.push({ held: gate.held, available: gate.available });
      },
    });
    const res = await fetch(`${partner.url}/flaky?id=solo&fails=2&retryAfter=0`);
    expect(await res.text()).toBe('xx');
    expect(seen).toEqual([
      { held: 0, available: 1 },
      { held: 0, available: 1 },
    ]);
    expectIdle(gate);
  });

  describe('the retry budget stops a storm', () => {
    /**
     * `callers` concurrent GETs, the partner answering 503 to everything, one retry each allowed.
     * Every backoff is parked until all first attempts have been judged, so no retry slot frees
     * up early. A retry is admitted while active retries < max(3, ⌊20% × (held + queued)⌋), and
     * held + queued ≤ callers (the parked retries are in neither): at most ⌊0.2 × callers⌋
     * retries, against `callers` without a budget.
     */
    async function storm(callers: number, options: RetrierOptions) {
      const { limiter, gate } = gated(10, callers);
      const parked: (() => void)[] = [];
      let judged = 0;
      let allJudged!: () => void;
      const firstWave = new Promise<void>((resolve) => {
        allJudged = resolve;
      });
      const judge = () => {
        if (++judged === callers) allJudged();
      };
      const { retrier, fetch } = retryingFetch(limiter, {
        retries: 1,
        ...options,
        sleep: () =>
          new Promise<void>((resolve) => {
            parked.push(resolve);
            judge();
          }),
      });
      let released = false;
      const calls = Array.from({ length: callers }, async () => {
        const res = await fetch(`${partner.url}/status?code=503`);
        await res.body?.cancel();
        if (!released) judge(); // answered before any backoff ended: the budget said no
        return res.status;
      });
      await firstWave;
      released = true;
      const retried = parked.length;
      for (const wake of parked) wake();
      expect(await Promise.all(calls)).toEqual(Array.from({ length: callers }, () => 503));
      expectIdle(gate);
      return { retried, stats: retrier.stats().billing!, gate };
    }

    it('admits at most ⌊20% × callers⌋ retries (floor 3): 50 callers → at most 60 attempts, not 100', async () => {
      const callers = 50;
      const { retried, stats } = await storm(callers, {});
      expect(retried).toBeGreaterThanOrEqual(3); // the floor
      expect(retried).toBeLessThanOrEqual(10); // ⌊0.2 × 50⌋
      expect(partner.arrived).toBe(callers + retried);
      expect(partner.arrived).toBeLessThanOrEqual(60);
      expect(stats).toMatchObject({
        attempts: callers + retried,
        retries: retried,
        budgetExhausted: callers - retried,
        activeRetries: 0,
      });
    });

    it('without the budget the same storm doubles the load (the bound above is the budget)', async () => {
      const callers = 50;
      const { retried } = await storm(callers, {
        budgetPercent: 100,
        minRetryConcurrency: callers,
      });
      expect(retried).toBe(callers);
      expect(partner.arrived).toBe(2 * callers);
    });
  });
});

describe('retrier over limitFetch (global fetch)', () => {
  it('keeps the partner within its cap across attempts, holding no permit while backing off', async () => {
    const { limiter, gate } = gated(2);
    const heldWhileSleeping: number[] = [];
    const callers = 12;
    const retrier = new Retrier({
      limiter,
      minRetryConcurrency: callers,
      sleep: async () => {
        heldWhileSleeping.push(gate.held);
      },
    });
    const fetch = retrier.wrap(limitFetch(globalThis.fetch, limiter));

    const results = await Promise.all(
      Array.from({ length: callers }, async (_, i) => {
        const res = await fetch(`${partner.url}/flaky?id=g${i}&fails=1&code=502&delay=2`);
        return [res.status, await res.text()];
      }),
    );

    expect(results).toEqual(Array.from({ length: callers }, () => [200, 'xx']));
    expect(partner.arrived).toBe(callers * 2);
    expect(partner.peak).toBe(2);
    expect(gate.stats().acquired).toBe(callers * 2);
    expect(heldWhileSleeping).toHaveLength(callers);
    expectIdle(gate);
  });
});

describe("undici's interceptors.retry composed outside limitHosts (the documented composition)", () => {
  it('gives each attempt its own permit and keeps the partner within its cap', async () => {
    const { limiter, gate } = gated(2);
    agent = new Agent();
    // compose(a, b): b is outermost. Retry outside, limiter inside: each attempt acquires afresh.
    const dispatcher: Dispatcher = agent.compose(
      limitHosts(limiter),
      interceptors.retry({ maxRetries: 2, minTimeout: 1, timeoutFactor: 1, statusCodes: [503] }),
    );
    const callers = 10;

    const bodies = await Promise.all(
      Array.from({ length: callers }, async (_, i) => {
        const res = await request(`${partner.url}/flaky?id=u${i}&fails=2&delay=2`, { dispatcher });
        return [res.statusCode, await res.body.text()];
      }),
    );

    expect(bodies).toEqual(Array.from({ length: callers }, () => [200, 'xx']));
    expect(partner.arrived).toBe(callers * 3);
    expect(gate.stats().acquired).toBe(callers * 3);
    expect(partner.peak).toBe(2);
    expectIdle(gate);
  });
});
