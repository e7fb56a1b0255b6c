/**
 * Issue 36 item 7: a public 503 names no internal upstream. `shed()` and the Fastify plugin sent
 * `partner` and `detail` to the client: for an unnamed host its internal origin, for a broken
 * partner "ledger is failing (2 failures in a row, the last ECONNREFUSED)". The answer says what
 * a client needs (503, Retry-After, a stable type); the details only when asked for.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import hostgate from '../../fastify/index.js';
import { outbound, type ShedOptions, shed } from '../../middleware/index.js';
import { findShedError, HostLimiter } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A port nothing listens on: connections to it are refused. */
async function closedPort(): Promise<number> {
  const server = http.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A service whose `/call?url=` fetches `url` through its outbound calls; returns its base URL. */
type Serve = (limiter: HostLimiter, shedOptions: ShedOptions) => Promise<string>;

const serveExpress: Serve = async (limiter, shedOptions) => {
  const app = express();
  app.use(outbound({ limiter }));
  app.get('/call', async (req, res, next) => {
    try {
      const upstream = await req.outbound.fetch(String(req.query.url));
      res.status(upstream.status).send(await upstream.text());
    } catch (error) {
      next(error);
    }
  });
  app.use(shed(shedOptions));
  // Not a shed: the service's own answer, quiet (Express's default would log the stack).
  app.use((_err: unknown, _req: express.Request, res: express.Response, _next: unknown) => {
    res.status(502).end('bad gateway');
  });
  const server = http.createServer(app).listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

const serveFastify: Serve = async (limiter, shedOptions) => {
  const app = Fastify();
  await app.register(hostgate, { limiter, shed: shedOptions });
  app.get('/call', async (request, reply) => {
    const url = (request.query as { url: string }).url;
    try {
      const upstream = await request.outbound.fetch(url);
      return reply.code(upstream.status).send(await upstream.text());
    } catch (error) {
      if (findShedError(error) !== undefined) throw error; // the plugin's to answer
      return reply.code(502).send('bad gateway');
    }
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  cleanups.push(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
};

describe.each<[string, Serve]>([
  ['shed() on Express', serveExpress],
  ['the Fastify plugin', serveFastify],
])('%s: a public 503 names no internal upstream (issue 36 item 7)', (_name, serve) => {
  async function scene(shedOptions: ShedOptions) {
    const internal: Partner = await startPartner();
    cleanups.push(() => internal.close());
    const agent = new Agent({ keepAliveTimeout: 1000 });
    cleanups.push(() => agent.destroy());
    const refused = await closedPort();
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'ledger',
          hosts: [`http://127.0.0.1:${refused}`],
          limit: 5,
          breaker: { failures: 2, halfOpenAfterMs: 60_000 },
        },
      ],
      unknownHosts: { limit: 1, maxQueue: 0 }, // the internal service has no rule
    });
    const base = await serve(limiter, shedOptions);
    const call = async (url: string) => {
      const res = await undiciFetch(`${base}/call?url=${encodeURIComponent(url)}`, {
        dispatcher: agent,
      });
      return { status: res.status, headers: res.headers, text: await res.text() };
    };
    // An unnamed internal host at capacity: one call holds it, the next is shed.
    const holding = call(`${internal.url}/held`);
    await internal.waitForActive(1);
    const busy = await call(`${internal.url}/ok`);
    internal.release();
    expect((await holding).status).toBe(200);
    // A broken partner: two refused connections open its breaker, the third call is shed.
    for (let i = 0; i < 2; i++) {
      expect((await call(`http://127.0.0.1:${refused}/`)).status).toBe(502);
    }
    const open = await call(`http://127.0.0.1:${refused}/`);
    return { internal, refused, busy, open };
  }

  it('by default: 503, Retry-After, a stable type; no origin, partner name or cause', async () => {
    const { internal, refused, busy, open } = await scene({});
    for (const [answer, type] of [
      [busy, 'urn:hostgate:problem:queue-full'],
      [open, 'urn:hostgate:problem:partner-open'],
    ] as const) {
      expect(answer.status).toBe(503);
      expect(answer.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
      expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const body = JSON.parse(answer.text);
      expect(body).toMatchObject({
        type,
        status: 503,
        title: expect.any(String),
        detail: expect.any(String),
        retryAfter: Number(answer.headers.get('retry-after')),
      });
      expect(Object.keys(body).sort()).toEqual(['detail', 'retryAfter', 'status', 'title', 'type']);
      for (const secret of [
        internal.origin,
        String(refused),
        '127.0.0.1',
        'ledger',
        'ECONNREFUSED',
      ]) {
        expect(answer.text).not.toContain(secret);
      }
    }
  });

  it('details: true puts the partner and the message back, for callers you trust', async () => {
    const { internal, busy, open } = await scene({ details: true });
    expect(JSON.parse(busy.text)).toMatchObject({ partner: internal.origin });
    expect(JSON.parse(open.text)).toMatchObject({
      partner: 'ledger',
      detail: expect.stringContaining('ECONNREFUSED'),
    });
  });
});
