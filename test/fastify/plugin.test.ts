import http from 'node:http';
import type { AddressInfo } from 'node:net';
import axios from 'axios';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import hostgate, { replyShed } from '../../fastify/index.js';
import { HostLimiter, LimitedHttpAgent, QueueFullError } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';

describe('hostgate/fastify: the Fastify 5 plugin', () => {
  let partner: Partner;
  let limiter: HostLimiter;
  let app: FastifyInstance;
  beforeEach(async () => {
    partner = await startPartner();
    limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: [partner.origin], limit: 1, maxQueue: 0 }],
    });
    app = Fastify();
  });
  afterEach(async () => {
    await app.close();
    await partner.close();
  });
  const gate = () => limiter.gate('billing')!;

  it('gives every request request.outbound, whose fetch goes through the partner gate', async () => {
    await app.register(hostgate, { limiter });
    app.get('/report', async (request) => {
      const res = await request.outbound.fetch(`${partner.url}/ok?size=3`);
      return { upstream: await res.text() };
    });
    const res = await app.inject({ method: 'GET', url: '/report' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ upstream: 'xxx' });
    expect(app.hostgate.limiter).toBe(limiter);
    expect(gate().stats().acquired).toBe(1);
    await whenIdle(gate());
  });

  it('answers a shed with 503, Retry-After and a problem+json body', async () => {
    await app.register(hostgate, { limiter });
    app.get('/report', async (request) => {
      const res = await request.outbound.fetch(`${partner.url}/ok`);
      return res.text();
    });
    const occupying = gate().tryAcquire()!;
    const res = await app.inject({ method: 'GET', url: '/report' });
    occupying.release();
    expect(res.statusCode).toBe(503);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.json()).toMatchObject({
      type: 'urn:hostgate:problem:queue-full',
      status: 503,
    });
    expect(res.body).not.toContain('billing'); // a public answer names no upstream
    expect(partner.arrived).toBe(0);
    expectInvariant(gate());
  });

  it('sheds the same way for a node:http client (axios through LimitedHttpAgent)', async () => {
    const agent = new LimitedHttpAgent(new http.Agent(), limiter);
    await app.register(hostgate, { limiter });
    app.get('/report', async (request) => {
      const res = await axios.get(`${partner.url}/ok`, {
        httpAgent: agent,
        signal: request.outbound.signal,
      });
      return res.data;
    });
    const occupying = gate().tryAcquire()!;
    const res = await app.inject({ method: 'GET', url: '/report' });
    occupying.release();
    expect(res.statusCode).toBe(503);
    expect(res.json().type).toBe('urn:hostgate:problem:queue-full');
    agent.destroy();
  });

  it('calls a priority function with the raw request', async () => {
    const seen: unknown[] = [];
    await app.register(hostgate, {
      limiter,
      priority: (req) => {
        seen.push(req.headers['x-batch']);
        return undefined;
      },
    });
    app.get('/', async () => 'ok');
    await app.inject({ method: 'GET', url: '/', headers: { 'x-batch': '1' } });
    expect(seen).toEqual(['1']);
  });

  it('answers 504 when the request deadline passes during an outbound call', async () => {
    await app.register(hostgate, { limiter, deadline: 100 });
    app.get('/slow', async (request) => {
      const res = await request.outbound.fetch(`${partner.url}/held`);
      return res.text();
    });
    const res = await app.inject({ method: 'GET', url: '/slow' });
    expect(res.statusCode).toBe(504);
    expect(res.headers['retry-after']).toBeUndefined();
    expect(res.json()).toMatchObject({
      type: 'urn:hostgate:problem:deadline-exceeded',
      budgetMs: 100,
    });
    await partner.waitForClosedEarly(1);
    await whenIdle(gate());
    expectInvariant(gate());
  });

  it('leaves other errors to Fastify, and with shed: false to your own handler via replyShed', async () => {
    await app.register(hostgate, { limiter, shed: false });
    app.setErrorHandler((error, request, reply) => {
      if (replyShed(error, request, reply, { status: 429 })) return;
      reply.code(500).send({ mine: true });
    });
    app.get('/shed', async () => {
      throw new QueueFullError('billing', 0, 1500);
    });
    app.get('/boom', async () => {
      throw new Error('boom');
    });
    const shed = await app.inject({ method: 'GET', url: '/shed' });
    expect(shed.statusCode).toBe(429);
    expect(shed.headers['retry-after']).toBe('2');
    expect((await app.inject({ method: 'GET', url: '/boom' })).json()).toEqual({ mine: true });
  });

  it("passes errors that are not hostgate's to Fastify's default handler", async () => {
    await app.register(hostgate, { limiter });
    app.get('/boom', async () => {
      throw new Error('boom');
    });
    const res = await app.inject({ method: 'GET', url: '/boom' });
    expect(res.statusCode).toBe(500);
    expect(res.json().message).toBe('boom');
  });

  it('serves the status route: JSON with the partner rows', async () => {
    await app.register(hostgate, { limiter, status: '/internal/hostgate' });
    const res = await app.inject({
      method: 'GET',
      url: '/internal/hostgate',
      headers: { accept: 'application/json' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().partners.map((p: { partner: string }) => p.partner)).toEqual(['billing']);
    const html = await app.inject({ method: 'GET', url: '/internal/hostgate' });
    expect(html.headers['content-type']).toMatch(/^text\/html/);
  });

  it('refuses bad options loudly, naming them', async () => {
    await expect(app.register(hostgate, { limiter, statu: '/x' } as never)).rejects.toThrow(
      /statu/,
    );
    const other = Fastify();
    await expect(
      other.register(hostgate, {
        dispatcher: app.hostgate?.dispatcher ?? ({} as never),
        status: '/s',
      }),
    ).rejects.toThrow(TypeError);
    await other.close();
    const third = Fastify();
    await expect(third.register(hostgate, { limiter, status: 'no-slash' })).rejects.toThrow(
      /status must be a route path starting with "\/".*"no-slash"/,
    );
    await third.close();
    // register()'s own options are Fastify's: not refused.
    const fourth = Fastify();
    await fourth.register(hostgate, { limiter, prefix: '/api', logLevel: 'warn' } as never);
    await fourth.close();
  });

  it('a real client disconnect cancels the outbound calls: the partner sees them closed, permits back', async () => {
    limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: [partner.origin], limit: 2, maxQueue: 5 }],
    });
    const agent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
    await app.register(hostgate, { limiter });
    let handlerError: unknown;
    app.get('/fan-out', async (request) => {
      try {
        // One call on undici's fetch, one on axios through the gated node:http agent, one
        // queued behind them: all three on the request's disconnect signal.
        const calls = [
          request.outbound.fetch(`${partner.url}/held`).then((r) => r.text()),
          axios.get(`${partner.url}/held`, { httpAgent: agent, signal: request.outbound.signal }),
          axios.get(`${partner.url}/held`, { httpAgent: agent, signal: request.outbound.signal }),
        ];
        return await Promise.all(calls);
      } catch (error) {
        handlerError = error;
        throw error;
      }
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    const client = http.get(`http://127.0.0.1:${port}/fan-out`);
    client.on('error', () => {});
    await partner.waitForActive(2);
    expect(gate().queued).toBe(1);
    expectInvariant(gate());
    client.destroy();
    await partner.waitForClosedEarly(2);
    await whenIdle(gate());
    expect(gate().queued).toBe(0);
    expect(partner.arrived).toBe(2);
    expect(handlerError).toBeDefined();
    expectInvariant(gate());
    agent.destroy();
  });
});
