import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import axios, { isCancel } from 'axios';
import axiosRetry from 'axios-retry';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, LimitedHttpAgent, QueueFullError } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { AbortError, got } from '../helpers/got.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useGatedAgent } from '../helpers/node-http.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { until } from '../helpers/until.js';

// The real clients, each against a partner that counts its own concurrency: the cap holds at
// the partner, every attempt takes a permit, and every permit comes back after cancels.

const rule = (partner: Partner, limit: number) =>
  new HostLimiter({
    partners: [{ name: 'p', hosts: [partner.origin], limit, maxQueue: 20, queueTimeout: 10_000 }],
  });

describe('axios, axios-retry, got and the AWS SDK through LimitedHttpAgent', () => {
  const setup = useGatedAgent({ limit: 2, maxQueue: 20, queueTimeout: 10_000 });
  const gate = () => setup.gate;
  let partner: Partner;
  let agent: LimitedHttpAgent;
  let inner: http.Agent;
  beforeEach(() => {
    ({ partner, agent } = setup);
    inner = agent.agent;
  });

  it('axios: the cap holds at the partner (with and without follow-redirects)', async () => {
    const client = axios.create({ baseURL: partner.url, httpAgent: agent });
    const calls = Array.from({ length: 6 }, (_, i) =>
      client.get('/held', { maxRedirects: i % 2 === 0 ? 0 : 5 }),
    );
    await partner.waitForActive(2);
    expect(gate().queued).toBe(4);
    expectInvariant(gate());
    partner.openHeld();
    const responses = await Promise.all(calls);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(partner.peak).toBe(2);
    await whenIdle(gate());
    expectInvariant(gate());
  });

  it("axios: a shed is the request's error", async () => {
    const tight = new LimitedHttpAgent(
      inner,
      new HostLimiter({
        partners: [{ name: 'p', hosts: [partner.origin], limit: 1, maxQueue: 0 }],
      }),
    );
    const first = axios.get(`${partner.url}/held`, { httpAgent: tight });
    await partner.waitForActive(1);
    const error = await axios.get(`${partner.url}/ok`, { httpAgent: tight }).catch((e) => e);
    expect(error.cause ?? error).toBeInstanceOf(QueueFullError);
    partner.openHeld();
    await first;
    await whenIdle(tight.limiter.gate('p')!);
  });

  it('axios: signal cancels queued and in-flight calls, each permit back once', async () => {
    const controller = new AbortController();
    const calls = Array.from({ length: 4 }, () =>
      axios.get(`${partner.url}/held`, { httpAgent: agent, signal: controller.signal }),
    );
    await partner.waitForActive(2);
    expect(gate().queued).toBe(2);
    controller.abort();
    const results = await Promise.allSettled(calls);
    expect(results.every((r) => r.status === 'rejected' && isCancel(r.reason))).toBe(true);
    expect(gate().queued).toBe(0);
    await partner.waitForClosedEarly(2);
    await whenIdle(gate());
    const stats = gate().stats();
    expect(stats.acquired).toBe(2);
    expect(stats.released).toBe(2);
    expect(partner.arrived).toBe(2);
    expectInvariant(gate());
  });

  it('axios: a stream nobody reads gives its permit back at maxHold', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [partner.origin], limit: 1, maxHold: 100 }],
    });
    const held = new LimitedHttpAgent(inner, limiter);
    const res = await axios.get(`${partner.url}/stall`, {
      httpAgent: held,
      responseType: 'stream',
    });
    expect(res.status).toBe(200);
    res.data.on('error', () => {}); // destroyed by maxHold
    await whenIdle(limiter.gate('p')!);
    expect(limiter.gate('p')!.stats().holdTimeouts).toBe(1);
    await partner.waitForClosedEarly(1);
    // The permit is back: the next call is granted at once. (Not a second request under the
    // 100 ms maxHold: on a loaded CI machine a plain request went 127 ms without progress.)
    const next = limiter.gate('p')!.tryAcquire();
    expect(next).toBeDefined();
    next!.release();
    expectInvariant(limiter.gate('p')!);
  });

  it('axios-retry: every attempt takes its own permit', async () => {
    const client = axios.create({ httpAgent: agent });
    axiosRetry(client, {
      retries: 3,
      retryDelay: () => 1,
      retryCondition: (e) => e.response?.status === 503,
    });
    const res = await client.get(`${partner.url}/flaky?id=a&fails=2&code=503`);
    expect(res.status).toBe(200);
    await whenIdle(gate());
    expect(partner.arrived).toBe(3);
    expect(gate().stats().acquired).toBe(3);
    expect(gate().stats().released).toBe(3);
    expectInvariant(gate());
  });

  it('got: the cap holds, and its retry takes a permit per attempt', async () => {
    const client = got.extend({
      agent: { http: agent },
      retry: {
        limit: 2,
        statusCodes: [503],
        calculateDelay: ({ computedValue }) => (computedValue > 0 ? 1 : 0),
      },
    });
    const calls = Array.from({ length: 5 }, (_, i) =>
      client.get(`${partner.url}/held?n=${i}`).text(),
    );
    await partner.waitForActive(2);
    expect(gate().queued).toBe(3);
    expectInvariant(gate());
    partner.openHeld();
    await Promise.all(calls);
    expect(partner.peak).toBe(2);
    const body = await client.get(`${partner.url}/flaky?id=g&fails=2&code=503`).text();
    expect(body).toBe('xx');
    await whenIdle(gate());
    expect(gate().stats().acquired).toBe(5 + 3);
    expect(gate().stats().released).toBe(5 + 3);
    expectInvariant(gate());
  });

  // got 16 dropped the promise's cancel(): its signal is the way to cancel (got 14 has both).
  it("got: its signal's abort of a queued and an in-flight call returns each permit once", async () => {
    const client = got.extend({ agent: { http: agent }, retry: { limit: 0 } });
    const controller = new AbortController();
    const calls = Array.from({ length: 3 }, () =>
      client.get(`${partner.url}/held`, { signal: controller.signal }),
    );
    await partner.waitForActive(2);
    expect(gate().queued).toBe(1);
    controller.abort();
    const results = await Promise.allSettled(calls);
    expect(results.every((r) => r.status === 'rejected' && r.reason instanceof AbortError)).toBe(
      true,
    );
    expect(gate().queued).toBe(0);
    await partner.waitForClosedEarly(2);
    await whenIdle(gate());
    expect(gate().stats().released).toBe(2);
    expect(partner.arrived).toBe(2);
    expectInvariant(gate());
  });

  it('AWS SDK v3 (S3 over NodeHttpHandler): the cap holds, and an unread Body keeps its permit', async () => {
    const s3 = (route: string) =>
      new S3Client({
        endpoint: `${partner.url}${route}`,
        forcePathStyle: true,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        maxAttempts: 1,
        requestHandler: new NodeHttpHandler({ httpAgent: agent }),
      });
    const read = (key: string, client: S3Client) =>
      client
        .send(new GetObjectCommand({ Bucket: 'b', Key: key }))
        .then((o) => o.Body!.transformToString());
    const held = s3('/held');
    const calls = Array.from({ length: 4 }, (_, i) => read(`k${i}`, held));
    await partner.waitForActive(2);
    await until(() => gate().queued === 2, 'queued');
    expectInvariant(gate());
    partner.openHeld();
    expect(await Promise.all(calls)).toEqual(['xx', 'xx', 'xx', 'xx']);
    expect(partner.peak).toBe(2);
    await whenIdle(gate());

    // A Body is the response stream: until it is read, the request is open and holds its permit.
    const ok = s3('/ok');
    const unread = await Promise.all(
      ['a', 'b'].map((key) => ok.send(new GetObjectCommand({ Bucket: 'b', Key: key }))),
    );
    expect(gate().held).toBe(2);
    const third = read('c', ok);
    await until(() => gate().queued === 1, 'queued behind the unread Bodies');
    expectInvariant(gate());
    expect(await unread[0]!.Body!.transformToString()).toBe('xx');
    expect(await third).toBe('xx');
    expect(await unread[1]!.Body!.transformToString()).toBe('xx');
    await whenIdle(gate());
    expect(gate().stats().released).toBe(7);
    expectInvariant(gate());
  });
});

describe('node:https through LimitedHttpAgent (a self-signed certificate made at test time)', () => {
  let dir: string;
  let tls: { key: Buffer; cert: Buffer } | undefined;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'hostgate-tls-'));
    try {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-addext',
          'subjectAltName=IP:127.0.0.1',
        ],
        { stdio: 'ignore' },
      );
      tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    } catch {
      tls = undefined;
    }
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("keeps the https.Agent's TLS options and keep-alive, and holds the cap", async (context) => {
    if (tls === undefined) context.skip('openssl is not on the PATH: no certificate to test with');
    const partner = await startPartner({ tls: tls! });
    const inner = new https.Agent({ keepAlive: true, ca: tls!.cert });
    const agent = new LimitedHttpAgent(inner, rule(partner, 2));
    const gate = agent.limiter.gate('p')!;
    try {
      expect(agent.protocol).toBe('https:');
      const calls = Array.from({ length: 5 }, () =>
        axios.get(`${partner.url}/ok?delay=5`, { httpsAgent: agent }),
      );
      const responses = await Promise.all(calls);
      expect(responses.every((r) => r.status === 200)).toBe(true);
      expect(partner.peak).toBe(2);
      expect(partner.peakSockets).toBe(2);
      // Without the CA the wrapped agent's TLS check still refuses the partner.
      const strict = new LimitedHttpAgent(new https.Agent(), agent.limiter);
      const refused = await axios.get(`${partner.url}/ok`, { httpsAgent: strict }).catch((e) => e);
      expect(refused.code).toBe('DEPTH_ZERO_SELF_SIGNED_CERT');
      await whenIdle(gate);
      expectInvariant(gate);
    } finally {
      inner.destroy();
      await partner.close();
    }
  });
});
