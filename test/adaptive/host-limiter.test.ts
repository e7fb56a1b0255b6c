import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type Dispatcher, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import type { ResponseMessage } from '../../src/gate/diagnostics.js';
import {
  HostLimiter,
  type HostLimiterOptions,
  limitFetch,
  limitHosts,
  type PartnerRule,
} from '../../src/index.js';
import { useLoopback } from '../helpers/loopback.js';

function construct(options: unknown): HostLimiter {
  return new HostLimiter(options as HostLimiterOptions);
}

function adaptiveRule(adaptive: unknown, limit = 50): PartnerRule {
  return { name: 'billing', hosts: ['api.billing.example'], limit, adaptive } as PartnerRule;
}

describe('adaptive option', () => {
  it.each([
    [{ min: 0 }, 'partner "billing": adaptive.min must be a positive integer, got 0'],
    [{ min: 51 }, 'partner "billing": adaptive.min must be at most limit (50), got 51'],
    [{ min: 5, initial: 4 }, 'adaptive.initial must be in [min, limit] = [5, 50], got 4'],
    [{ initial: 60 }, 'adaptive.initial must be in [min, limit] = [1, 50], got 60'],
    [{ algorithm: 'vegas' }, `adaptive.algorithm must be 'aimd' or 'gradient', got "vegas"`],
    [{ backoff: 1 }, 'adaptive.backoff must be a number in (0, 1), got 1'],
    [{ tolerance: 0.5 }, 'adaptive.tolerance must be a finite number >= 1, got 0.5'],
    [{ minRtt: -1 }, 'adaptive.minRtt must be a duration in ms'],
    [{ mn: 1 }, 'adaptive: unknown option "mn"'],
    ['yes', 'adaptive must be an options object, got "yes"'],
  ])('rejects %j with a TypeError naming the option', (adaptive, message) => {
    expect(() => construct({ partners: [adaptiveRule(adaptive)] })).toThrow(TypeError);
    expect(() => construct({ partners: [adaptiveRule(adaptive)] })).toThrow(message);
  });

  it('adaptive on a shared gate needs a store like any shared gate (test/redis/shared-adaptive)', () => {
    expect(() => construct({ partners: [{ ...adaptiveRule(true), shared: true }] })).toThrow(
      `partner "billing": shared: true needs the limiter's store option`,
    );
  });

  it('starts at `initial` and reports contract and effective limit in stats()', () => {
    const limiter = new HostLimiter({ partners: [adaptiveRule({ min: 2, initial: 7 })] });
    expect(limiter.gate('billing')!.limit).toBe(7);
    const stats = limiter.stats().billing!;
    expect(stats.limit).toBe(7);
    expect(stats.adaptive).toMatchObject({
      algorithm: 'aimd',
      contractLimit: 50,
      effectiveLimit: 7,
      min: 2,
      limitChanges: 0,
    });
  });

  it('`true` takes the defaults: AIMD from min(limit, 20); fixed partners carry no adaptive stats', () => {
    const limiter = new HostLimiter({
      partners: [
        adaptiveRule(true, 500),
        { name: 'small', hosts: ['small.example'], limit: 8, adaptive: { algorithm: 'gradient' } },
        { name: 'fixed', hosts: ['fixed.example'], limit: 8 },
      ],
    });
    const stats = limiter.stats();
    expect(stats.billing!.limit).toBe(20);
    expect(stats.small!.adaptive).toMatchObject({ algorithm: 'gradient', effectiveLimit: 8 });
    expect(stats.fixed!.adaptive).toBeUndefined();
  });
});

describe('adaptive signals from the HTTP layers', () => {
  const loop = useLoopback({ keepAliveTimeout: 10_000 });

  function setup(adaptive: PartnerRule['adaptive'] = { min: 2, initial: 10 }) {
    const limiter = new HostLimiter({
      partners: [{ name: 'partner', hosts: [loop.partner.origin], limit: 40, adaptive }],
      unknownHosts: 'reject',
    });
    return { limiter, gate: limiter.gate('partner')! };
  }

  const controllerApiOnly: Dispatcher.DispatcherComposeInterceptor =
    (dispatch) => (opts, handler) =>
      dispatch(opts, {
        onRequestStart: (c, context) => handler.onRequestStart?.(c, context),
        onResponseStart: (c, status, headers, message) =>
          handler.onResponseStart?.(c, status, headers, message),
        onResponseData: (c, chunk) => handler.onResponseData?.(c, chunk),
        onResponseEnd: (c, trailers) => handler.onResponseEnd?.(c, trailers),
        onResponseError: (c, error) => handler.onResponseError?.(c, error),
      });

  it.each(['callback', 'controller'] as const)(
    'a 503 with Retry-After cuts the limit and holds it down (%s handler API)',
    async (api) => {
      const { limiter } = setup();
      const dispatcher =
        api === 'callback'
          ? loop.agent.compose(limitHosts(limiter))
          : loop.agent.compose(limitHosts(limiter), controllerApiOnly);
      const res = await request(`${loop.partner.origin}/status?code=503&retryAfter=5`, {
        dispatcher,
      });
      await res.body.text();
      const { adaptive } = limiter.stats().partner!;
      expect(adaptive).toMatchObject({ effectiveLimit: 9, drops: 1, limitChanges: 1 });
      expect(adaptive!.holdDownMs).toBeGreaterThan(4000);
      expect(limiter.gate('partner')!.limit).toBe(9);
    },
  );

  it('a 200 is an RTT sample, not a drop', async () => {
    const { limiter } = setup();
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const res = await request(`${loop.partner.origin}/ok?delay=5`, { dispatcher });
    await res.body.text();
    const { adaptive } = limiter.stats().partner!;
    expect(adaptive).toMatchObject({ samples: 1, drops: 0, effectiveLimit: 10 });
    expect(adaptive!.minRttMs).toBeGreaterThan(0);
  });

  it('a response timeout is a drop; the caller aborting is not', async () => {
    const { limiter } = setup();
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    await expect(
      request(`${loop.partner.origin}/held`, { dispatcher, headersTimeout: 50 }),
    ).rejects.toMatchObject({ code: 'UND_ERR_HEADERS_TIMEOUT' });
    expect(limiter.stats().partner!.adaptive).toMatchObject({ drops: 1, effectiveLimit: 9 });

    const controller = new AbortController();
    const pending = request(`${loop.partner.origin}/held`, {
      dispatcher,
      signal: controller.signal,
    });
    await loop.partner.waitForArrived(2);
    controller.abort();
    await expect(pending).rejects.toThrow();
    expect(limiter.stats().partner!.adaptive).toMatchObject({ drops: 1, samples: 1 });
    loop.partner.openHeld();
  });

  it("the caller's own deadline (AbortSignal.timeout) is a drop", async () => {
    const { limiter } = setup();
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    await expect(
      request(`${loop.partner.origin}/held`, { dispatcher, signal: AbortSignal.timeout(30) }),
    ).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(limiter.stats().partner!.adaptive).toMatchObject({ drops: 1, effectiveLimit: 9 });
    loop.partner.openHeld();
  });

  // Regression: the sample read `gate.held` at the response only. Through a burst of responses
  // that count falls as each permit goes back (4, 3, 2, 1 here), so half of a full gate's
  // samples looked app-limited and AIMD grew at half its rate (seen on shared gates, where a
  // freed permit waits a Redis round trip before it is granted again).
  it.each(['limitHosts', 'limitFetch'] as const)(
    'a response reports what the gate held at its grant beside what it holds at the response (%s)',
    async (layer) => {
      const { limiter, gate } = setup();
      const seen: { heldAtGrant: number; heldThen: number }[] = [];
      const onResponse = (message: unknown) => {
        const m = message as ResponseMessage;
        if (m.gate === gate) seen.push({ heldAtGrant: m.heldAtGrant, heldThen: gate.held });
      };
      subscribe('hostgate:response', onResponse);
      try {
        const dispatcher = loop.agent.compose(limitHosts(limiter));
        const limited = limitFetch(undiciFetch, limiter);
        const call = (): Promise<string> =>
          layer === 'limitHosts'
            ? request(`${loop.partner.origin}/held`, { dispatcher }).then((r) => r.body.text())
            : limited(`${loop.partner.origin}/held`, { dispatcher: loop.agent }).then((r) =>
                r.text(),
              );
        const pending = new Set<Promise<string>>();
        for (let i = 0; i < 4; i++) {
          const p: Promise<string> = call().finally(() => pending.delete(p));
          pending.add(p);
        }
        await loop.partner.waitForActive(4);
        // Answered one at a time, each read to its end (its permit back) before the next.
        for (let i = 0; i < 4; i++) {
          loop.partner.release(1);
          await Promise.race(pending);
        }
        expect(seen.map((s) => s.heldThen)).toEqual([4, 3, 2, 1]);
        // Granted 1st to 4th; they reach the partner (and are answered) in the order their
        // connections open, which need not be that one.
        expect(seen.map((s) => s.heldAtGrant).sort()).toEqual([1, 2, 3, 4]);
        expect(limiter.stats().partner!.adaptive).toMatchObject({ samples: 4 });
      } finally {
        unsubscribe('hostgate:response', onResponse);
      }
    },
  );

  it('limitFetch reports the same signals', async () => {
    const { limiter } = setup({ min: 2, initial: 10, algorithm: 'gradient' });
    const limited = limitFetch(undiciFetch, limiter);
    const res = await limited(`${loop.partner.origin}/status?code=429`, { dispatcher: loop.agent });
    await res.text();
    expect(limiter.stats().partner!.adaptive).toMatchObject({ drops: 1, effectiveLimit: 9 });
  });
});
