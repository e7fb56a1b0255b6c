import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { readRateLimit, resetDelayMs } from '../../src/common/rate-limit-headers.js';
import {
  HostLimiter,
  LimitedHttpAgent,
  limitFetch,
  limitHosts,
  PartnerCooldownError,
  type PartnerRule,
} from '../../src/index.js';
import {
  type BudgetPartner,
  type HeaderStyle,
  ietf,
  startBudgetPartner,
} from '../helpers/budget-partner.js';
import { expectInvariant } from '../helpers/invariant.js';
import { get as nodeGet } from '../helpers/node-http.js';

const NOW = Date.UTC(2030, 0, 15, 12, 0, 0);
const read = (headers: Record<string, string>, status = 200, retryAfter = false) =>
  readRateLimit((name) => headers[name], status, NOW, retryAfter);

describe('reading the partner’s rate-limit headers', () => {
  it('reads the current draft’s structured RateLimit: the longest reset of every spent policy', () => {
    expect(read({ ratelimit: '"default";r=0;t=2' })).toEqual({
      kind: 'hold',
      holdMs: 2000,
      source: 'RateLimit',
    });
    expect(read({ ratelimit: '"burst";r=0;t=1, "day";r=0;t=30, "hour";r=5;t=600' })).toMatchObject({
      holdMs: 30_000,
    });
    expect(
      read({ ratelimit: '"default";r=7;t=2', 'ratelimit-policy': '"default";q=100;w=60' }),
    ).toEqual({ kind: 'none' });
    expect(read({ ratelimit: 'default;r=0' })).toEqual({ kind: 'none' }); // spent, no word on when
  });

  it('reads the older drafts: the RateLimit dictionary and RateLimit-Remaining/-Reset', () => {
    expect(read({ ratelimit: 'limit=100, remaining=0, reset=5' })).toMatchObject({ holdMs: 5000 });
    expect(read({ 'ratelimit-remaining': '0', 'ratelimit-reset': '3' })).toMatchObject({
      holdMs: 3000,
      source: 'RateLimit',
    });
  });

  it('tells a delta from an epoch in X-RateLimit-Reset: epoch seconds from 1e9, epoch ms from 1e12', () => {
    expect(read({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '4' })).toMatchObject({
      holdMs: 4000,
    });
    const github = String(NOW / 1000 + 42); // GitHub: UTC epoch seconds
    expect(read({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': github })).toMatchObject({
      holdMs: 42_000,
      source: 'X-RateLimit',
    });
    expect(resetDelayMs(String(NOW + 1500), NOW)).toBe(1500); // epoch ms
    expect(resetDelayMs(String(NOW / 1000 - 10), NOW)).toBe(0); // a reset already past
    // Discord: X-RateLimit-Reset-After (delta seconds) is preferred to the epoch beside it.
    expect(
      read({
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(NOW / 1000 + 9),
        'x-ratelimit-reset-after': '1.25',
      }),
    ).toMatchObject({ holdMs: 1250 });
  });

  it('reads OpenAI’s per-budget headers with Go durations (1s, 6m0s, 20ms)', () => {
    expect(
      read({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1s' }),
    ).toMatchObject({ holdMs: 1000, source: 'x-ratelimit-remaining-requests' });
    expect(
      read({
        'x-ratelimit-remaining-requests': '12',
        'x-ratelimit-reset-requests': '20ms',
        'x-ratelimit-remaining-tokens': '0',
        'x-ratelimit-reset-tokens': '6m0s',
      }),
    ).toMatchObject({ holdMs: 360_000 });
    expect(resetDelayMs('1h2m3.5s', NOW)).toBe(3_723_500);
  });

  it('holds on Retry-After only when asked, and only for a 429 or 503', () => {
    expect(read({ 'retry-after': '3' }, 429)).toEqual({ kind: 'none' });
    expect(read({ 'retry-after': '3' }, 429, true)).toMatchObject({ holdMs: 3000 });
    expect(read({ 'retry-after': '3' }, 500, true)).toEqual({ kind: 'none' });
  });

  it('reports what it cannot read instead of guessing', () => {
    expect(read({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': 'soon' })).toEqual({
      kind: 'malformed',
      header: 'x-ratelimit-reset',
      value: 'soon',
    });
    expect(read({ 'x-ratelimit-remaining': 'none', 'x-ratelimit-reset': '1' })).toMatchObject({
      kind: 'malformed',
    });
  });
});

const github: HeaderStyle = (r, _ms, resetAt) => ({
  'x-ratelimit-limit': '3',
  'x-ratelimit-remaining': String(r),
  // Epoch seconds, as GitHub sends it: the partner's own reset rounded up to a whole second.
  'x-ratelimit-reset': String(
    r === 0 ? Math.ceil(resetAt / 1000) : Math.ceil(Date.now() / 1000) + 60,
  ),
});
const openai: HeaderStyle = (r, ms) => ({
  'x-ratelimit-limit-requests': '3',
  'x-ratelimit-remaining-requests': String(r),
  'x-ratelimit-reset-requests': `${ms}ms`,
});

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** A partner rule for `origin` that serves one call at a time and waits long enough for a reset. */
function rule(name: string, origin: string, extra: Partial<PartnerRule> = {}): PartnerRule {
  return { name, hosts: [origin], limit: 1, maxQueue: 50, queueTimeout: 5000, ...extra };
}

/** No 429 after the partner's first "remaining 0", by its own log; the hold ended at its reset. */
function expectNo429AfterTheSignal(partner: BudgetPartner, calls: number, resetMs: number): void {
  expect(partner.log).toHaveLength(calls);
  expect(partner.log.filter((entry) => entry.status === 429)).toEqual([]);
  const spentAt = partner.firstSpentAt!;
  const next = partner.log.find((entry) => entry.at > spentAt)!;
  expect(next.at).toBeGreaterThanOrEqual(spentAt + resetMs);
  // How soon after the reset the held calls went (logged, not asserted: a busy machine is late).
  console.log(`first call after the reset: ${next.at - spentAt - resetMs} ms after it`);
}

describe('holding calls until the partner’s reset', () => {
  it('causes no 429 after the first signal: RateLimit (limitHosts), X-RateLimit epoch (limitFetch), OpenAI durations (node:http)', async () => {
    const [a, b, c] = await Promise.all([
      startBudgetPartner(3, 1000, ietf),
      startBudgetPartner(3, 1500, github),
      startBudgetPartner(3, 500, openai),
    ]);
    closers.push(a.close, b.close, c.close);
    const limiter = new HostLimiter({
      partners: [rule('ietf', a.origin), rule('github', b.origin), rule('openai', c.origin)],
      unknownHosts: 'reject',
    });
    const agent = new Agent({ keepAliveTimeout: 10_000 });
    closers.push(() => agent.close());
    const dispatcher = agent.compose(limitHosts(limiter));
    const fetchLimited = limitFetch(fetch, limiter);
    const nodeAgent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
    closers.push(async () => nodeAgent.destroy());

    const calls = 6; // two budgets of 3: one hold each
    const viaUndici = Array.from({ length: calls }, async () => {
      const res = await request(`${a.origin}/x`, { dispatcher });
      await res.body.text();
      return res.statusCode;
    });
    const viaFetch = Array.from({ length: calls }, async () => {
      const res = await fetchLimited(`${b.origin}/x`);
      await res.text();
      return res.status;
    });
    const viaNode = Array.from({ length: calls }, async () => {
      const outcome = await nodeGet(`${c.origin}/x`, nodeAgent).outcome;
      return outcome.ok ? outcome.status : 0;
    });
    const statuses = await Promise.all([...viaUndici, ...viaFetch, ...viaNode]);

    expect(statuses).toEqual(Array(calls * 3).fill(200));
    // GitHub's epoch seconds round the reset up to a whole second: the hold may end later, never earlier.
    expectNo429AfterTheSignal(a, calls, 1000);
    expectNo429AfterTheSignal(b, calls, 1500);
    expectNo429AfterTheSignal(c, calls, 500);
    for (const name of ['ietf', 'github', 'openai']) {
      expectInvariant(limiter.gate(name)!);
      expect(limiter.stats()[name]!.partnerHold).toMatchObject({ holds: 2, shed: 0 });
    }
    expect(limiter.stats().ietf!.partnerHold!.source).toBe('RateLimit');
  });

  it('sheds a call whose wait deadline ends before the reset at once, with the time left as retryAfterMs', async () => {
    const partner = await startBudgetPartner(1, 1000, ietf);
    closers.push(partner.close);
    const limiter = new HostLimiter({ partners: [rule('p', partner.origin)] });
    const gate = limiter.gate('p')!;
    const fetchLimited = limitFetch(fetch, limiter);
    await (await fetchLimited(`${partner.origin}/x`)).text(); // spends the budget: hold 1 s
    expectInvariant(gate);

    const left = limiter.stats().p!.partnerHold!.remainingMs;
    expect(left).toBeGreaterThan(0);
    const error = await gate.acquire({ timeout: 100 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PartnerCooldownError);
    const { retryAfterMs } = error as PartnerCooldownError;
    expect(retryAfterMs).toBeLessThanOrEqual(left);
    expect(retryAfterMs).toBeGreaterThan(left - 100);
    expect((error as Error).message).toContain('(RateLimit)');
    expect(gate.queued).toBe(0); // refused before taking a queue slot
    expectInvariant(gate);
    // A caller with time to wait is held, then served, and the partner never answered 429.
    const res = await fetchLimited(`${partner.origin}/x`);
    await res.text();
    expect(res.status).toBe(200);
    expect(partner.log.map((entry) => entry.status)).toEqual([200, 200]);
    expect(limiter.stats().p!.partnerHold).toMatchObject({ shed: 1 });
    expectInvariant(gate);
  });

  it('ignores a reset past maxResetMs (a year) with a process warning, and holds nothing', async () => {
    const year = 365 * 24 * 3600;
    const partner = await startBudgetPartner(1, 1000, () => ({
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': String(year),
    }));
    closers.push(partner.close);
    const limiter = new HostLimiter({ partners: [rule('absurd', partner.origin)] });
    const warned = once(process, 'warning');
    const fetchLimited = limitFetch(fetch, limiter);
    await (await fetchLimited(`${partner.origin}/x`)).text();
    const [warning] = (await warned) as [Error & { code?: string }];
    expect(warning.code).toBe('HOSTGATE_RATELIMIT_HEADER');
    expect(warning.message).toContain('past rateLimitHeaders.maxResetMs');
    expect(limiter.stats().absurd!.partnerHold).toMatchObject({ holds: 0, remainingMs: 0 });
  });

  it('is off with rateLimitHeaders: false, and refuses a bad option by name, on shared rules too', () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: ['p.example'], limit: 1, rateLimitHeaders: false }],
    });
    expect(limiter.stats().p!.partnerHold).toBeUndefined();
    expect(
      () =>
        new HostLimiter({
          partners: [
            { name: 'p', hosts: ['p.example'], limit: 1, rateLimitHeaders: { maxResetMs: -1 } },
          ],
        }),
    ).toThrow(/rateLimitHeaders\.maxResetMs must be a duration in ms .* got -1/);
    const store = { semaphore: () => ({}) as never, close: async () => {} };
    const shared = (extra: Partial<PartnerRule>) => () =>
      new HostLimiter({
        partners: [{ name: 'p', hosts: ['p.example'], limit: 1, shared: true, ...extra }],
        store,
      });
    expect(shared({ rateLimitHeaders: { maxResetMs: 0 } })).toThrow(
      /partner "p": rateLimitHeaders\.maxResetMs must be a duration in ms .* got 0/,
    );
    expect(shared({ rateLimitHeaders: { retryAfter: 'yes' as never } })).toThrow(
      'partner "p": rateLimitHeaders.retryAfter must be a boolean, got "yes"',
    );
    expect(shared({ breaker: { failures: 0 } })).toThrow(
      'partner "p": breaker.failures must be a positive integer, got 0',
    );
    expect(shared({ breaker: { statuses: [429] } })).toThrow(/must not hold 429/);
  });
});

describe('with adaptive limits', () => {
  it('a 429 that says the budget is spent is no drop (the gate holds instead); a bare 429 still is', async () => {
    const server = http.createServer((req, res) => {
      const headers: Record<string, string> =
        req.url === '/spent' ? { ratelimit: '"default";r=0;t=1' } : {};
      res.writeHead(429, headers).end();
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    closers.push(
      () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    );
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const limiter = new HostLimiter({
      partners: [
        { name: 'p', hosts: [origin], limit: 16, adaptive: { initial: 8 }, queueTimeout: 3000 },
      ],
    });
    const fetchLimited = limitFetch(fetch, limiter);
    await (await fetchLimited(`${origin}/spent`)).text();
    expect(limiter.stats().p!.adaptive).toMatchObject({ drops: 0, effectiveLimit: 8 });
    expect(limiter.stats().p!.partnerHold!.remainingMs).toBeGreaterThan(0);
    await (await fetchLimited(`${origin}/bare`)).text(); // waits out the hold, then a plain 429
    expect(limiter.stats().p!.adaptive!.drops).toBe(1);
    expect(limiter.stats().p!.adaptive!.effectiveLimit).toBeLessThan(8);
    expectInvariant(limiter.gate('p')!);
  });
});
