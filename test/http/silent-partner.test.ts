/**
 * A partner that accepts the connection and never answers (a wrong port on a service that
 * speaks something else, a hung upstream): after `maxHold` the call fails with
 * PermitHoldTimeoutError. Its message said "request to p made no progress for 200 ms (maxHold;
 * held 200 ms) and was aborted; read or cancel response bodies": no host, and advice about
 * response bodies for a request that never had a response. A user on their first day reads that
 * their code leaks bodies. Now it names the origin and says no response came; a response that
 * started and then stalled keeps the body advice.
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import axios from 'axios';
import { Agent, fetch, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import {
  HostLimiter,
  LimitedHttpAgent,
  limitFetch,
  limitHosts,
  PermitHoldTimeoutError,
} from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { startPartner } from '../helpers/partner.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A TCP server on 127.0.0.1:0 that accepts every connection and never writes a byte. */
async function silentServer(): Promise<{ origin: string; requests: () => number }> {
  const sockets = new Set<net.Socket>();
  let requests = 0;
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', (data) => {
      requests += data.toString('latin1').match(/^[A-Z]+ \/\S* HTTP\/1\.1\r$/gm)?.length ?? 0;
    });
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as net.AddressInfo;
  return { origin: `http://127.0.0.1:${port}`, requests: () => requests };
}

/** The PermitHoldTimeoutError behind `error` (itself, or along `cause`: fetch, axios, got). */
function holdTimeout(error: unknown): PermitHoldTimeoutError {
  for (let e = error; e !== undefined && e !== null; e = (e as { cause?: unknown }).cause) {
    if (e instanceof PermitHoldTimeoutError) return e;
  }
  throw new Error(`not a PermitHoldTimeoutError: ${String(error)}`);
}

const clients = {
  'limitFetch(undici.fetch)': (limiter: HostLimiter, url: string) =>
    limitFetch(fetch, limiter)(url).then((r) => r.text()),
  'undici request through limitHosts': async (limiter: HostLimiter, url: string) => {
    const dispatcher = new Agent().compose(limitHosts(limiter));
    cleanups.push(() => dispatcher.destroy());
    return (await request(url, { dispatcher })).body.text();
  },
  'axios through LimitedHttpAgent': async (limiter: HostLimiter, url: string) => {
    const httpAgent = new LimitedHttpAgent(new http.Agent(), limiter);
    cleanups.push(() => httpAgent.destroy());
    return (await axios.get(url, { httpAgent })).data;
  },
};

describe('a partner that never answers fails loudly, naming its origin', () => {
  it.each(Object.keys(clients) as (keyof typeof clients)[])(
    '%s: the maxHold error names the origin and says no response came, not "read or cancel response bodies"',
    async (name) => {
      const silent = await silentServer();
      const limiter = new HostLimiter({
        partners: [{ name: 'billing', hosts: [silent.origin], limit: 2, maxHold: 200 }],
      });
      cleanups.push(() => limiter.close());
      const error = holdTimeout(
        await clients[name](limiter, `${silent.origin}/invoices?token=secret`).then(
          () => {
            throw new Error('a silent partner answered');
          },
          (e: unknown) => e,
        ),
      );
      expect(silent.requests()).toBe(1);
      expect(error.message).toContain('billing');
      expect(error.message).toContain(silent.origin);
      expect(error.message).toMatch(/no response/);
      expect(error.message).not.toMatch(/response bodies/);
      expect(error.message).not.toContain('secret'); // origin only: no path query
      expect(error.origin).toBe(silent.origin);
      expect(error.responded).toBe(false);
      await whenIdle(limiter.gate('billing')!);
    },
  );

  it('a response that started and stalled keeps the body advice, with the origin', async () => {
    const partner = await startPartner();
    cleanups.push(() => partner.close());
    const limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: [partner.origin], limit: 2, maxHold: 200 }],
    });
    cleanups.push(() => limiter.close());
    const res = await limitFetch(fetch, limiter)(`${partner.origin}/stall`);
    const error = holdTimeout(
      await res.text().then(
        () => undefined,
        (e: unknown) => e,
      ),
    );
    expect(error.message).toContain(partner.origin);
    expect(error.message).toMatch(/made no progress/);
    expect(error.message).toMatch(/read or cancel response bodies/);
    expect(error.responded).toBe(true);
    await whenIdle(limiter.gate('billing')!);
  });

  it('a gate without a request (a bare permit) keeps its message and has no origin', () => {
    const error = new PermitHoldTimeoutError('billing', 60_000, 60_000);
    expect(error.message).toBe(
      'request to billing made no progress for 60000 ms (maxHold; held 60000 ms) and was aborted; read or cancel response bodies',
    );
    expect(error.origin).toBeUndefined();
    expect(error.responded).toBeUndefined();
  });
});
