/**
 * The retrier's cooldowns and `maxRetryTime` on a wall clock that steps (NTP, a resumed VM):
 * without a `now` option they run on the monotonic clock, so a step neither stretches nor cuts
 * them. Judged at a real partner that counts what reaches it.
 */
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  HostLimiter,
  limitHosts,
  PartnerCooldownError,
  Retrier,
  type RetrierOptions,
} from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

const HOUR = 3_600_000;
let billing: Partner;
let agent: Agent;

beforeEach(async () => {
  billing = await startPartner();
  agent = new Agent();
});
afterEach(async () => {
  vi.restoreAllMocks();
  await agent.close();
  await billing.close();
});

/** Steps `Date.now` by `ms` from here on (performance.now runs on). */
function stepWallClock(ms: number): void {
  const real = Date.now.bind(Date);
  vi.spyOn(Date, 'now').mockImplementation(() => real() + ms);
}

function setup(options: RetrierOptions) {
  const limiter = new HostLimiter({
    // The gate's own Retry-After hold is not under test here: only the retrier's cooldown.
    partners: [{ name: 'billing', hosts: [billing.origin], limit: 5, rateLimitHeaders: false }],
    unknownHosts: 'reject',
  });
  const retrier = new Retrier({ limiter, ...options });
  const dispatcher = agent.compose(limitHosts(limiter));
  const fetch = retrier.wrap((input: string) => undiciFetch(input, { dispatcher }));
  const get = async (url: string) => {
    const res = await fetch(url);
    await res.body?.cancel();
    return res.status;
  };
  return { retrier, get };
}

describe('the retrier on a wall clock that steps', () => {
  it('a wall clock stepped back an hour during a cooldown does not stretch it by the hour', async () => {
    const { retrier, get } = setup({ cooldown: true, retries: 0 });
    expect(await get(`${billing.url}/status?code=503&retryAfter=2`)).toBe(503);
    stepWallClock(-HOUR);
    // On the wall clock the cooldown read 3,602 s left, and shed every call for that hour.
    const left = retrier.stats().billing!.cooldownRemainingMs;
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(2000);
  });

  it('a wall clock stepped forward an hour does not end a cooldown early', async () => {
    const { retrier, get } = setup({ cooldown: true, retries: 0 });
    expect(await get(`${billing.url}/status?code=503&retryAfter=30`)).toBe(503);
    stepWallClock(HOUR);
    await expect(get(`${billing.url}/ok`)).rejects.toBeInstanceOf(PartnerCooldownError);
    expect(billing.arrived).toBe(1); // the partner asked for 30 s and heard nothing more
    expect(retrier.stats().billing!.cooldownRemainingMs).toBeGreaterThan(29_000);
  });

  it('a wall clock stepped forward between attempts does not spend maxRetryTime', async () => {
    let stepped = false;
    const { retrier, get } = setup({
      retries: 3,
      maxRetryTime: 60_000,
      sleep: async () => {},
      onRetry: () => {
        if (stepped) return;
        stepped = true;
        stepWallClock(HOUR);
      },
    });
    expect(await get(`${billing.url}/status?code=503`)).toBe(503);
    // Every retry ran: on the wall clock the hour counted against the 60 s and ended them at 2.
    expect(billing.arrived).toBe(4);
    expect(retrier.stats().billing).toMatchObject({ attempts: 4, retries: 3 });
  });
});
