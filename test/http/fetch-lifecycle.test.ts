import { AsyncLocalStorage } from 'node:async_hooks';
import { getEventListeners, once } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import {
  type Dispatcher,
  getGlobalDispatcher,
  setGlobalDispatcher,
  fetch as undiciFetch,
} from 'undici';
import { describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch, limitHosts } from '../../src/index.js';
import { recordReleases, settle, whenIdle } from '../helpers/gate-events.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';

/** Regression tests of issue 10 (one permit lifecycle) for limitFetch, named after its items. */

const loop = useLoopback({ keepAliveTimeout: 5000 });

function limiterFor(limit: number, queueTimeout = 10_000) {
  const limiter = new HostLimiter({
    partners: [{ name: 'p', hosts: [loop.partner.origin], limit, maxQueue: 100, queueTimeout }],
    unknownHosts: 'reject',
  });
  return { limiter, gate: limiter.gate('p')! };
}

type AnyFetch = (
  url: string,
  init?: { dispatcher?: Dispatcher; signal?: AbortSignal },
) => Promise<Response>;

describe('issue 10 item 2: a cancelled body keeps its permit until teardown, as through limitHosts', () => {
  it.each(['body.cancel()', 'reader.cancel()'])(
    'limit 1, an idle keep-alive socket: the next waiter never meets the cancelled request (%s)',
    async (how) => {
      const { limiter, gate } = limiterFor(1);
      const limited = limitFetch(undiciFetch, limiter) as unknown as AnyFetch;
      await (await limited(`${loop.partner.url}/ok`, { dispatcher: loop.agent })).text(); // a socket, idle
      const releases = recordReleases(gate);
      const stalled = await limited(`${loop.partner.url}/stall`, { dispatcher: loop.agent });
      const next = limited(`${loop.partner.url}/ok`, { dispatcher: loop.agent });
      expect(gate.queued).toBe(1);
      if (how === 'body.cancel()') await stalled.body!.cancel();
      else await stalled.body!.getReader().cancel();
      await (await next).text();
      expect(loop.partner.peak).toBe(1);
      await whenIdle(gate);
      releases.stop();
      // The same release reasons as `fetch` through limitHosts: a cancelled body is an abort.
      expect(releases.reasons).toEqual(['aborted', 'released']);
      expectInvariant(gate);
    },
  );

  it('through limitHosts the same cancel counts the same', async () => {
    const { limiter, gate } = limiterFor(1);
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const releases = recordReleases(gate);
    const stalled = await undiciFetch(`${loop.partner.url}/stall`, { dispatcher });
    await stalled.body!.cancel();
    await whenIdle(gate);
    releases.stop();
    expect(releases.reasons).toEqual(['aborted']);
  });
});

describe('issue 10 item 4: limitFetch counts every abort as aborted, fast path and queued', () => {
  it('an abort with a plain Error, in flight, on both paths', async () => {
    const { limiter, gate } = limiterFor(1);
    const limited = limitFetch(undiciFetch, limiter) as unknown as AnyFetch;
    const abortInFlight = async (arrivals: number) => {
      const controller = new AbortController();
      const call = settle(
        limited(`${loop.partner.url}/held`, { dispatcher: loop.agent, signal: controller.signal }),
      );
      await loop.partner.waitForArrived(arrivals);
      controller.abort(new Error('cancelled'));
      return call;
    };
    expect(((await abortInFlight(1)) as Error).message).toBe('cancelled');
    await whenIdle(gate);
    const first = limited(`${loop.partner.url}/held`, { dispatcher: loop.agent });
    await loop.partner.waitForArrived(2);
    const queued = abortInFlight(3);
    expect(gate.queued).toBe(1);
    loop.partner.release();
    await (await first).text();
    expect(((await queued) as Error).message).toBe('cancelled');
    await whenIdle(gate);
    expect(gate.stats().abortedInFlight).toBe(2);
    expectInvariant(gate);
  });
});

describe('issue 10 item 10: limitFetch over a limitHosts of the same limiter takes one permit', () => {
  it('limit 1, the dispatcher passed in init: no deadlock', async () => {
    const { limiter, gate } = limiterFor(1, 500);
    const limited = limitFetch(undiciFetch, limiter) as unknown as AnyFetch;
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const res = await limited(`${loop.partner.url}/ok`, { dispatcher });
    expect(await res.text()).toBe('xx');
    expect(gate.stats().acquired).toBe(1);
    await whenIdle(gate);
  });

  it('limit 1, setGlobalDispatcher(agent.compose(limitHosts(limiter))): the README recipes together', async () => {
    const { limiter, gate } = limiterFor(1, 500);
    const previous = getGlobalDispatcher();
    setGlobalDispatcher(loop.agent.compose(limitHosts(limiter)));
    try {
      const limited = limitFetch(undiciFetch, limiter) as unknown as AnyFetch;
      const calls = [1, 2, 3].map(async () => (await limited(`${loop.partner.url}/ok`)).text());
      expect(await Promise.all(calls)).toEqual(['xx', 'xx', 'xx']);
      expect(loop.partner.peak).toBe(1);
      expect(gate.stats().acquired).toBe(3);
      // Outside a limitFetch call the dispatcher gates as before.
      await (await undiciFetch(`${loop.partner.url}/ok`)).text();
      expect(gate.stats().acquired).toBe(4);
    } finally {
      setGlobalDispatcher(previous);
    }
    await whenIdle(gate);
  });
});

describe('issue 10 item 11: no listener is left on a shared caller signal', () => {
  it.each([20, 1])(
    'eleven calls sharing one AbortSignal, limit %i: no MaxListenersExceededWarning',
    async (limit) => {
      const { limiter, gate } = limiterFor(limit);
      const limited = limitFetch(undiciFetch, limiter) as unknown as AnyFetch;
      const warnings: Error[] = [];
      const onWarning = (warning: Error) => warnings.push(warning);
      process.on('warning', onWarning);
      const shared = new AbortController().signal;
      try {
        const calls = Array.from({ length: 11 }, async () =>
          (
            await limited(`${loop.partner.url}/ok`, { dispatcher: loop.agent, signal: shared })
          ).text(),
        );
        await Promise.all(calls);
        expect(getEventListeners(shared, 'abort')).toHaveLength(0);
        await new Promise((resolve) => process.nextTick(resolve)); // warnings are emitted on a tick
        expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
      } finally {
        process.off('warning', onWarning);
      }
      await whenIdle(gate);
    },
  );
});

describe("issue 10 item 12: a queued limitFetch call runs in its caller's async context", () => {
  it('three callers in their own AsyncLocalStorage contexts, limit 1', async () => {
    const { limiter } = limiterFor(1);
    const als = new AsyncLocalStorage<string>();
    const seen: [string, string | undefined][] = [];
    const recording = ((input: string, init: RequestInit) => {
      seen.push([new URL(input).searchParams.get('caller')!, als.getStore()]);
      return undiciFetch(input, init as never);
    }) as unknown as typeof undiciFetch;
    const limited = limitFetch(recording, limiter) as unknown as AnyFetch;
    const calls = ['a', 'b', 'c'].map((caller) =>
      als.run(caller, async () =>
        (
          await limited(`${loop.partner.url}/ok?caller=${caller}`, { dispatcher: loop.agent })
        ).text(),
      ),
    );
    await Promise.all(calls);
    expect(seen).toEqual([
      ['a', 'a'],
      ['b', 'b'],
      ['c', 'c'],
    ]);
  });
});

describe('issue 10 item 3: a limitFetch call aborted while connecting returns its permit at once', () => {
  it('against a partner that never completes the TLS handshake', async () => {
    const silent = net.createServer(() => {});
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const origin = `https://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    const limiter = new HostLimiter({ partners: [{ name: 's', hosts: [origin], limit: 1 }] });
    const gate = limiter.gate('s')!;
    const limited = limitFetch(undiciFetch, limiter) as unknown as AnyFetch;
    const controller = new AbortController();
    const call = settle(
      limited(`${origin}/x`, { dispatcher: loop.agent, signal: controller.signal }),
    );
    await once(silent, 'connection');
    controller.abort(new Error('cancelled'));
    await whenIdle(gate); // well before undici's 10 s connect timeout (the test's is 5 s)
    expect(((await call) as Error).message).toBe('cancelled');
    expect(gate.stats().abortedInFlight).toBe(1);
    await loop.agent.destroy();
    silent.close();
  }, 5000);
});
