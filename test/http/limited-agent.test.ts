import { Agent, interceptors, MockAgent, request, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, LimitedAgent, QueueFullError } from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';

// LimitedAgent's own surface; its request semantics run in limit-hosts.test.ts, whose suite
// covers the interceptor and the wrapper alike.
describe('LimitedAgent: a dispatcher that wraps another, in the shape of RetryAgent', () => {
  let partner: Partner;
  beforeEach(async () => {
    partner = await startPartner();
  });
  afterEach(async () => {
    await partner.close();
  });

  const rule = () => ({
    partners: [{ name: 'p', hosts: [partner.origin], limit: 2, maxQueue: 1, queueTimeout: 10_000 }],
  });

  it('takes a HostLimiter or its options, and exposes the limiter', () => {
    const limiter = new HostLimiter(rule());
    expect(new LimitedAgent(new Agent(), limiter).limiter).toBe(limiter);
    expect(new LimitedAgent(new Agent(), rule()).limiter.gate('p')?.limit).toBe(2);
  });

  it('refuses something that is not a dispatcher, naming it', () => {
    expect(() => new LimitedAgent({} as Agent, rule())).toThrow(
      /LimitedAgent: dispatcher must be an undici Dispatcher .* got an object/,
    );
  });

  it('gates request and fetch, sheds past the queue, and composes retry outside it', async () => {
    const agent = new Agent({ keepAliveTimeout: 10_000 });
    const limited = new LimitedAgent(agent, rule());
    const gate = limited.limiter.gate('p')!;
    const held = [1, 2, 3].map(() =>
      request(`${partner.url}/held`, { dispatcher: limited }).then((r) => r.body.text()),
    );
    await partner.waitForActive(2);
    expect(gate.queued).toBe(1);
    const shed = await undiciFetch(`${partner.url}/ok`, { dispatcher: limited }).catch(
      (e: unknown) => e,
    );
    expect((shed as TypeError).cause).toBeInstanceOf(QueueFullError);
    partner.openHeld();
    await Promise.all(held);
    expect(partner.peak).toBe(2);

    const retrying = limited.compose(
      interceptors.retry({ maxRetries: 2, minTimeout: 1, timeoutFactor: 1, statusCodes: [503] }),
    );
    const res = await request(`${partner.url}/flaky?id=w&fails=1&code=503`, {
      dispatcher: retrying,
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    expectInvariant(gate);
    expect(gate.held).toBe(0);
    expect(gate.stats().acquired).toBe(5); // 3 held + 2 attempts; the shed one took none
    await limited.close();
    expect(agent.closed).toBe(true);
  });

  it('closes and destroys the dispatcher it wraps, by promise or callback', async () => {
    const mock = new MockAgent();
    const limited = new LimitedAgent(mock, rule());
    await new Promise<void>((resolve) => limited.close(resolve));
    const agent = new Agent();
    const other = new LimitedAgent(agent, rule());
    await other.destroy(new Error('shutting down'));
    expect(agent.destroyed).toBe(true);
  });
});
