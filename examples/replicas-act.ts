/**
 * The demo's second act: three replicas of a service call billing (cap 20). With a limit of 20
 * in each process, billing sees up to three times its cap; with the cap shared through Redis,
 * at most 20. Uses the Redis at `REDIS_URL` when it is set (keys under a prefix of this run's
 * own, `hostgate-demo:<pid>-<time>:`); else starts a private `redis-server` from the PATH on a
 * free port, and skips with one line without one.
 */

import { createClient } from 'redis';
import { forkWorker, killAllWorkers, type Worker } from '../bench/lib/fleet.js';
import { redisMissing, startRedis } from '../bench/lib/redis-server.js';
import { type PartnerCounts, startSimulatedPartner } from './partners.js';

const REPLICAS = 3;
const CAP = 20;
/** Per replica: enough callers to keep more than the cap busy, and a bounded run. */
const CALLERS = 30;
const REQUESTS = 150;

type Mode = 'per-process' | 'shared';

interface Done {
  served: number;
  refused: number;
  failed: number;
  firstError?: string;
}

async function round(workers: readonly Worker[], mode: Mode) {
  // Billing's contract says 20; this one serves whatever arrives and counts it, so the peak
  // shows how far past the contract the replicas went.
  const partner = await startSimulatedPartner({
    name: 'billing',
    cap: REPLICAS * CAP,
    latencyMs: [20, 60],
  });
  try {
    for (const w of workers) w.send({ type: 'go', mode, partnerUrl: partner.url });
    const done = await Promise.all(workers.map((w) => w.next<Done>('done', 30_000)));
    const seen: PartnerCounts = partner.counts();
    const firstError = done.find((d) => d.firstError !== undefined)?.firstError;
    return { seen, failed: done.reduce((n, d) => n + d.failed, 0), firstError };
  } finally {
    await partner.close();
  }
}

/** A Redis URL fit for a report: its password (and user) replaced. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    if (parsed.username !== '' && parsed.username !== 'default') parsed.username = '***';
    return parsed.toString();
  } catch {
    return '(an unparsable REDIS_URL)';
  }
}

/** The user's Redis (`REDIS_URL`) or a private one; `undefined` with the reason it has none. */
async function redisForAct(
  write: (line: string) => void,
): Promise<{ url: string; close: () => Promise<unknown> } | string | undefined> {
  const userUrl = process.env.REDIS_URL;
  if (userUrl !== undefined && userUrl !== '') {
    // Reached before any replica starts, so a wrong URL is one clear line, not three crashes.
    const client = createClient({
      url: userUrl,
      socket: { connectTimeout: 3000, reconnectStrategy: false },
    });
    client.on('error', () => {}); // the connect() rejection below reports it
    try {
      await client.connect();
      await client.ping();
    } catch (error) {
      return `REDIS_URL (${redactUrl(userUrl)}) did not answer: ${(error as Error).message}`;
    } finally {
      if (client.isOpen) await client.close();
    }
    write(`  using your Redis at REDIS_URL (${redactUrl(userUrl)})`);
    return { url: userUrl, close: async () => {} };
  }
  if (redisMissing !== undefined) {
    write(
      `  skipped: ${redisMissing} (install redis-server, or set REDIS_URL, to see replicas share one cap)`,
    );
    return undefined;
  }
  return startRedis();
}

/** Runs the act, writing its report; resolves with the invariants it found broken. */
export async function replicasAct(write: (line: string) => void): Promise<string[]> {
  write(`\nact: ${REPLICAS} replicas of a service call billing (cap ${CAP})`);
  const redis = await redisForAct(write);
  if (redis === undefined) return [];
  if (typeof redis === 'string') return [`replicas: ${redis}`];
  const failures: string[] = [];
  // A prefix of this run's own: on a Redis you already run, nothing of yours is touched, and
  // two demos at once do not share a gate.
  const prefix = `hostgate-demo:${process.pid}-${Date.now()}:`;
  try {
    const workers = Array.from({ length: REPLICAS }, () =>
      forkWorker(new URL('./replica.ts', import.meta.url), {
        redisUrl: redis.url,
        prefix,
        cap: CAP,
        callers: CALLERS,
        requests: REQUESTS,
      }),
    );
    await Promise.all(workers.map((w) => w.next('ready', 30_000)));
    const local = await round(workers, 'per-process');
    const shared = await round(workers, 'shared');
    for (const w of workers) w.send({ type: 'close' });
    await Promise.all(workers.map((w) => w.exited));

    const rows = [
      ['limit', 'peak seen at billing', 'served'],
      [`${CAP} in each process`, `${local.seen.peak} (${CAP} allowed)`, local.seen.served],
      [`${CAP} shared via Redis`, `${shared.seen.peak} (${CAP} allowed)`, shared.seen.served],
    ].map((r) => r.map(String));
    const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
    for (const r of rows) {
      write(
        `  ${r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ')}`,
      );
    }
    write(
      `  ${REPLICAS} processes × ${CALLERS} callers × ${REQUESTS} calls each time. A limit per process\n` +
        `  lets billing see up to ${REPLICAS} × ${CAP} at once; one cap shared through Redis, ${CAP}.`,
    );
    if (shared.seen.peak > CAP) {
      failures.push(
        `replicas: billing saw ${shared.seen.peak} at once with a shared cap of ${CAP}`,
      );
    }
    // A call that waited past its deadline on an overloaded machine is not a broken cap.
    for (const [what, r] of [
      ['per process', local],
      ['shared', shared],
    ] as const) {
      if (r.failed > 0) write(`  ${what}: ${r.failed} calls failed (first: ${r.firstError})`);
    }
  } finally {
    await killAllWorkers();
    await redis.close();
  }
  return failures;
}
