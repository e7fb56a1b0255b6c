/**
 * Issue 33 item 4: a rate is promised at the partner, so the partner's own log of arrival times
 * is the oracle, over windows of exactly `per` (no slack taken off for latency), with every
 * connection cold at the start: the calls of the first burst wait for a connection while later
 * ones go on warm ones, so grants bunched by the burst arrive bunched tighter.
 */
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch } from '../../src/index.js';
import { startArrivalPartner } from '../helpers/arrival-partner.js';
import { maxInWindow } from '../helpers/windows.js';

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("a rate held at the partner's arrivals, cold connections included", () => {
  it('1,000 calls over 50 cold connections at 200/s, burst 20: at most 220 arrive in any second', async () => {
    const partner = await startArrivalPartner();
    cleanups.push(() => partner.close());
    const rate = { limit: 200, per: 1000, burst: 20 };
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'p',
          hosts: [partner.origin],
          limit: 50,
          maxQueue: 2000,
          queueTimeout: 60_000,
          rate,
        },
      ],
    });
    const agent = new Agent({ connections: 50, keepAliveTimeout: 10_000 });
    cleanups.push(() => agent.close());
    const fetch = limitFetch(undiciFetch, limiter);
    const calls = 1000;
    const statuses = await Promise.all(
      Array.from({ length: calls }, (_, i) =>
        fetch(`${partner.origin}/?id=${i}`, { dispatcher: agent }).then(async (r) => {
          await r.text();
          return r.status;
        }),
      ),
    );
    expect(statuses.every((s) => s === 200)).toBe(true);
    const times = (await partner.log()).arrivals;
    expect(times).toHaveLength(calls);
    const most = maxInWindow(times, rate.per);
    expect(most, `most arrivals in one ${rate.per} ms window`).toBeLessThanOrEqual(
      rate.limit + rate.burst,
    );
    const span = times[calls - 1]! - times[0]!;
    expect(((calls - rate.limit - rate.burst) / span) * 1000).toBeGreaterThan(200 * 0.5);
  }, 30_000);
});
