import { AsyncLocalStorage } from 'node:async_hooks';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { Socket } from 'node:net';
import { interceptors, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import type { ReleaseMessage } from '../../src/gate/diagnostics.js';
import { HostLimiter, LimitedAgent, limitFetch, limitHosts } from '../../src/index.js';
import { settle, whenIdle } from '../helpers/gate-events.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';

/**
 * Regression tests of issue 10 items 9 and 12 and the README's retry claim: when a cancelled
 * request's permit comes back, and in whose async context a queued request runs.
 */

const loop = useLoopback({ keepAliveTimeout: 5000 });

function limiterFor(limit: number, holdAfterAbort?: number) {
  const limiter = new HostLimiter({
    partners: [
      {
        name: 'p',
        hosts: [loop.partner.origin],
        limit,
        maxQueue: 100,
        queueTimeout: 10_000,
        holdAfterAbort,
      },
    ],
    unknownHosts: 'reject',
  });
  return { limiter, gate: limiter.gate('p')! };
}

/** Calls `fn` with each release message (of any gate) until the returned stop() is called. */
function onRelease(fn: (message: ReleaseMessage) => void): () => void {
  const listener = (message: unknown) => fn(message as ReleaseMessage);
  subscribe('hostgate:release', listener);
  return () => unsubscribe('hostgate:release', listener);
}

describe("issue 10 item 9: an aborted request's permit returns when its connection is closed here", () => {
  it('the socket is destroyed when the permit comes back (undici.request, in flight)', async () => {
    const { limiter, gate } = limiterFor(1);
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const sockets: Socket[] = [];
    const onSend = (message: unknown) => sockets.push((message as { socket: Socket }).socket);
    subscribe('undici:client:sendHeaders', onSend);
    const destroyedAtRelease: boolean[] = [];
    const stop = onRelease((m) => {
      if (m.gate === gate) destroyedAtRelease.push(sockets.at(-1)!.destroyed);
    });
    try {
      const controller = new AbortController();
      const call = settle(
        request(`${loop.partner.url}/held`, { dispatcher, signal: controller.signal }),
      );
      await loop.partner.waitForArrived(1);
      controller.abort(new Error('cancelled'));
      await call;
      await whenIdle(gate);
    } finally {
      stop();
      unsubscribe('undici:client:sendHeaders', onSend);
    }
    expect(destroyedAtRelease).toEqual([true]);
    expect(gate.stats().abortedInFlight).toBe(1);
  });

  it.each(['limitHosts', 'limitFetch'])(
    "holdAfterAbort keeps an aborted in-flight request's permit that long (%s)",
    async (via) => {
      const { limiter, gate } = limiterFor(1, 300);
      const dispatcher =
        via === 'limitHosts' ? loop.agent.compose(limitHosts(limiter)) : loop.agent;
      const fetchFn = via === 'limitHosts' ? undiciFetch : limitFetch(undiciFetch, limiter);
      const controller = new AbortController();
      const call = settle(
        fetchFn(`${loop.partner.url}/held`, { dispatcher, signal: controller.signal }),
      );
      await loop.partner.waitForArrived(1);
      const abortedAt = performance.now();
      controller.abort(new Error('cancelled'));
      await call;
      expect(gate.held).toBe(1); // the caller has its rejection; the partner may still be working
      await whenIdle(gate);
      expect(performance.now() - abortedAt).toBeGreaterThanOrEqual(299); // a timer never fires early
      expect(gate.stats().abortedInFlight).toBe(1);
      expectInvariant(gate);
    },
  );

  it("holdAfterAbort: 'typical' keeps it for the gate's median hold time", async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 't', hosts: [loop.partner.origin], limit: 1, holdAfterAbort: 'typical' }],
    });
    const gate = limiter.gate('t')!;
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    for (let i = 0; i < 3; i++)
      await (await request(`${loop.partner.url}/ok?delay=150`, { dispatcher })).body.text();
    const typical = Math.round(gate.stats().hold.p50Ms);
    expect(typical).toBeGreaterThanOrEqual(100);
    const controller = new AbortController();
    const call = settle(
      request(`${loop.partner.url}/held`, { dispatcher, signal: controller.signal }),
    );
    await loop.partner.waitForArrived(4);
    const abortedAt = performance.now();
    controller.abort(new Error('cancelled'));
    await call;
    await whenIdle(gate);
    expect(performance.now() - abortedAt).toBeGreaterThanOrEqual(typical - 1);
  });

  it('holdAfterAbort does not apply to a request that never reached the partner', async () => {
    const { limiter, gate } = limiterFor(1, 60_000);
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const first = request(`${loop.partner.url}/held`, { dispatcher });
    await loop.partner.waitForArrived(1);
    const controller = new AbortController();
    const queued = settle(
      request(`${loop.partner.url}/ok`, { dispatcher, signal: controller.signal }),
    );
    controller.abort(new Error('cancelled'));
    expect(((await queued) as Error).message).toBe('cancelled');
    loop.partner.release();
    await (await first).body.text();
    expect(gate.held).toBe(0);
  });

  it('rejects a bad holdAfterAbort with a TypeError naming it', () => {
    expect(() => limiterFor(1, -1)).toThrow(
      /holdAfterAbort must be a non-negative integer \(ms\) or 'typical', got -1/,
    );
  });
});

describe("issue 10 item 12: a queued request runs in its caller's async context", () => {
  // Through compose, the handler limitHosts sees is undici's wrapper; LimitedAgent sees
  // request()'s own handler, an AsyncResource whose scope the grant borrows.
  it.each([
    ['limitHosts via compose', (limiter: HostLimiter) => loop.agent.compose(limitHosts(limiter))],
    ['LimitedAgent', (limiter: HostLimiter) => new LimitedAgent(loop.agent, limiter)],
  ])(
    "%s, limit 1, three callers: undici:request:create sees each caller's own context, off the releaser's stack",
    async (_name, make) => {
      const { limiter } = limiterFor(1);
      const dispatcher = make(limiter);
      const als = new AsyncLocalStorage<string>();
      const seen: [string, string | undefined, string][] = [];
      const onCreate = (message: unknown) => {
        const { request: r } = message as { request: { path: string } };
        const caller = new URL(r.path, 'http://x').searchParams.get('caller')!;
        seen.push([caller, als.getStore(), new Error().stack ?? '']);
      };
      subscribe('undici:request:create', onCreate);
      try {
        const calls = ['a', 'b', 'c'].map((caller) =>
          als.run(caller, async () =>
            (await request(`${loop.partner.url}/ok?caller=${caller}`, { dispatcher })).body.text(),
          ),
        );
        await Promise.all(calls);
      } finally {
        unsubscribe('undici:request:create', onCreate);
      }
      expect(seen.map(([caller, store]) => [caller, store])).toEqual([
        ['a', 'a'],
        ['b', 'b'],
        ['c', 'c'],
      ]);
      // b and c were granted by a release inside the previous response's end: not on its stack.
      for (const [, , stack] of seen.slice(1))
        expect(stack).not.toMatch(/onComplete|onResponseEnd|release/);
    },
  );
});

describe('README claim: undici interceptors.retry and the permit during backoff', () => {
  it.each([
    [true, 0],
    [false, 1],
  ])(
    'throwOnError: %s holds %i permit(s) while backing off',
    async (throwOnError, heldInBackoff) => {
      const { limiter, gate } = limiterFor(5);
      const held: number[] = [];
      const dispatcher = loop.agent.compose(
        limitHosts(limiter),
        interceptors.retry({
          maxRetries: 1,
          statusCodes: [503],
          throwOnError,
          retry(error, { state }, callback) {
            if (state.counter > 1) return callback(error);
            setTimeout(() => {
              held.push(gate.held); // in the backoff: is the failed attempt's permit still held?
              callback(null);
            }, 20);
            return undefined;
          },
        }),
      );
      const res = await settle(
        request(`${loop.partner.url}/flaky?id=${throwOnError}&fails=1&code=503`, {
          dispatcher,
        }).then((r) => r.body.text()),
      );
      expect(res).toBeUndefined();
      expect(held).toEqual([heldInBackoff]);
      expect(gate.stats().acquired).toBe(2);
      await whenIdle(gate);
    },
  );
});
