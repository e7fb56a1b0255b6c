/**
 * The demo's second act: three replicas of a service call billing (cap 20). With a limit of 20
 * in each process, billing sees up to three times its cap; with the cap shared through Redis,
 * at most 20. Needs `redis-server` on the
 * PATH (a private one is started on a free port); skips with one line without it.
 */
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

/** Runs the act, writing its report; resolves with the invariants it found broken. */
export async function replicasAct(write: (line: string) => void): Promise<string[]> {
  write(`\nact: ${REPLICAS} replicas of a service call billing (cap ${CAP})`);
  if (redisMissing !== undefined) {
    write(`  skipped: ${redisMissing} (install redis-server to see replicas share one cap)`);
    return [];
  }
  const redis = await startRedis();
  const failures: string[] = [];
  try {
    const workers = Array.from({ length: REPLICAS }, () =>
      forkWorker(new URL('./replica.ts', import.meta.url), {
        redisUrl: redis.url,
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
