import http from 'node:http';
import { createClient } from 'redis';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_PARTNER_RATE_SLACK_MS } from '../../src/gate/rate.js';
import { HostLimiter, LimitedHttpAgent, limitFetch, limitHosts } from '../../src/index.js';
import { redisStore } from '../../src/redis/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { expectPromiseKept, oracle as makeOracle } from '../helpers/rate-oracle.js';
import { maxInWindow } from '../helpers/windows.js';

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const oracle = () => makeOracle(cleanups);

describe('a partner rule with a rate, seen from the partner', () => {
  it('never lets more than limit + burst arrive in any window of per ms, and keeps the pace while callers have work', async () => {
    const o = await oracle();
    const rate = { limit: 40, per: 200, burst: 5 }; // 200 a second
    const limiter = new HostLimiter({
      partners: [
        { name: 'p', hosts: [o.origin], limit: 50, maxQueue: 400, queueTimeout: 10_000, rate },
      ],
    });
    const fetch = limitFetch(o.fetch, limiter);
    const gate = limiter.gate('p')!;
    const calls = 240;
    const statuses = await Promise.all(
      Array.from({ length: calls }, (_, i) =>
        fetch(`${o.origin}/?id=${i}`).then(async (r) => {
          await r.text();
          return r.status;
        }),
      ),
    );
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(o.arrivals.size).toBe(calls);
    const { times, spreadMs } = expectPromiseKept(o, rate);
    // Goodput after the burst: never above the rate (give or take the latency spread), and
    // loosely near it: a busy machine only slows us down.
    const paced = calls - rate.limit - rate.burst;
    const span = times[calls - 1]! - times[0]!;
    expect((paced / (span + spreadMs)) * 1000).toBeLessThanOrEqual(200);
    expect((paced / span) * 1000).toBeGreaterThan(200 * 0.15);
    expect(gate.held).toBe(0);
    expect(gate.stats().rate).toMatchObject({ backlog: 0, shedRateLimited: 0 });
    expectInvariant(gate);
  });

  it('sheds at once with the exact retryAfterMs when a request could not get a slot within its deadline', async () => {
    const o = await oracle();
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'p',
          hosts: [o.origin],
          limit: 4,
          queueTimeout: 20,
          rate: { limit: 1, per: 1000 },
        },
      ],
    });
    const fetch = limitFetch(o.fetch, limiter);
    expect((await fetch(`${o.origin}/?id=first`)).status).toBe(200); // the one slot of this second
    const before = performance.now();
    const error = await fetch(`${o.origin}/?id=second`).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: 'HOSTGATE_RATE_LIMITED', partner: 'p' });
    // When the next slot opens: a second and the rule's slack after the first grant, as GCRA
    // knows (one call per `per + slack` holds one per `per` where calls arrive).
    const retryAfterMs = (error as { retryAfterMs: number }).retryAfterMs;
    const sinceFirst = before - o.sends.get('first')!;
    const pace = 1000 + DEFAULT_PARTNER_RATE_SLACK_MS;
    expect(retryAfterMs).toBeLessThanOrEqual(pace - Math.floor(sinceFirst) + 1);
    expect(retryAfterMs).toBeGreaterThan(20);
    expect(o.arrivals.size).toBe(1);
    expectInvariant(limiter.gate('p')!);
  });
});

describe('costs on a partner rule', () => {
  it('charges a cost function of the request against the rate', async () => {
    const o = await oracle();
    const rate = { limit: 20, per: 100, burst: 3 };
    const big = (id: string) => Number(id) % 3 === 0;
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'llm',
          hosts: [o.origin],
          limit: 10,
          maxQueue: 100,
          queueTimeout: 10_000,
          rate,
          cost: (req) => (req.url.pathname === '/big' ? 4 : 1),
        },
      ],
    });
    const fetch = limitFetch(o.fetch, limiter);
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        fetch(`${o.origin}/${big(String(i)) ? 'big' : 'small'}?id=${i}`).then((r) => r.text()),
      ),
    );
    expectPromiseKept(o, rate, (id) => (big(id) ? 4 : 1));
    expectInvariant(limiter.gate('llm')!);
  });

  it('settles the real cost from the response: refunds let more calls through than the charge would', async () => {
    const o = await oracle();
    const rate = { limit: 20, per: 100, burst: 3 };
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'llm',
          hosts: [o.origin],
          limit: 10,
          maxQueue: 100,
          queueTimeout: 10_000,
          rate,
          cost: 4,
          settleCost: (res) => Number(res.header('X-Usage')),
        },
      ],
    });
    const agent = new Agent().compose(limitHosts(limiter));
    cleanups.push(() => agent.close());
    const gate = limiter.gate('llm')!;
    const one = await request(`${o.origin}/?used=1&id=first`, { dispatcher: agent });
    await one.body.dump();
    expect(gate.stats().rate!.nextSlotMs).toBe(0); // charged 4, settled 1: room for more now
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        request(`${o.origin}/?used=1&id=${i}`, { dispatcher: agent }).then((r) => r.body.dump()),
      ),
    );
    // Charged 4 each, no window could hold more than (20 + 3) / 4 = 5 calls; settled at 1, it does.
    const times = [...o.arrivals.values()].sort((a, b) => a - b);
    expect(maxInWindow(times, rate.per)).toBeGreaterThan(5);
    expectInvariant(gate);
  });

  it('charges the cost function through node:http (LimitedHttpAgent) too, and settles from its headers', async () => {
    const o = await oracle();
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'llm',
          hosts: [o.origin],
          limit: 4,
          // A slot every 500 ms: the big call's answer must come within it for the next slot to
          // be still ahead (at 10/s, a loaded machine's 100 ms answer found it free already).
          rate: { limit: 2, per: 1000, burst: 3 },
          cost: (req) => (req.url.pathname === '/big' ? 4 : 1),
          settleCost: (res) =>
            res.header('x-usage') === undefined ? undefined : Number(res.header('x-usage')),
        },
      ],
    });
    const agent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
    cleanups.push(() => agent.destroy());
    const get = (path: string) =>
      new Promise<void>((resolve, reject) => {
        http
          .get(`${o.origin}${path}`, { agent }, (res) => res.resume().on('end', resolve))
          .on('error', reject);
      });
    const gate = limiter.gate('llm')!;
    await get('/big?id=1'); // 4 units: the whole bucket (burst 3 + 1)
    expect(gate.stats().rate!.nextSlotMs).toBeGreaterThan(0);
    await get('/small?id=2&used=0'); // waits for its slot, then refunds itself
    expect(o.arrivals.size).toBe(2);
    expect(gate.stats().rate!.backlog).toBe(0);
    expectInvariant(gate);
  });

  it('refuses bad rules: a cost without a rate, a cost above burst + 1, a bad rate', () => {
    const hosts = ['a.example'];
    expect(() => new HostLimiter({ partners: [{ name: 'a', hosts, limit: 1, cost: 2 }] })).toThrow(
      /partner "a": cost and settleCost count against a rate; set rate too/,
    );
    expect(
      () =>
        new HostLimiter({
          partners: [{ name: 'a', hosts, limit: 1, rate: { limit: 5 }, cost: 3 }],
        }),
    ).toThrow(/cost must be a function or a number in \[0, rate.burst \+ 1 = 1\], got 3/);
    expect(
      () => new HostLimiter({ partners: [{ name: 'a', hosts, limit: 1, rate: { limit: 0 } }] }),
    ).toThrow(/partner "a": rate\.limit must be a positive finite number, got 0/);
    expect(
      () =>
        new HostLimiter({
          partners: [
            { name: 'a', hosts, limit: 1, rate: { limit: 5 }, settleCost: 'x-usage' as never },
          ],
        }),
    ).toThrow(/settleCost must be a function/);
  });

  it('refuses a bad rate on a store gate', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:6379' });
    await client.connect();
    cleanups.push(() => client.close());
    const store = redisStore({ client, prefix: 'hostgate-rate-test' });
    cleanups.push(() => store.close());
    expect(() => store.semaphore({ name: 'b', limit: 1, rate: { limit: 0 } })).toThrow(
      /rate\.limit must be a positive finite number, got 0/,
    );
  });
});
