/**
 * Issue 32, item 1 (leased mode): Redis restarted, with its data after more than a lease, or
 * without it (FLUSHALL) with a newcomer first to run after it: no excess at the partner (it
 * counts its own concurrent requests). Cap 8, 4 processes × 6 callers, lease 3 s.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, it } from 'vitest';
import { describeRedis, type RedisServer, startRedis } from '../helpers/redis-server.js';
import { keepDump, privateRedis } from './clients.js';
import { afterFault, busyFleet, type LeasedFleet } from './leased-fleet.js';

const redis = privateRedis();
const CAP = 8;
const FAULT_MS = 4500;

let fleet: LeasedFleet | undefined;
afterEach(async () => {
  await fleet?.stop();
  fleet = undefined;
  await redis().command('FLUSHALL');
});

const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeRedis('a leased gate when Redis restarts (issue 32)', () => {
  it('Redis restarted with its data after more than a lease (down 4.5 s): no excess when it answers again', async () => {
    // A server of its own: it is replaced by a new process on the same port.
    const first = await startRedis();
    let server: RedisServer = first;
    const dir = mkdtempSync(join(tmpdir(), 'hostgate-leased-restart-'));
    try {
      const f = await busyFleet('restarted', () => server);
      fleet = f;
      // Its data as a restart brings it back: saved, and the file kept past the kill.
      await keepDump(first, dir);
      await first.kill();
      await hold(FAULT_MS);
      server = await startRedis({ port: first.port, args: ['--dir', dir] });
      await afterFault(f, CAP);
    } finally {
      await fleet?.stop();
      fleet = undefined;
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);
  it('FLUSHALL under a busy fleet, a newcomer first to run after it: no excess at the partner', async () => {
    const f = await busyFleet('flushed', redis);
    fleet = f;
    await redis().command('FLUSHALL');
    await f.add(); // a newcomer: nothing tells it a loss from a first use
    await afterFault(f, CAP);
  }, 20_000);
});
