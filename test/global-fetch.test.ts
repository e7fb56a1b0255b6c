import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts, withDispatcher } from '../src/index.js';
import { expectInvariant } from './helpers/invariant.js';
import { type Partner, startPartner } from './helpers/partner.js';
import { globalFetchTakesDispatcher } from './helpers/undici.js';

describe("withDispatcher: Node's global fetch through a limited dispatcher, typed", () => {
  let partner: Partner;
  let agent: Agent;
  beforeEach(async () => {
    partner = await startPartner();
    agent = new Agent({ keepAliveTimeout: 10_000 });
  });
  afterEach(async () => {
    await agent.destroy();
    await partner.close();
  });

  it('keeps init and adds the dispatcher', () => {
    const ac = new AbortController();
    const init = withDispatcher(agent, { method: 'POST', body: 'x', signal: ac.signal });
    expect(init).toMatchObject({ method: 'POST', body: 'x', signal: ac.signal, dispatcher: agent });
    expect(withDispatcher(agent)).toEqual({ dispatcher: agent });
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
          { name: 'p', hosts: [partner.origin], limit: 4, maxQueue: 200, queueTimeout: 10_000 },
        ],
      });
      const gate = limiter.gate('p')!;
      const dispatcher = agent.compose(limitHosts(limiter));
      const calls = Array.from({ length: 100 }, () =>
        fetch(`${partner.url}/held`, withDispatcher(dispatcher)).then((r) => r.text()),
      );
      await partner.waitForActive(4);
      const ac = new AbortController();
      const aborted = fetch(`${partner.url}/ok`, withDispatcher(dispatcher, { signal: ac.signal }));
      expect(gate.queued).toBe(97);
      ac.abort();
      await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
      expect(gate.queued).toBe(96);
      partner.openHeld();
      await Promise.all(calls);
      expect(partner.peak).toBe(4);
      expect(partner.arrived).toBe(100);
      expectInvariant(gate);
      expect(gate.held).toBe(0);
    },
  );
});
