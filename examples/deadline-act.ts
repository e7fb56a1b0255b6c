/**
 * The demo's deadline act: a route with a 300 ms budget fans out to a slow partner. With the
 * early shed, calls that cannot finish in what is left of the budget are refused in
 * microseconds, before they take a queue slot; without it, the same calls queue and fail at
 * the deadline. Self-contained: its own partner, limiter and service; returns its failures.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import express from 'express';
import { request } from 'undici';
import { outbound, shed } from '../middleware/index.js';
import { DeadlineExceededError, DeadlineShedError, HostLimiter } from '../src/index.js';
import { startSimulatedPartner } from './partners.js';

const BUDGET_MS = 300;
const CAP = 4;
const LATENCY_MS: [number, number] = [120, 180];
const REQUESTS = 20;
const FAN_OUT = 6;
/** Inbound requests with a roomy budget before the burst, so the gate knows a typical call. */
const WARM_UP = 2;

interface Pass {
  served: number;
  shed: number;
  timedOut: number;
  /** Time from the call to its failure, ms, per failed call. */
  shedMs: number[];
  timedOutMs: number[];
  partnerSaw: number;
  closedEarly: number;
}

export interface ActOutput {
  write(line: string): void;
  /** Renders rows (the first is the header) as the demo's other tables. */
  table(rows: string[][]): string;
}

/** Runs the act twice (early shed on, then off), prints the comparison, returns failures. */
export async function deadlineAct({ write, table }: ActOutput): Promise<string[]> {
  write(`\nact: a ${BUDGET_MS} ms budget fanning out to a slow partner`);
  write(
    `  ${REQUESTS} requests at once, each calling the partner ${FAN_OUT} times in parallel; the partner ` +
      `takes ${LATENCY_MS[0]}-${LATENCY_MS[1]} ms a call, cap ${CAP}`,
  );
  const failures: string[] = [];
  const on = await runPass(true, failures);
  const off = await runPass(false, failures);
  const rows = [
    [
      'outbound({ deadline })',
      'served',
      'shed early',
      'median to refuse',
      'timed out',
      'median to fail',
      'partner saw',
      'closed early',
    ],
    row('shedEarly: true', on),
    row('shedEarly: false', off),
  ];
  write(table(rows));
  write(
    '  shed early: refused with 503 + Retry-After before taking a queue slot, because the budget left\n' +
      "  was under the gate's expected wait plus the partner's p50 call. timed out: queued or in\n" +
      '  flight when the budget ran out (504); closed early: calls the partner saw aborted mid-answer.',
  );
  if (on.shed === 0) failures.push('deadline act: no call was shed early');
  return failures;
}

function row(label: string, p: Pass): string[] {
  return [
    label,
    String(p.served),
    String(p.shed),
    p.shedMs.length === 0 ? '-' : `${Math.round(median(p.shedMs) * 1000)} µs`,
    String(p.timedOut),
    p.timedOutMs.length === 0 ? '-' : `${Math.round(median(p.timedOutMs))} ms`,
    String(p.partnerSaw),
    String(p.closedEarly),
  ];
}

async function runPass(shedEarly: boolean, failures: string[]): Promise<Pass> {
  const partner = await startSimulatedPartner({ name: 'slow', cap: CAP, latencyMs: LATENCY_MS });
  const limiter = new HostLimiter({
    partners: [
      { name: 'slow', hosts: [partner.url], limit: CAP, maxQueue: 200, queueTimeout: 5000 },
    ],
  });
  const fresh = (): Pass => ({
    served: 0,
    shed: 0,
    timedOut: 0,
    shedMs: [],
    timedOutMs: [],
    partnerSaw: 0,
    closedEarly: 0,
  });
  let pass = fresh();
  const app = express();
  const middleware = outbound({
    limiter,
    deadline: { header: 'x-request-timeout', max: 5000, shedEarly },
  });
  app.use(middleware);
  app.get('/fanout', async (req, res) => {
    const calls = Array.from({ length: FAN_OUT }, async (_, i) => {
      const started = performance.now();
      try {
        const r = await req.outbound.request(`${partner.url}/item/${i}`);
        await r.body.text();
        pass.served++;
      } catch (error) {
        const ms = performance.now() - started;
        if (error instanceof DeadlineShedError) {
          pass.shed++;
          pass.shedMs.push(ms);
        } else if (error instanceof DeadlineExceededError) {
          pass.timedOut++;
          pass.timedOutMs.push(ms);
        } else throw error;
      }
    });
    await Promise.all(calls);
    res.json({ done: true }); // a fan-out that answers with whatever arrived in time
  });
  app.use(shed());
  const server = http.createServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  // Warm-up with a roomy budget: the gate learns the partner's typical call time.
  await Promise.all(Array.from({ length: WARM_UP }, () => get(`${base}/fanout`, 5000)));
  if (pass.served !== WARM_UP * FAN_OUT) failures.push('deadline act: the warm-up lost calls');
  pass = fresh();
  await Promise.all(Array.from({ length: REQUESTS }, () => get(`${base}/fanout`, BUDGET_MS)));

  // Wind down: aborted calls return their permits once their connections are down.
  const gate = limiter.gate('slow')!;
  for (let i = 0; i < 200 && (gate.held > 0 || partner.counts().active > 0); i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const counts = partner.counts();
  pass.partnerSaw = counts.served + counts.closedEarly - WARM_UP * FAN_OUT;
  pass.closedEarly = counts.closedEarly;
  const s = gate.stats();
  const mode = shedEarly ? 'shedEarly' : 'no early shed';
  if (counts.peak > CAP)
    failures.push(`deadline act (${mode}): partner saw ${counts.peak} > cap ${CAP}`);
  if (counts.refused > 0)
    failures.push(`deadline act (${mode}): partner refused ${counts.refused}`);
  if (s.held !== 0 || s.queued !== 0 || s.acquired !== s.released) {
    failures.push(
      `deadline act (${mode}): ${s.held} held, ${s.queued} queued, ${s.acquired} granted, ${s.released} released`,
    );
  }
  if (pass.served + pass.shed + pass.timedOut !== REQUESTS * FAN_OUT) {
    failures.push(`deadline act (${mode}): calls unaccounted for`);
  }
  server.closeAllConnections();
  server.close();
  await middleware.close();
  await partner.close();
  return pass;
}

async function get(url: string, budgetMs: number): Promise<void> {
  const r = await request(url, { headers: { 'x-request-timeout': String(budgetMs) } });
  await r.body.text();
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}
