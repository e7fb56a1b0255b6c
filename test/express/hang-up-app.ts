/**
 * The app of hang-up-quiet.test.ts, run in its own process (bundled, plain node, NODE_ENV unset
 * so Express's final handler logs as in production) so that its stderr is the app's alone:
 * docs/node-http.md's pattern, `signal: req.outbound.signal` handed to axios or got (through a
 * LimitedHttpAgent) or `req.outbound.fetch`, errors to `next(error)` (Express) or thrown
 * (Fastify, its logger on stderr at `warn`), and hostgate's `shed()` or plugin after them.
 *
 * argv: framework (`express5`, `express4`, `fastify`), the partner's origin. IPC out:
 * `{ port }` once listening, `{ passed: client }` each time a route handed an error on,
 * `{ idle: true }` when told `'idle'` and the gate holds no permit, `{ stats }` when told `'exit'`;
 * then it closes everything and exits by itself.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import axios from 'axios';
import express5 from 'express';
import express4 from 'express4';
import Fastify from 'fastify';
import hostgate from '../../fastify/index.js';
import { type Outbound, outbound, shed } from '../../middleware/index.js';
import { HostLimiter, LimitedHttpAgent } from '../../src/index.js';
import { got } from '../helpers/got.js';

const [framework, origin] = process.argv.slice(2) as [string, string];
const send = (message: object) => process.send?.(message);

const limiter = new HostLimiter({
  partners: [{ name: 'billing', hosts: [origin], limit: 2, maxQueue: 0 }],
});
const agent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
let disconnects = 0;
const onDisconnect = () => {
  disconnects++;
};

/** One outbound call with `client`, cancelled by the request's own signal. */
async function call(
  client: string,
  signal: AbortSignal,
  fetchFn: Outbound['fetch'],
): Promise<string> {
  const url = `${origin}/held`;
  if (client === 'axios') return (await axios.get(url, { httpAgent: agent, signal })).data;
  if (client === 'got') {
    return got(url, { agent: { http: agent }, signal, retry: { limit: 0 } }).text();
  }
  return (await fetchFn(url)).text();
}

let close: () => Promise<void>;
let port: number;
if (framework === 'fastify') {
  const app = Fastify({ logger: { level: 'warn', stream: process.stderr } });
  await app.register(hostgate, { limiter, shed: { onDisconnect } });
  app.get<{ Querystring: { client: string } }>('/call', async (request) => {
    try {
      return await call(request.query.client, request.outbound.signal, request.outbound.fetch);
    } catch (error) {
      send({ passed: request.query.client });
      throw error;
    }
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  port = (app.server.address() as AddressInfo).port;
  close = () => app.close();
} else {
  const express = (framework === 'express4' ? express4 : express5) as typeof express5;
  const app = express();
  const middleware = outbound({ limiter });
  app.use(middleware);
  app.get('/call', async (req, res, next) => {
    const client = String(req.query.client);
    try {
      res.send(await call(client, req.outbound.signal, req.outbound.fetch));
    } catch (error) {
      next(error);
      send({ passed: client });
    }
  });
  app.use(shed({ onDisconnect }));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  port = (server.address() as AddressInfo).port;
  close = async () => {
    await new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
    await middleware.close();
  };
}

process.on('message', async (message) => {
  if (message === 'idle') {
    await limiter.gate('billing')!.onIdle(); // every permit back: the next calls get one
    send({ idle: true });
    return;
  }
  if (message !== 'exit') return;
  await close();
  agent.destroy();
  await limiter.close();
  const { held, acquired, released } = limiter.gate('billing')!.stats();
  send({ stats: { held, acquired, released, disconnects } });
  process.disconnect(); // then the process ends once nothing is left pending: stderr is complete
});
send({ port });
