import nock from 'nock';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  HostLimiter,
  type HostLimiterOptions,
  limitFetch,
  QueueFullError,
  Retrier,
  type RetrierOptions,
} from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { released } from '../helpers/until.js';

// Partner answers are scripted with nock underneath limitFetch, over Node's global fetch.
const origin = 'http://billing.test';
const NOW = Date.UTC(2030, 0, 15, 12, 0, 0);

type Rule = Partial<NonNullable<HostLimiterOptions['partners']>[number]>;

beforeAll(() => {
  if (!nock.isActive()) nock.activate(); // importing nock activates it
  nock.disableNetConnect();
});
afterEach(() => {
  nock.abortPendingRequests();
  nock.cleanAll();
});
afterAll(() => {
  nock.enableNetConnect();
  nock.restore();
});

/**
 * A retrier over limitFetch over the nock-patched global fetch. The backoff sleep is recorded
 * (with the gate's `held` at that moment) and advances a manual clock instead of waiting.
 */
function setup(options: RetrierOptions = {}, rule: Rule = {}) {
  const limiter = new HostLimiter({
    partners: [
      { name: 'billing', hosts: [origin], limit: 2, maxQueue: 100, queueTimeout: 10_000, ...rule },
    ],
    unknownHosts: 'reject',
  });
  const gate = limiter.gate('billing')!;
  const clock = { now: NOW };
  const sleeps: { ms: number; held: number; queued: number }[] = [];
  const retrier = new Retrier({
    limiter,
    now: () => clock.now,
    random: () => 0.5,
    sleep: async (ms) => {
      sleeps.push({ ms, held: gate.held, queued: gate.queued });
      clock.now += ms;
    },
    ...options,
  });
  const limited = limitFetch(globalThis.fetch, limiter);
  const fetchWithRetry = retrier.wrap(limited);
  const stats = () => retrier.stats().billing;
  return { limiter, gate, clock, sleeps, retrier, limited, fetchWithRetry, stats };
}

function expectIdle(gate: ReturnType<typeof setup>['gate']) {
  expectInvariant(gate);
  expect(gate.held).toBe(0);
  expect(gate.queued).toBe(0);
  expect(gate.stats().doubleReleases).toBe(0);
}

async function settle(promise: Promise<unknown>): Promise<unknown> {
  try {
    return await promise;
  } catch (error) {
    return error;
  }
}

describe('retries through limitFetch', () => {
  it('retries a 503 with Retry-After, then a 503, and returns the 200 — a fresh permit per attempt, none held while sleeping', async () => {
    const scope = nock(origin)
      .get('/invoices')
      .reply(503, 'busy', { 'retry-after': '1' })
      .get('/invoices')
      .reply(503, 'still busy')
      .get('/invoices')
      .reply(200, 'invoices');
    const { gate, sleeps, fetchWithRetry, stats } = setup();

    const res = await fetchWithRetry(`${origin}/invoices`);

    expect(res.status).toBe(200);
    expect(await res.text()).toBe('invoices');
    // 1 s from Retry-After; then full jitter over [0, 200) ms with random() = 0.5.
    expect(sleeps).toEqual([
      { ms: 1000, held: 0, queued: 0 },
      { ms: 100, held: 0, queued: 0 },
    ]);
    expect(gate.stats().acquired).toBe(3);
    expectIdle(gate);
    expect(stats()).toMatchObject({
      attempts: 3,
      retries: 2,
      budgetExhausted: 0,
      activeRetries: 0,
    });
    expect(scope.isDone()).toBe(true);
  });

  it('honours a Retry-After given as an HTTP-date', async () => {
    nock(origin)
      .get('/invoices')
      .reply(429, 'slow down', { 'retry-after': new Date(NOW + 3000).toUTCString() })
      .get('/invoices')
      .reply(200, 'ok');
    const { gate, sleeps, fetchWithRetry } = setup();

    const res = await fetchWithRetry(`${origin}/invoices`);

    expect(await res.text()).toBe('ok');
    expect(sleeps).toEqual([{ ms: 3000, held: 0, queued: 0 }]);
    expectIdle(gate);
  });

  it('does not retry before the partner asked: a Retry-After past maxRetryAfter hands its answer back, body intact', async () => {
    nock(origin).get('/invoices').reply(503, 'down for maintenance', { 'retry-after': '30' });
    const { gate, sleeps, fetchWithRetry, stats } = setup({ maxRetryAfter: 5000 });

    const res = await fetchWithRetry(`${origin}/invoices`);

    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('30'); // for the caller to relay
    expect(gate.held).toBe(1); // the caller's to read
    expect(await res.text()).toBe('down for maintenance');
    expect(sleeps).toEqual([]);
    expect(stats()).toMatchObject({ attempts: 1, retries: 0 });
    expectIdle(gate);
  });

  it('returns the last answer, unread, when the retries run out', async () => {
    nock(origin)
      .get('/invoices')
      .reply(502, 'first')
      .get('/invoices')
      .reply(504, 'second')
      .get('/invoices')
      .reply(503, 'third');
    const { gate, sleeps, fetchWithRetry, stats } = setup({ retries: 2 });

    const res = await fetchWithRetry(`${origin}/invoices`);

    expect(res.status).toBe(503);
    expect(await res.text()).toBe('third');
    expect(sleeps).toHaveLength(2);
    expect(stats()).toMatchObject({ attempts: 3, retries: 2 });
    expectIdle(gate);
  });

  it('starts no retry whose backoff would end past maxRetryTime', async () => {
    nock(origin).get('/invoices').times(2).reply(503, 'busy', { 'retry-after': '1' });
    const { gate, sleeps, fetchWithRetry, stats } = setup({ maxRetryTime: 1500, retries: 5 });

    const res = await fetchWithRetry(`${origin}/invoices`);

    // 0 s: attempt 1, sleep 1 s; 1 s: attempt 2 — another 1 s would end at 2 s > 1.5 s.
    expect(res.status).toBe(503);
    await res.body?.cancel();
    expect(sleeps.map((s) => s.ms)).toEqual([1000]);
    expect(stats()).toMatchObject({ attempts: 2, retries: 1 });
    expectIdle(gate);
  });

  it.each([400, 401, 403, 404, 409, 422, 500, 501])(
    'does not retry a %i: it will not change',
    async (status) => {
      nock(origin).get('/invoices').reply(status, 'no');
      const { gate, sleeps, fetchWithRetry, stats } = setup();

      const res = await fetchWithRetry(`${origin}/invoices`);

      expect(res.status).toBe(status);
      expect(await res.text()).toBe('no');
      expect(sleeps).toEqual([]);
      expect(stats()).toMatchObject({ attempts: 1, retries: 0 });
      expectIdle(gate);
    },
  );

  it('retries a connection reset and a "fetch failed" with no answer', async () => {
    nock(origin)
      .get('/invoices')
      .replyWithError({ code: 'ECONNRESET', message: 'socket hang up' })
      .get('/invoices')
      .replyWithError(
        new TypeError('fetch failed', {
          cause: Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }),
        }),
      )
      .get('/invoices')
      .reply(200, 'ok');
    const { gate, sleeps, fetchWithRetry, stats } = setup();

    const res = await fetchWithRetry(`${origin}/invoices`);

    expect(await res.text()).toBe('ok');
    expect(sleeps.map((s) => s.held)).toEqual([0, 0]);
    expect(stats()).toMatchObject({ attempts: 3, retries: 2 });
    expectIdle(gate);
  });

  it('rejects with the last error, as thrown, when the retries run out', async () => {
    const reset = { code: 'ECONNRESET', message: 'socket hang up' };
    nock(origin).get('/invoices').times(2).replyWithError(reset);
    const { gate, fetchWithRetry, stats } = setup({ retries: 1 });

    const error = await settle(fetchWithRetry(`${origin}/invoices`));

    expect(error).toMatchObject(reset); // nock rejects with a plain object: passed on as is
    expect(stats()).toMatchObject({ attempts: 2, retries: 1 });
    expectIdle(gate);
  });
});

describe('only what is safe to send twice', () => {
  it('does not retry a POST', async () => {
    nock(origin).post('/payments').reply(503, 'busy');
    const { gate, sleeps, fetchWithRetry, stats } = setup();

    const res = await fetchWithRetry(`${origin}/payments`, { method: 'POST', body: 'amount=5' });

    expect(res.status).toBe(503);
    await res.text();
    expect(sleeps).toEqual([]);
    expect(stats()).toMatchObject({ attempts: 1, retries: 0 });
    expectIdle(gate);
  });

  it('retries a POST that carries an idempotency key, sending the same body each time', async () => {
    const scope = nock(origin, { reqheaders: { 'idempotency-key': 'pay-42' } })
      .post('/payments', 'amount=5')
      .reply(503, 'busy')
      .post('/payments', 'amount=5')
      .reply(201, 'created');
    const { gate, fetchWithRetry, stats } = setup();

    const res = await fetchWithRetry(`${origin}/payments`, {
      method: 'POST',
      headers: { 'Idempotency-Key': 'pay-42' },
      body: 'amount=5',
    });

    expect(res.status).toBe(201);
    await res.text();
    expect(scope.isDone()).toBe(true);
    expect(stats()).toMatchObject({ attempts: 2, retries: 1 });
    expectIdle(gate);
  });

  it('looks for the idempotency key under the configured header name', async () => {
    nock(origin).post('/payments').times(2).reply(503).post('/payments').reply(201);
    const { fetchWithRetry, stats } = setup({ idempotencyKeyHeader: 'X-Request-Id' });

    const plain = await fetchWithRetry(`${origin}/payments`, {
      method: 'POST',
      headers: { 'idempotency-key': 'ignored here' },
    });
    expect(plain.status).toBe(503); // not retried: the key is under another name
    await plain.body?.cancel();
    const keyed = await fetchWithRetry(`${origin}/payments`, {
      method: 'POST',
      headers: new Headers({ 'x-request-id': 'r-1' }),
    });
    expect(keyed.status).toBe(201);
    expect(stats()).toMatchObject({ attempts: 3, retries: 1 });
  });

  it('retries a PUT given as a Request with a body, sending a clone of it each time', async () => {
    const scope = nock(origin)
      .put('/invoices/7', '{"paid":true}')
      .reply(503)
      .put('/invoices/7', '{"paid":true}')
      .reply(204);
    const { gate, fetchWithRetry } = setup();
    const request = new Request(`${origin}/invoices/7`, { method: 'PUT', body: '{"paid":true}' });

    const res = await fetchWithRetry(request);

    expect(res.status).toBe(204);
    expect(scope.isDone()).toBe(true);
    expectIdle(gate);
  });

  it('does not retry a one-shot stream body: it cannot be sent again', async () => {
    nock(origin).put('/upload').reply(503, 'busy');
    const { gate, fetchWithRetry, stats } = setup();
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('chunk'));
        controller.close();
      },
    });

    const res = await fetchWithRetry(`${origin}/upload`, {
      method: 'PUT',
      body,
      duplex: 'half',
    } as RequestInit);

    expect(res.status).toBe(503);
    await res.text();
    expect(stats()).toMatchObject({ attempts: 1, retries: 0 });
    expectIdle(gate);
  });

  it('never retries our own QueueFullError: retrying into our own full queue only lengthens it', async () => {
    nock(origin).get('/report').reply(200, 'pinned until read');
    const { gate, sleeps, limited, fetchWithRetry, stats } = setup({}, { limit: 1, maxQueue: 0 });
    const pinned = await limited(`${origin}/report`); // holds the only permit: body unread

    const error = await settle(fetchWithRetry(`${origin}/invoices`));

    expect(error).toBeInstanceOf(QueueFullError);
    expect(sleeps).toEqual([]);
    expect(stats()).toMatchObject({ attempts: 1, retries: 0 });
    expect(gate.stats().shedQueueFull).toBe(1);
    await pinned.body?.cancel();
    expectIdle(gate);
  });
});

describe("the caller's signal", () => {
  it('ends the call with its reason when it aborts during an attempt, without a retry', async () => {
    const scope = nock(origin).get('/slow').delay(10_000).reply(503);
    const { gate, sleeps, fetchWithRetry, stats } = setup();
    const controller = new AbortController();
    const arrived = new Promise((resolve) => scope.once('request', resolve));
    const call = settle(fetchWithRetry(`${origin}/slow`, { signal: controller.signal }));
    await arrived;
    const reason = new Error('client went away');

    controller.abort(reason);

    expect(await call).toBe(reason);
    expect(sleeps).toEqual([]);
    expect(stats()).toMatchObject({ attempts: 1, retries: 0 });
    await released(gate); // a cancelled request's permit follows once its connection is down
    expectIdle(gate);
  });

  it('ends a real backoff sleep at once with its reason, long before the Retry-After', async () => {
    nock(origin).get('/invoices').reply(503, 'busy', { 'retry-after': '3600' });
    let sleeping!: () => void;
    const backoff = new Promise<void>((resolve) => {
      sleeping = resolve;
    });
    // The default sleep: a real one-hour timer. Only an abort that really ends it lets this finish.
    const { gate, fetchWithRetry, stats } = setup({
      sleep: undefined,
      maxRetryAfter: 7_200_000,
      maxRetryTime: 7_200_000,
      onRetry: () => sleeping(),
    });
    const controller = new AbortController();
    const call = settle(fetchWithRetry(`${origin}/invoices`, { signal: controller.signal }));
    await backoff;
    expect(gate.held).toBe(0);
    const reason = new Error('client went away');

    controller.abort(reason);

    expect(await call).toBe(reason);
    expect(stats()).toMatchObject({ attempts: 1, retries: 0, activeRetries: 0 });
    expectIdle(gate);
  });
});
