/**
 * A request sent to a forward proxy (axios's `proxy` option, or the `HTTP_PROXY` it reads from
 * the environment, for an http:// URL) goes to the proxy's host and names its target in an
 * absolute-form path (`GET http://partner/x`). LimitedHttpAgent took the gate of the proxy's
 * host: every host behind the proxy shared one unnamed gate (1,024), and a partner `limit: 2`
 * saw 10 at once. The gate is the target's, the host the proxy forwards to.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import axios from 'axios';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, LimitedHttpAgent } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { type Partner, startPartner } from '../helpers/partner.js';

let partner: Partner;
let proxy: http.Server;
let proxyPort: number;
/** The absolute-form targets the proxy was asked for. */
let proxied: string[];
let agent: LimitedHttpAgent;
let limiter: HostLimiter;

beforeEach(async () => {
  partner = await startPartner();
  proxied = [];
  const upstream = new http.Agent({ keepAlive: true });
  // A plain forward proxy: sends the absolute-form request on, pipes the answer back.
  proxy = http.createServer((req, res) => {
    proxied.push(req.url!);
    const out = http.request(req.url!, { method: req.method, agent: upstream }, (answer) => {
      res.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(res);
    });
    out.on('error', () => res.destroy());
    res.on('close', () => out.destroy());
    req.pipe(out);
  });
  proxy.on('close', () => upstream.destroy());
  proxy.listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  proxyPort = (proxy.address() as AddressInfo).port;
  limiter = new HostLimiter({
    partners: [
      { name: 'ledger', hosts: [partner.origin], limit: 2, maxQueue: 20, queueTimeout: 10_000 },
    ],
  });
  agent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
});
afterEach(async () => {
  agent.destroy();
  proxy.closeAllConnections();
  await new Promise((resolve) => proxy.close(resolve));
  await partner.close();
});

describe('a request through a forward proxy takes its target’s permit, not the proxy’s', () => {
  it('axios with proxy: 10 calls to a partner (limit 2) through the proxy: the partner sees 2 at once', async () => {
    const calls = Array.from({ length: 10 }, () =>
      axios.get(`${partner.url}/held`, {
        httpAgent: agent,
        proxy: { protocol: 'http', host: '127.0.0.1', port: proxyPort },
      }),
    );
    const ledger = limiter.gate('ledger')!;
    await partner.waitForActive(2);
    expect(ledger.stats()).toMatchObject({ held: 2, queued: 8 });
    partner.openHeld();
    const responses = await Promise.all(calls);
    expect(responses.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(proxied).toEqual(Array(10).fill(`${partner.url}/held`));
    expect(partner.peak).toBe(2);
    // No gate for the proxy's host: it is not where the requests go.
    expect([...limiter.gates().keys()]).toEqual(['ledger']);
  });

  it('http.request with an absolute-form path: the permit reports the target’s origin and path, no query', async () => {
    const reported: unknown[] = [];
    const onResponse = (message: unknown) => {
      reported.push((message as { permit: { request: unknown } }).permit.request);
    };
    subscribe('hostgate:response', onResponse);
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(
          { host: '127.0.0.1', port: proxyPort, path: `${partner.url}/ok?token=S3CRET`, agent },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(status).toBe(200);
    } finally {
      unsubscribe('hostgate:response', onResponse);
    }
    await whenIdle(limiter.gate('ledger')!);
    expect(limiter.gate('ledger')!.stats()).toMatchObject({ acquired: 1, held: 0 });
    expect(reported).toEqual([{ method: 'GET', origin: partner.origin, path: '/ok' }]);
  });
});
