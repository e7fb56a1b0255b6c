import type express from 'express';
import { Agent, fetch } from 'undici';
import { afterEach, describe, expect, test } from 'vitest';
import { type OutboundOptions, outbound, shed } from '../../middleware/index.js';
import { ResponseSentError } from '../../src/common/errors.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { expectInvariant } from '../helpers/invariant.js';
import { startPartner } from '../helpers/partner.js';
import { deferred, expressVersions, listen, released, until, watchProcess } from './helpers.js';

/**
 * Issue 23, "work nobody will read": one call of a `Promise.all` fan-out is shed, the handler
 * answers 503, and its sibling calls kept running — the partner saw them open, and no close,
 * after the client already had its 503. The partners' own counts are the oracle.
 */
describe.each(expressVersions)('a fan-out whose response was sent, on %s', (_name, makeApp) => {
  const cleanup: (() => unknown)[] = [];
  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn();
  });

  async function setup(options: Partial<OutboundOptions> = {}) {
    const proc = watchProcess();
    cleanup.push(() => proc.stop());
    const slow = await startPartner();
    const tight = await startPartner();
    const limiter = new HostLimiter({
      partners: [
        { name: 'slow', hosts: [slow.origin], limit: 10, queueTimeout: 10_000 },
        { name: 'tight', hosts: [tight.origin], limit: 1, maxQueue: 0 },
      ],
    });
    const settled: PromiseSettledResult<string>[] = [];
    const siblingsDone = deferred();
    const app = makeApp();
    const middleware = outbound({ limiter, ...options });
    cleanup.push(() => middleware.close());
    app.use(middleware);
    app.get('/fan', async (req, res, next: express.NextFunction) => {
      // Every call reads its own body, whoever waits for the whole.
      const call = (base: string) => req.outbound.fetch(`${base}/held`).then((r) => r.text());
      const calls = [call(slow.url), call(slow.url), call(tight.url)];
      void Promise.allSettled(calls).then((results) => {
        settled.push(...results);
        siblingsDone.resolve();
      });
      try {
        // The three are open at the partners before the fourth call is shed (tight is full).
        await Promise.race([
          Promise.all([slow.waitForActive(2), tight.waitForActive(1)]),
          ...calls,
        ]);
        calls.push(call(tight.url));
        res.json(await Promise.all(calls));
      } catch (error) {
        next(error); // 503 from shed()
      }
    });
    app.use(shed());
    const service = await listen(app);
    cleanup.push(() => service.close());
    const client = new Agent();
    cleanup.push(() => client.destroy());
    // Closed first: answers what is still held, so nothing above waits on it.
    cleanup.push(
      () => slow.close(),
      () => tight.close(),
    );
    return { slow, tight, limiter, settled, siblingsDone, service, client, proc };
  }

  function expectQuiet(limiter: HostLimiter) {
    for (const gate of limiter.gates().values()) {
      expect(gate.held).toBe(0);
      expectInvariant(gate);
    }
  }

  test('cancels the calls still running once the 503 was sent: the partner sees them closed, permits come back', async () => {
    const { slow, tight, limiter, settled, siblingsDone, service, client, proc } = await setup();
    const res = await fetch(`${service.url}/fan`, { dispatcher: client });
    expect(res.status).toBe(503);
    await res.text();
    // Within a short bound, not a sleep: without the fix they stay open until the partner answers.
    await until(() => slow.active === 0 && tight.active === 0, 'closed at the partners', 3000);
    expect(slow.closedEarly).toBe(2);
    expect(tight.closedEarly).toBe(1);
    expect(slow.arrived + tight.arrived).toBe(3); // the shed call never reached tight
    await released(limiter.gate('slow')!);
    await released(limiter.gate('tight')!);
    expectQuiet(limiter);
    await siblingsDone.promise;
    const reasons = settled.map((r) => (r.status === 'rejected' ? r.reason : r.value));
    expect(reasons.filter((r) => r instanceof ResponseSentError)).toHaveLength(3);
    expect(proc.rejections).toEqual([]);
  });

  test("lets them run with afterResponse: 'continue': the partner answers them after the 503", async () => {
    const { slow, tight, limiter, settled, siblingsDone, service, client } = await setup({
      afterResponse: 'continue',
    });
    const res = await fetch(`${service.url}/fan`, { dispatcher: client });
    expect(res.status).toBe(503);
    await res.text();
    expect(slow.active + tight.active).toBe(3); // still open after the 503, as asked
    slow.openHeld();
    tight.openHeld();
    await siblingsDone.promise;
    expect(settled.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    expect(slow.closedEarly + tight.closedEarly).toBe(0);
    await released(limiter.gate('slow')!);
    expectQuiet(limiter);
  });
});

describe('req.outbound.background', () => {
  test('outlives the response it was started from; the request-bound call beside it does not', async () => {
    const partner = await startPartner();
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [partner.origin], limit: 4 }],
    });
    const middleware = outbound({ limiter });
    const app = expressVersions[0]![1]();
    const background = deferred<string>();
    const bound = deferred<unknown>();
    app.use(middleware);
    app.get('/job', (req, res) => {
      req.outbound.background
        .fetch(`${partner.url}/held`)
        .then((r) => r.text())
        .then(background.resolve, background.resolve);
      req.outbound
        .fetch(`${partner.url}/held`)
        .then((r) => r.text())
        .then(bound.resolve, bound.resolve);
      void partner.waitForActive(2).then(() => res.status(202).end());
    });
    const service = await listen(app);
    const client = new Agent();
    try {
      const res = await fetch(`${service.url}/job`, { dispatcher: client });
      expect(res.status).toBe(202);
      expect(await bound.promise).toBeInstanceOf(ResponseSentError);
      await partner.waitForClosedEarly(1);
      expect(partner.active).toBe(1); // the background call, still open at the partner
      partner.openHeld();
      expect(await background.promise).toBe('xx');
      await released(limiter.gate('p')!);
      expect(partner.closedEarly).toBe(1);
      expectInvariant(limiter.gate('p')!);
    } finally {
      await client.destroy();
      await service.close();
      await middleware.close();
      await partner.close();
    }
  });

  test('shed() takes a ResponseSentError passed to next() after the response quietly: the connection stays open for the next request', async () => {
    const partner = await startPartner();
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [partner.origin], limit: 4 }],
    });
    const middleware = outbound({ limiter });
    const app = expressVersions[0]![1]();
    const passedOn = deferred<unknown>();
    app.use(middleware);
    app.get('/late', async (req, res, next) => {
      const late = req.outbound.fetch(`${partner.url}/held`);
      await partner.waitForActive(1);
      res.status(202).end();
      try {
        await late;
      } catch (error) {
        passedOn.resolve(error);
        next(error);
      }
    });
    app.get('/next', (_req, res) => {
      res.send('ok');
    });
    app.use(shed());
    const service = await listen(app);
    const connections: number[] = [];
    service.server.on('connection', () => connections.push(connections.length));
    const client = new Agent({ connections: 1, keepAliveTimeout: 10_000 });
    try {
      const first = await fetch(`${service.url}/late`, { dispatcher: client });
      expect(first.status).toBe(202);
      await first.text();
      expect(await passedOn.promise).toBeInstanceOf(ResponseSentError);
      const second = await fetch(`${service.url}/next`, { dispatcher: client });
      expect(await second.text()).toBe('ok');
      expect(connections).toHaveLength(1); // Express's final handler would have closed it
      await released(limiter.gate('p')!);
    } finally {
      await client.destroy();
      await service.close();
      await middleware.close();
      await partner.close();
    }
  });

  test('rejects a bad afterResponse', () => {
    expect(() =>
      outbound({ limiter: { partners: [] }, afterResponse: 'later' as 'abort' }),
    ).toThrow(/afterResponse must be 'abort' or 'continue', got "later"/);
  });
});
