import type { Agent } from 'undici';
import { describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts, withDispatcher } from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';
import { globalFetchTakesDispatcher } from '../helpers/undici.js';

describe("withDispatcher: Node's global fetch through a limited dispatcher, typed", () => {
  const loop = useLoopback({ keepAliveTimeout: 10_000 });

  it('keeps init and adds the dispatcher', () => {
    const ac = new AbortController();
    const init = withDispatcher(loop.agent, { method: 'POST', body: 'x', signal: ac.signal });
    expect(init).toMatchObject({
      method: 'POST',
      body: 'x',
      signal: ac.signal,
      dispatcher: loop.agent,
    });
    expect(withDispatcher(loop.agent)).toEqual({ dispatcher: loop.agent });
  });

  it('refuses something that is not a dispatcher, naming it', () => {
    expect(() => withDispatcher({} as Agent)).toThrow(
      /withDispatcher: dispatcher must be an undici Dispatcher .* got an object/,
    );
    expect(() => withDispatcher(undefined as unknown as Agent)).toThrow(TypeError);
  });

  it.runIf(globalFetchTakesDispatcher)(
    'gates 100 global fetch calls at the partner limit, and an abort while queued returns the place at once',
    async () => {
      const limiter = new HostLimiter({
        partners: [
          {
            name: 'p',
            hosts: [loop.partner.origin],
            limit: 4,
            maxQueue: 200,
            queueTimeout: 10_000,
          },
        ],
      });
      const gate = limiter.gate('p')!;
      const dispatcher = loop.agent.compose(limitHosts(limiter));
      const calls = Array.from({ length: 100 }, () =>
        fetch(`${loop.partner.url}/held`, withDispatcher(dispatcher)).then((r) => r.text()),
      );
      await loop.partner.waitForActive(4);
      const ac = new AbortController();
      const aborted = fetch(
        `${loop.partner.url}/ok`,
        withDispatcher(dispatcher, { signal: ac.signal }),
      );
      expect(gate.queued).toBe(97);
      ac.abort();
      await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
      expect(gate.queued).toBe(96);
      loop.partner.openHeld();
      await Promise.all(calls);
      expect(loop.partner.peak).toBe(4);
      expect(loop.partner.arrived).toBe(100);
      expectInvariant(gate);
      expect(gate.held).toBe(0);
    },
  );
});
