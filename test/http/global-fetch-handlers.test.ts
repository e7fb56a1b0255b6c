import type { Agent } from 'undici';
import { describe, expect, it } from 'vitest';
import {
  HostLimiter,
  LimitedAgent,
  limitHosts,
  QueueFullError,
  withDispatcher,
} from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';
import { undiciMajor } from '../helpers/undici.js';
import { released } from '../helpers/until.js';

/*
 * Issue 23: on Node 24 with undici 8, `fetch(url, withDispatcher(dispatcher))` (Node's global
 * fetch, whose bundled undici is 7) failed with "invalid onRequestStart method": Node's fetch
 * hands the dispatcher callback-API handlers and undici 8 takes only controller-API ones.
 * hostgate's dispatchers translate, so these run on every leg (Node 20 with undici 7, Node 24
 * with undici 7 and 8); the partner's own counts are the oracle.
 */
const dispatchers: [
  string,
  (agent: Agent, limiter: HostLimiter) => Parameters<typeof withDispatcher>[0],
][] = [
  ['agent.compose(limitHosts(limiter))', (agent, limiter) => agent.compose(limitHosts(limiter))],
  ['new LimitedAgent(agent, limiter)', (agent, limiter) => new LimitedAgent(agent, limiter)],
];

describe.each(dispatchers)(
  `Node's global fetch through %s (undici ${undiciMajor})`,
  (_name, make) => {
    const loop = useLoopback({ keepAliveTimeout: 10_000 });

    function setup(limit: number, maxQueue = 100) {
      const limiter = new HostLimiter({
        partners: [
          { name: 'p', hosts: [loop.partner.origin], limit, maxQueue, queueTimeout: 10_000 },
        ],
        unknownHosts: 'reject',
      });
      return { gate: limiter.gate('p')!, dispatcher: make(loop.agent, limiter) };
    }

    it('answers with status, headers and body, 20 calls held at the cap of 4', async () => {
      const { gate, dispatcher } = setup(4);
      const calls = Array.from({ length: 20 }, () =>
        fetch(`${loop.partner.url}/held?size=5`, withDispatcher(dispatcher)).then(async (r) => ({
          status: r.status,
          type: r.headers.get('content-type'),
          body: await r.text(),
        })),
      );
      await loop.partner.waitForActive(4);
      expect(gate.held).toBe(4);
      expectInvariant(gate);
      loop.partner.openHeld();
      const results = await Promise.all(calls);
      expect(results).toEqual(
        Array.from({ length: 20 }, () => ({ status: 200, type: 'text/plain', body: 'xxxxx' })),
      );
      expect(loop.partner.peak).toBe(4);
      await released(gate);
      expectInvariant(gate);
    });

    it('an abort in flight closes the request at the partner and returns the permit', async () => {
      const { gate, dispatcher } = setup(2);
      const ac = new AbortController();
      const call = fetch(
        `${loop.partner.url}/held`,
        withDispatcher(dispatcher, { signal: ac.signal }),
      );
      await loop.partner.waitForActive(1);
      ac.abort();
      await expect(call).rejects.toMatchObject({ name: 'AbortError' });
      await loop.partner.waitForClosedEarly(1);
      await released(gate);
      expectInvariant(gate);
    });

    it('a body read slowly streams through (backpressure), and the permit returns at its end', async () => {
      const { gate, dispatcher } = setup(1);
      const res = await fetch(`${loop.partner.url}/ok?size=1000000`, withDispatcher(dispatcher));
      let bytes = 0;
      for await (const chunk of res.body!) bytes += (chunk as Uint8Array).byteLength;
      expect(bytes).toBe(1_000_000);
      await released(gate);
      expectInvariant(gate);
    });

    it('a shed call rejects as fetch does, with the QueueFullError as its cause, and never reaches the partner', async () => {
      const { gate, dispatcher } = setup(1, 0);
      const first = fetch(`${loop.partner.url}/held`, withDispatcher(dispatcher));
      await loop.partner.waitForActive(1);
      const shed = await fetch(`${loop.partner.url}/ok`, withDispatcher(dispatcher)).catch(
        (e) => e,
      );
      expect(shed).toBeInstanceOf(TypeError);
      expect((shed as Error).cause).toBeInstanceOf(QueueFullError);
      loop.partner.openHeld();
      await (await first).text();
      expect(loop.partner.arrived).toBe(1);
      await released(gate);
      expectInvariant(gate);
    });
  },
);
