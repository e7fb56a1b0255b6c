import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  findShedError,
  HostLimiter,
  isShedError,
  limitHosts,
  PartnerCooldownError,
  type PartnerRule,
  Retrier,
  type RetrierOptions,
  type RetryEvent,
} from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

// Two real partners behind one limiter; the retrier's clock is manual.
const T0 = Date.UTC(2030, 0, 15, 12, 0, 0);

let billing: Partner;
let ledger: Partner;
let agent: Agent;

beforeEach(async () => {
  [billing, ledger] = await Promise.all([startPartner(), startPartner()]);
  agent = new Agent();
});
afterEach(async () => {
  await agent.close();
  await Promise.all([billing.close(), ledger.close()]);
});

function setup(options: RetrierOptions, billingRule: Partial<PartnerRule> = {}) {
  const limiter = new HostLimiter({
    partners: [
      { name: 'billing', hosts: [billing.origin], limit: 5, ...billingRule },
      { name: 'ledger', hosts: [ledger.origin], limit: 5 },
    ],
    unknownHosts: 'reject',
  });
  const clock = { now: T0 };
  const retrier = new Retrier({ limiter, now: () => clock.now, ...options });
  const dispatcher = agent.compose(limitHosts(limiter));
  const fetch = retrier.wrap((input: string, init?: Parameters<typeof undiciFetch>[1]) =>
    undiciFetch(input, { ...init, dispatcher }),
  );
  const get = async (url: string, init?: Parameters<typeof undiciFetch>[1]) => {
    const res = await fetch(url, init);
    await res.body?.cancel();
    return res.status;
  };
  return { retrier, clock, fetch, get };
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

describe('cooldown after a 429/503 with Retry-After', () => {
  it('sheds new calls to that partner until then, without reaching it', async () => {
    // The gate's own hold (test/partners/contract-headers.test.ts) runs on real time, not this
    // retrier's manual clock: off here, where only the retrier's cooldown is under test.
    const { retrier, clock, get } = setup(
      { cooldown: true, retries: 0 },
      { rateLimitHeaders: false },
    );
    expect(await get(`${billing.url}/status?code=503&retryAfter=2`)).toBe(503);

    clock.now = T0 + 500;
    const error = await rejection(get(`${billing.url}/ok`));

    expect(error).toBeInstanceOf(PartnerCooldownError);
    expect(isShedError(error)).toBe(true); // an HTTP layer answers 503 + Retry-After
    expect(findShedError(error)).toBe(error);
    expect(error).toMatchObject({ partner: 'billing', retryAfterMs: 1500 });
    expect((error as Error).message).toBe(
      'billing asked callers to back off (Retry-After); retry after 1.5 s',
    );
    expect(billing.arrived).toBe(1);
    expect(retrier.stats().billing).toMatchObject({
      cooldowns: 1,
      shedCooldown: 1,
      cooldownRemainingMs: 1500,
    });

    clock.now = T0 + 2000;
    expect(await get(`${billing.url}/ok`)).toBe(200);
    expect(billing.arrived).toBe(2);
    expect(retrier.stats().billing!.cooldownRemainingMs).toBe(0);
  });

  it('sheds every method, a POST too: the partner asked everyone to wait', async () => {
    const { get } = setup({ cooldown: true, retries: 0 });
    await get(`${billing.url}/status?code=429&retryAfter=5`);
    const error = await rejection(get(`${billing.url}/ok`, { method: 'POST', body: 'x' }));
    expect(error).toBeInstanceOf(PartnerCooldownError);
    expect(billing.arrived).toBe(1);
  });

  it('pauses only the partner that asked', async () => {
    const { retrier, get } = setup({ cooldown: true, retries: 0 });
    await get(`${billing.url}/status?code=503&retryAfter=5`);
    expect(await get(`${ledger.url}/ok`)).toBe(200);
    expect(retrier.stats().ledger).toMatchObject({ cooldowns: 0, shedCooldown: 0 });
  });

  it('is off unless asked for, retrier-wide or per partner', async () => {
    const { get } = setup({ retries: 0, partners: { ledger: { cooldown: true } } });
    await get(`${billing.url}/status?code=503&retryAfter=5`);
    expect(await get(`${billing.url}/ok`)).toBe(200); // billing: no cooldown
    await get(`${ledger.url}/status?code=503&retryAfter=5`);
    expect(await rejection(get(`${ledger.url}/ok`))).toBeInstanceOf(PartnerCooldownError);
  });

  it('needs a Retry-After, and only a 429 or 503 starts one', async () => {
    const { retrier, get } = setup({ cooldown: true, retries: 0 });
    await get(`${billing.url}/status?code=503`);
    await get(`${billing.url}/status?code=502&retryAfter=5`);
    await get(`${billing.url}/status?code=500&retryAfter=5`);
    expect(await get(`${billing.url}/ok`)).toBe(200);
    expect(retrier.stats().billing!.cooldowns).toBe(0);
  });

  it('lasts at most maxCooldown, whatever the partner asked', async () => {
    const { get } = setup({ cooldown: { maxCooldown: 30_000 }, retries: 0 });
    await get(`${billing.url}/status?code=503&retryAfter=600`);
    expect(await rejection(get(`${billing.url}/ok`))).toMatchObject({ retryAfterMs: 30_000 });
  });

  it('makes a retry already in flight wait until the cooldown ends, not hit the partner early', async () => {
    const events: RetryEvent[] = [];
    const sleepers: (() => void)[] = [];
    let onSleep = () => {};
    const retrier = new Retrier({
      cooldown: true,
      now: () => T0,
      random: () => 0, // a bare backoff would be 0 ms
      sleep: () =>
        new Promise<void>((resolve) => {
          sleepers.push(resolve);
          onSleep();
        }),
      onRetry: (event) => events.push(event),
    });
    const url = 'https://api.billing.example/invoices';
    let answerB!: (res: Response) => void;
    const b = retrier.run({ url }, async (n) =>
      n === 1 ? new Promise<Response>((resolve) => (answerB = resolve)) : new Response('ok'),
    );
    // A, started after B, is told to come back in 3 s: the cooldown starts, A backs off.
    const aSleeps = new Promise<void>((resolve) => (onSleep = resolve));
    const a = retrier.run({ url }, async (n) =>
      n === 1
        ? new Response(null, { status: 429, headers: { 'retry-after': '3' } })
        : new Response('ok'),
    );
    await aSleeps;
    // Now B's first attempt fails without a Retry-After of its own.
    const bSleeps = new Promise<void>((resolve) => (onSleep = resolve));
    answerB(new Response('bad gateway', { status: 502 }));
    await bSleeps;

    expect(events.map((e) => [e.status, e.delayMs])).toEqual([
      [429, 3000],
      [502, 3000], // not 0: the partner asked everyone for 3 s
    ]);
    for (const wake of sleepers) wake();
    expect([(await a).status, (await b).status]).toEqual([200, 200]);
  });
});
