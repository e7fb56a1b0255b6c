import type express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { admit } from '../../middleware/index.js';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';
import { expressVersions, type Listening, listen, Signals, watchQueue } from './helpers.js';

describe.each(expressVersions)('admit() on %s', (_name, makeApp) => {
  let service: Listening;
  let gate: Semaphore;
  let entered: Signals<void>;
  let proceed: Signals<void>;
  let closed: Signals<boolean>;
  let handled: string[];

  async function serve(options: Parameters<typeof admit>[0]) {
    const app = makeApp();
    // Registered before admit(): resolves from res 'close', and the awaiting test resumes
    // only after every 'close' listener (admit's included) has run.
    app.use((req: express.Request, res, next) => {
      const id = String(req.query.id);
      res.once('close', () => closed.resolve(id, res.writableFinished));
      next();
    });
    const admission = admit(options);
    app.use(admission);
    app.get('/work', (req, res) => {
      const id = String(req.query.id);
      handled.push(id);
      entered.resolve(id);
      proceed.wait(id).then(() => res.end(`done ${id}`));
    });
    service = await listen(app);
    gate = admission.gate;
    return watchQueue(gate);
  }

  const get = (id: string) => {
    const t = request(service.server).get('/work').query({ id });
    return { t, done: t.then((r) => r) };
  };

  beforeEach(() => {
    entered = new Signals();
    proceed = new Signals();
    closed = new Signals();
    handled = [];
  });
  afterEach(async () => {
    await service.close();
  });

  test('caps concurrent handling; the queue is served in order as responses finish', async () => {
    const queue = await serve({ limit: 2, maxQueue: 5, queueTimeout: 10_000 });
    const a = get('a');
    const b = get('b');
    await entered.wait('a');
    await entered.wait('b');
    const c = get('c');
    await queue.waitForQueued(1);
    expect(gate.held).toBe(2);
    expect(gate.queued).toBe(1);
    expect(handled).toEqual(['a', 'b']);

    proceed.resolve('a');
    expect((await a.done).text).toBe('done a');
    await entered.wait('c');
    expect(handled).toEqual(['a', 'b', 'c']);
    proceed.resolve('b');
    proceed.resolve('c');
    expect((await b.done).status).toBe(200);
    expect((await c.done).status).toBe(200);
    await closed.wait('c');
    expect(gate.held).toBe(0);
    expectInvariant(gate);
  });

  test('overflow gets 503 + Retry-After at once', async () => {
    const queue = await serve({ limit: 1, maxQueue: 1, queueTimeout: 10_000 });
    const a = get('a');
    await entered.wait('a');
    const b = get('b');
    await queue.waitForQueued(1);
    const started = performance.now();
    const r = await request(service.server).get('/work').query({ id: 'c' });
    expect(performance.now() - started).toBeLessThan(1000);
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toMatch(/^[1-9]\d*$/);
    expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(r.text)).toMatchObject({ status: 503 });
    expect(JSON.parse(r.text)).not.toHaveProperty('partner'); // public: names no gate
    expect(handled).toEqual(['a']);
    proceed.resolve('a');
    proceed.resolve('b');
    expect((await a.done).status).toBe(200);
    expect((await b.done).status).toBe(200);
    await closed.wait('b');
    expect(gate.held).toBe(0);
    expectInvariant(gate);
  });

  test('a queued request whose client leaves frees its place and is never handled', async () => {
    const queue = await serve({ limit: 1, maxQueue: 1, queueTimeout: 10_000 });
    const a = get('a');
    await entered.wait('a');
    const b = get('b');
    b.done.catch(() => {}); // superagent rejects an aborted request with 'Aborted'
    await queue.waitForQueued(1);
    b.t.abort();
    expect(await closed.wait('b')).toBe(false);
    expect(gate.queued).toBe(0);
    expect(gate.stats().abortedWaiting).toBe(1);

    // Its place is free: the next arrival queues instead of being shed.
    const c = get('c');
    await queue.waitForQueued(2);
    expect(gate.queued).toBe(1);
    proceed.resolve('a');
    await entered.wait('c');
    proceed.resolve('c');
    expect((await a.done).status).toBe(200);
    expect((await c.done).status).toBe(200);
    await closed.wait('c');
    expect(handled).toEqual(['a', 'c']);
    expect(gate.held).toBe(0);
    expectInvariant(gate);
  });

  test('a handled request whose client leaves returns its permit at once', async () => {
    const queue = await serve({ limit: 1, maxQueue: 1, queueTimeout: 10_000 });
    const a = get('a');
    a.done.catch(() => {});
    await entered.wait('a');
    const b = get('b');
    await queue.waitForQueued(1);
    a.t.abort();
    expect(await closed.wait('a')).toBe(false);
    // The handler of 'a' never finished, yet 'b' gets its turn.
    await entered.wait('b');
    expect(gate.held).toBe(1);
    proceed.resolve('b');
    expect((await b.done).status).toBe(200);
    await closed.wait('b');
    proceed.resolve('a'); // the abandoned handler ends late: nothing changes
    expect(gate.held).toBe(0);
    expect(gate.stats().doubleReleases).toBe(0);
    expectInvariant(gate);
  });

  test('a wait past queueTimeout gets 503', async () => {
    await serve({ limit: 1, maxQueue: 4, queueTimeout: 30 });
    const a = get('a');
    await entered.wait('a');
    const r = await request(service.server).get('/work').query({ id: 'b' });
    expect(r.status).toBe(503);
    expect(JSON.parse(r.text)).toMatchObject({ type: 'urn:hostgate:problem:queue-timeout' });
    proceed.resolve('a');
    await a.done;
    await closed.wait('a');
    expect(gate.held).toBe(0);
    expect(gate.stats().shedQueueTimeout).toBe(1);
  });
});
