import { type Dispatcher, request, fetch as undiciFetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch, limitHosts } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';

/**
 * Issue 24's race: a body cancelled mid-stream gave its permit to the next waiter in the
 * microtask after the cancel, and a limitFetch waiter wrote its request in the same turn as the
 * FIN/RST: the partner, counting a request until its response closes (`peakOpen`), saw both at
 * once, every round. The oracle is the partner's own count (test/helpers/partner.ts).
 */

const loop = useLoopback({ keepAliveTimeout: 5000 });
const ROUNDS = 5;

type Via = 'limitFetch(undici.fetch)' | 'limitFetch(global fetch)' | 'undici.fetch + limitHosts';
type AnyFetch = (url: string, init?: { dispatcher?: Dispatcher }) => Promise<Response>;

describe('issue 24: a body cancelled mid-stream gives its permit back before its request is closed at the partner', () => {
  it.each<Via>([
    'limitFetch(undici.fetch)',
    'limitFetch(global fetch)',
    'undici.fetch + limitHosts',
  ])(
    'limit 1, two idle keep-alive sockets, read one chunk then reader.cancel(): the partner never sees 2 (%s)',
    async (via) => {
      const limiter = new HostLimiter({
        partners: [{ name: 'p', hosts: [loop.partner.origin], limit: 1, maxQueue: 10 }],
        unknownHosts: 'reject',
      });
      const gate = limiter.gate('p')!;
      // Node's global fetch keeps its own pool (its bundled undici, not the test's Agent); an
      // undici 8 Agent is refused there, so that leg uses Node's global dispatcher.
      const viaGlobal = via === 'limitFetch(global fetch)';
      const dispatcher =
        via === 'undici.fetch + limitHosts'
          ? loop.agent.compose(limitHosts(limiter))
          : viaGlobal
            ? undefined
            : loop.agent;
      const fetchFn = (via === 'undici.fetch + limitHosts'
        ? undiciFetch
        : limitFetch(viaGlobal ? globalThis.fetch : undiciFetch, limiter)) as unknown as AnyFetch;
      const url = loop.partner.url;
      const warm = (viaGlobal ? globalThis.fetch : undiciFetch) as unknown as AnyFetch;
      await Promise.all(
        [1, 2].map(async () => {
          await (
            await warm(`${url}/ok?delay=10`, { dispatcher: viaGlobal ? undefined : loop.agent })
          ).text();
        }),
      );
      expect(loop.partner.peakSockets).toBe(2);
      const peaks: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        loop.partner.resetPeak();
        const a = await fetchFn(`${url}/tick?n=500&ms=5`, { dispatcher });
        const b = fetchFn(`${url}/ok?delay=20`, { dispatcher });
        const reader = a.body!.getReader();
        expect((await reader.read()).done).toBe(false);
        expect(gate.queued).toBe(1); // b waits for a's permit
        expectInvariant(gate);
        await reader.cancel();
        expectInvariant(gate);
        await (await b).text();
        await whenIdle(gate);
        expectInvariant(gate);
        peaks.push(loop.partner.peakOpen);
      }
      expect(peaks).toEqual(Array(ROUNDS).fill(1));
      expect(gate.stats().abortedInFlight).toBe(ROUNDS);
    },
  );

  it('undici.request + limitHosts, the body destroyed mid-stream: the partner never sees 2', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [loop.partner.origin], limit: 1, maxQueue: 10 }],
      unknownHosts: 'reject',
    });
    const gate = limiter.gate('p')!;
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const url = loop.partner.url;
    const peaks: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      loop.partner.resetPeak();
      const a = await request(`${url}/tick?n=500&ms=5`, { dispatcher });
      const b = request(`${url}/ok?delay=20`, { dispatcher });
      await a.body[Symbol.asyncIterator]().next();
      a.body.destroy();
      await (await b).body.text();
      await whenIdle(gate);
      expectInvariant(gate);
      peaks.push(loop.partner.peakOpen);
    }
    expect(peaks).toEqual(Array(ROUNDS).fill(1));
  });
});
