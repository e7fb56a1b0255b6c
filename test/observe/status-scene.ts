import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Agent, type Dispatcher, request } from 'undici';
import { statusHandler } from '../../middleware/index.js';
import { detectLeaks, HostLimiter, type LeakDetector, limitHosts } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

/** A partner that streams a chunk every `every` ms while `flowing`, and never ends. */
export interface Trickle {
  origin: string;
  flowing: boolean;
  close(): Promise<void>;
}

export async function startTrickle(every = 20): Promise<Trickle> {
  const responses = new Set<http.ServerResponse>();
  const state = { flowing: true };
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('start');
    responses.add(res);
    res.on('close', () => responses.delete(res));
  });
  const timer = setInterval(() => {
    if (state.flowing) for (const res of responses) res.write('.');
  }, every);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    get flowing() {
      return state.flowing;
    },
    set flowing(on: boolean) {
      state.flowing = on;
    },
    async close() {
      clearInterval(timer);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Four partners in four states, over real loopback requests:
 * - `billing` (limit 20): 13 requests in flight, answering normally — a healthy, busy gate.
 * - `search` (limit 4): exhausted by responses that sent a first chunk and went quiet — stalled.
 * - `ledger` (limit 5): one unread response body held past `leakWarnAfter` — a leak suspect.
 * - `maps` (limit 2, no queue): exhausted and shedding (12 calls), its bytes still flowing —
 *   busy, not stalled.
 */
export interface StatusScene {
  limiter: HostLimiter;
  maps: Trickle;
  url: string;
  detector: LeakDetector;
  close(): Promise<void>;
}

/** The scene's status page marks an exhausted gate stalled after this long without bytes. */
export const STALL_AFTER_MS = 1000;

export async function startStatusScene(): Promise<StatusScene> {
  const partners: Partner[] = await Promise.all([startPartner(), startPartner(), startPartner()]);
  const [billing, search, ledger] = partners as [Partner, Partner, Partner];
  const maps = await startTrickle(20);
  const limiter = new HostLimiter({
    partners: [
      { name: 'billing', hosts: [billing.origin], limit: 20, maxQueue: 200 },
      { name: 'search', hosts: [search.origin], limit: 4, maxQueue: 40 },
      { name: 'ledger', hosts: [ledger.origin], limit: 5 },
      { name: 'maps', hosts: [maps.origin], limit: 2, maxQueue: 0 },
    ],
    unknownHosts: 'reject',
  });
  limiter.gate('ledger')!.leakWarnAfter = 150; // the others keep maxHold / 2 (30 s)
  const detector = detectLeaks(limiter, { sweepEvery: 20 });
  const agent = new Agent({ keepAliveTimeout: 1000, connections: 50 });
  const dispatcher = agent.compose(limitHosts(limiter));
  const pending: Promise<unknown>[] = [];
  const responses: Dispatcher.ResponseData[] = [];
  const send = (origin: string, path: string) => {
    const call = request(`${origin}${path}`, { dispatcher }).then((r) => {
      responses.push(r);
      return r;
    });
    pending.push(call.catch(() => {}));
    return call;
  };

  for (let i = 0; i < 13; i++) send(billing.origin, '/held');
  for (let i = 0; i < 4; i++) send(search.origin, '/stall');
  await send(ledger.origin, '/ok?size=4000000&session=abc'); // its body is never read
  const streaming = [send(maps.origin, '/feed'), send(maps.origin, '/feed')];
  await Promise.all(streaming);
  for (const r of responses.slice(-2)) r.body.resume(); // read as it trickles in
  for (let i = 0; i < 6; i++) send(maps.origin, '/feed').catch(() => {}); // shed: queue full
  await billing.waitForActive(13);
  await search.waitForActive(4);

  const app = express();
  // stallAfter is 50 of maps' 20 ms chunks: a loaded machine (a CPU hog beside the suite and
  // Chromium starting) once let 200 ms pass between two of them, and maps read as stalled.
  app.get('/status', statusHandler(limiter, { stallAfter: STALL_AFTER_MS, title: 'demo service' }));
  const server = http.createServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  // Traffic after the page's first read, for its rates: more shedding, and some quick calls.
  for (let i = 0; i < 6; i++) send(maps.origin, '/feed').catch(() => {});
  for (let i = 0; i < 5; i++) await (await send(billing.origin, '/ok')).body.dump();

  return {
    limiter,
    maps,
    url: `http://127.0.0.1:${port}/status`,
    detector,
    async close() {
      detector.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      for (const r of responses) r.body.destroy();
      await agent.destroy();
      await Promise.all([...partners.map((p) => p.close()), maps.close()]);
      await Promise.allSettled(pending);
    },
  };
}
