import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type express from 'express';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { prng } from '../helpers/prng.js';
import { expressVersions, jsonParser, Signals, until, watchProcess } from './helpers.js';

const CLIENTS = 1000;
const CAP = 20;
const DISCONNECT_SHARE = 0.2;

/** A counter whose `zero()` resolves when it next reaches 0 (or now). */
class Counter {
  #n = 0;
  #waiters: (() => void)[] = [];
  up() {
    this.#n++;
  }
  down() {
    if (--this.#n === 0) for (const w of this.#waiters.splice(0)) w();
  }
  get value() {
    return this.#n;
  }
  zero(): Promise<void> {
    return this.#n === 0 ? Promise.resolve() : new Promise((r) => this.#waiters.push(r));
  }
}

describe.each(expressVersions)('burst on %s', (_name, makeApp) => {
  let partner: Partner;
  let proc: ReturnType<typeof watchProcess>;
  beforeEach(async () => {
    proc = watchProcess();
    partner = await startPartner();
  });
  afterEach(async () => {
    await partner.close();
    proc.stop();
  });

  test(`${CLIENTS} concurrent requests, partner cap ${CAP}, ${DISCONNECT_SHARE * 100}% of clients hang up`, async () => {
    const limiter = new HostLimiter({
      partners: [
        { name: 'partner', hosts: [partner.origin], limit: CAP, maxQueue: 400, queueTimeout: 3000 },
      ],
    });
    const gate = limiter.gate('partner')!;
    const mw = outbound({ limiter });
    const openResponses = new Counter();
    const handlers = new Counter();
    const entered = new Signals<void>();
    const hangers = new Set<string>();
    const random = prng(0x10ad);
    for (let i = 0; i < CLIENTS; i++) if (random() < DISCONNECT_SHARE) hangers.add(String(i));
    const app = makeApp();
    app.use((_req, res, next) => {
      openResponses.up();
      res.once('close', () => openResponses.down());
      next();
    });
    app.use(mw);
    const handle = (
      req: express.Request,
      res: express.Response,
      next: express.NextFunction,
      id: string,
    ) => {
      handlers.up();
      entered.resolve(id);
      // Clients that will hang up ask for /held: the partner keeps it open until they do, so
      // every one of them really leaves mid-request (waiting for a permit, or at the partner).
      const url = hangers.has(id)
        ? `${partner.url}/held`
        : `${partner.url}/ok?delay=${1 + (Number(id) % 15)}`;
      const call =
        Number(id) % 2
          ? req.outbound.fetch(url).then((r) => r.text())
          : req.outbound.request(url).then((r) => r.body.text());
      call
        .then(
          (text) => res.send(text),
          (error: unknown) => next(error),
        )
        .finally(() => handlers.down());
    };
    app.get('/r', (req, res, next) => handle(req, res, next, String(req.query.id)));
    app.post('/r', jsonParser(makeApp), (req, res, next) =>
      handle(req, res, next, String(req.body.id)),
    );
    app.use(shed());

    const server = http.createServer(app);
    server.listen({ port: 0, host: '127.0.0.1', backlog: 2048 });
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;

    // The gate's invariant, sampled all through the burst.
    const violations: string[] = [];
    const sampler = setInterval(() => {
      const s = gate.stats();
      if (s.held > s.limit || s.held + s.available !== s.limit || s.queued > s.maxQueue) {
        violations.push(JSON.stringify(s));
      }
    }, 2);

    const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
    const outcomes = { ok: 0, shed: 0, hungUp: 0, other: 0 };
    let shedHangers = 0;
    try {
      await Promise.all(
        Array.from({ length: CLIENTS }, (_, i) => {
          const id = String(i);
          const hangUp = hangers.has(id);
          const post = i % 3 === 0;
          return new Promise<void>((resolve) => {
            let settled = false;
            const finish = (kind: keyof typeof outcomes) => {
              if (settled) return;
              settled = true;
              outcomes[kind]++;
              if (hangUp && kind === 'shed') shedHangers++;
              resolve();
            };
            const req = http.request(
              {
                host: '127.0.0.1',
                port,
                path: post ? '/r' : `/r?id=${id}`,
                method: post ? 'POST' : 'GET',
                agent,
                headers: post ? { 'content-type': 'application/json' } : {},
              },
              (res) => {
                res.resume();
                res.on('end', () =>
                  finish(res.statusCode === 200 ? 'ok' : res.statusCode === 503 ? 'shed' : 'other'),
                );
                res.on('error', () => finish('hungUp'));
              },
            );
            req.on('error', () => finish(settled ? 'other' : 'hungUp'));
            req.end(post ? JSON.stringify({ id }) : undefined);
            if (hangUp) {
              // Hang up once the server is handling the request, at a random moment of it
              // (waiting for a permit, or at the partner).
              entered.wait(id).then(() =>
                setTimeout(() => {
                  if (settled) return;
                  req.destroy();
                  finish('hungUp');
                }, random() * 20),
              );
            }
          });
        }),
      );
      // Every inbound response closed and every route handler's outbound call settled.
      await openResponses.zero();
      await handlers.zero();
      // A fetch rejects as soon as it is cancelled; its permit follows once undici has closed
      // the socket and the partner has seen it (afterTeardown): a few turns later.
      await until(() => gate.held === 0 && partner.active === 0, 'idle');
    } finally {
      clearInterval(sampler);
      agent.destroy();
      server.closeAllConnections();
      server.close();
      await mw.close();
    }

    expect(outcomes.ok + outcomes.shed + outcomes.hungUp + outcomes.other).toBe(CLIENTS);
    expect(outcomes.other).toBe(0);
    // A hanging-up client either left mid-request or was shed (503) before it could.
    expect(outcomes.hungUp).toBeGreaterThan(hangers.size / 2);
    expect(outcomes.hungUp + shedHangers).toBe(hangers.size);
    expect(outcomes.ok + outcomes.shed - shedHangers).toBe(CLIENTS - hangers.size);
    expect(outcomes.ok).toBeGreaterThan(0);
    expect(violations).toEqual([]);
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    expect(partner.active).toBe(0);
    const s = gate.stats();
    expect({ held: s.held, queued: s.queued, available: s.available }).toEqual({
      held: 0,
      queued: 0,
      available: CAP,
    });
    expect(s.acquired).toBe(s.released);
    expect(s.doubleReleases).toBe(0);
    expectInvariant(gate);
    expect(proc.rejections).toEqual([]);
    expect(proc.warnings).toEqual([]);
    // Bounded by its 1,000 clients, not by time: 3 s quiet, 20 s (the default bound) ran out
    // once at load 13; the bound is for a hang.
  }, 90_000);
});
