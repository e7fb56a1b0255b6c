import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI, { APIUserAbortError } from 'openai';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch } from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { until } from '../helpers/until.js';

/**
 * A loopback fake of the OpenAI chat completions endpoint that counts its own concurrency.
 * Answers are held until the test lets them go (event-driven, no sleeps).
 */
async function startFakeOpenAI() {
  let active = 0;
  let peak = 0;
  let arrived = 0;
  let closedEarly = 0;
  let open = false;
  const parked: (() => void)[] = [];
  const waiters: { check: () => boolean; resolve: () => void }[] = [];
  const notify = () => {
    for (const w of [...waiters]) {
      if (w.check()) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  };
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      active++;
      arrived++;
      peak = Math.max(peak, active);
      res.on('close', () => {
        active--;
        if (!res.writableFinished) closedEarly++;
        notify();
      });
      notify();
      const { model } = JSON.parse(body) as { model: string };
      const answer = () =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            id: `chatcmpl-${arrived}`,
            object: 'chat.completion',
            created: 0,
            model,
            choices: [
              {
                index: 0,
                finish_reason: 'stop',
                message: { role: 'assistant', content: 'hello', refusal: null },
              },
            ],
          }),
        );
      if (req.url !== '/v1/chat/completions') res.writeHead(404).end();
      else if (open) answer();
      else parked.push(answer);
    });
  });
  server.keepAliveTimeout = 10_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const waitFor = (check: () => boolean) =>
    check() ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ check, resolve }));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get peak() {
      return peak;
    },
    get arrived() {
      return arrived;
    },
    waitForActive: (n: number) => waitFor(() => active >= n),
    waitForClosedEarly: (n: number) => waitFor(() => closedEarly >= n),
    openAll() {
      open = true;
      for (const answer of parked.splice(0)) answer();
    },
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('a real SDK (openai) given limitFetch as its fetch, against a loopback fake', () => {
  let fake: Awaited<ReturnType<typeof startFakeOpenAI>>;
  let limiter: HostLimiter;
  let client: OpenAI;
  beforeEach(async () => {
    fake = await startFakeOpenAI();
    limiter = new HostLimiter({
      partners: [
        { name: 'openai', hosts: [fake.url], limit: 4, maxQueue: 100, queueTimeout: 10_000 },
      ],
      unknownHosts: 'reject',
    });
    client = new OpenAI({
      apiKey: 'sk-test',
      baseURL: `${fake.url}/v1`,
      fetch: limitFetch(fetch, limiter),
      maxRetries: 0,
    });
  });
  afterEach(async () => {
    await fake.close();
  });

  const ask = (signal?: AbortSignal) =>
    client.chat.completions.create(
      { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] },
      { signal },
    );

  it('keeps 40 concurrent completions at the partner cap of 4', async () => {
    const gate = limiter.gate('openai')!;
    const calls = Array.from({ length: 40 }, () => ask());
    await fake.waitForActive(4);
    expect(gate.held).toBe(4);
    expect(gate.queued).toBe(36);
    fake.openAll();
    const answers = await Promise.all(calls);
    expect(answers.every((a) => a.choices[0]?.message.content === 'hello')).toBe(true);
    expect(fake.peak).toBe(4);
    expect(fake.arrived).toBe(40);
    expectInvariant(gate);
    expect(gate.held).toBe(0);
    expect(gate.stats().acquired).toBe(40);
  });

  it('returns the permit when a call is aborted while queued and while in flight', async () => {
    const gate = limiter.gate('openai')!;
    const first = new AbortController();
    const inFlight = Array.from({ length: 4 }, (_, i) =>
      ask(i === 0 ? first.signal : undefined).catch((e: unknown) => e),
    );
    await fake.waitForActive(4);
    const queuedAbort = new AbortController();
    const queued = ask(queuedAbort.signal).catch((e: unknown) => e);
    await until(() => gate.queued === 1, 'queued'); // the SDK reaches fetch a few awaits later
    queuedAbort.abort();
    expect(await queued).toBeInstanceOf(APIUserAbortError);
    expect(gate.queued).toBe(0);
    expect(fake.arrived).toBe(4);

    first.abort();
    expect(await inFlight[0]).toBeInstanceOf(APIUserAbortError);
    await fake.waitForClosedEarly(1); // the partner saw the request closed
    await until(() => gate.held === 3, 'released by the aborted call');
    fake.openAll();
    await Promise.all(inFlight);
    expectInvariant(gate);
    expect(gate.held).toBe(0);
    expect(gate.stats().acquired).toBe(4);
  });
});
