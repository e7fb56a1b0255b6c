/**
 * A leased gate when Redis comes back from a dump older than its state (a restart from its last
 * `save` point, a failover to a replica that lagged): the writes since the dump are lost, the
 * rest is there. Fault campaign (stop 52), leased seed 130015: the partner at 4 at cap 3 after
 * such a restart. Judged at the partner, which counts its own concurrent requests.
 *
 * The race: process A held the whole cap when the dump was written, then gave it back, and B
 * took it; Redis comes back counting A's block, not B's. A's next refresh, its demand back, is
 * answered as if A's block were still its own and B held nothing: 4-6 at the partner, 3 runs in
 * 4, before stop 52 (commands/leasedRefresh-4.lua, Lost writes).
 *
 * The race stop 52 left open: A's last answer predates the dump and its entry is intact, so A,
 * refreshing first after the restart, sees neither lost writes of its own nor a state behind
 * its answer, and grows into the units B took after the dump. Since stop 53 the script tells a
 * restart by Redis's run_id (commands/includes/leasedGap.lua).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { type LeasedSemaphore, type RedisStore, redisStore } from '../../src/redis/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis, type RedisServer, startRedis } from '../helpers/redis-server.js';
import { caller, Fleet, keepDump, type TestClient, untilAsync } from './clients.js';

const CAP = 3;
const LEASE_MS = 3000;

const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Scene {
  partner: Partner;
  /** The Redis now (the restarted one after `restart()`). */
  server(): RedisServer;
  /** Process A, and B (its client back `reconnectMs` after it lost Redis, if given). */
  a: LeasedSemaphore;
  b: LeasedSemaphore;
  call(gate: LeasedSemaphore, path: string): Promise<unknown>;
  /** SAVE now and keep the dump. */
  save(): Promise<void>;
  /** SIGKILL Redis and start it again from the dump. */
  restart(): Promise<void>;
  /** Blocks of the gate's entries, as Redis holds them. */
  blocks(): Promise<number[]>;
  /** A's client, answering again. */
  aBack(): Promise<void>;
}

/** Two leased processes under 'reject' on one gate (cap 3, lease 3 s) of a Redis of their own. */
async function staleScene(
  name: string,
  bReconnectMs: number | undefined,
  test: (scene: Scene) => Promise<void>,
): Promise<void> {
  const first = await startRedis();
  let server: RedisServer = first;
  const dir = mkdtempSync(join(tmpdir(), 'hostgate-leased-stale-'));
  const partner = await startPartner();
  const fleet = new Fleet('node-redis', () => server);
  const calls: Promise<unknown>[] = [];
  const clients: TestClient[] = [];
  const stores: RedisStore[] = [];
  try {
    const gate = async (reconnectMs?: number): Promise<LeasedSemaphore> => {
      const client = await fleet.client(reconnectMs === undefined ? {} : { reconnectMs });
      clients.push(client);
      const store = redisStore({
        client: client.client,
        prefix: 'test:',
        commandTimeoutMs: 300,
        onStoreError: 'reject',
      });
      stores.push(store);
      return store.semaphore({
        name,
        limit: CAP,
        mode: 'leased',
        leaseMs: LEASE_MS,
        refreshMs: 1000,
        queueTimeout: 20_000,
      });
    };
    const a = await gate();
    const b = await gate(bReconnectMs);
    const pong = (c: TestClient) =>
      c.ping().then(
        (r) => r === 'PONG',
        () => false,
      );
    try {
      await test({
        partner,
        server: () => server,
        a,
        b,
        call: caller(partner, calls),
        save: () => keepDump(first, dir),
        async restart() {
          await first.kill();
          server = await startRedis({ port: first.port, args: ['--dir', dir] });
        },
        async blocks() {
          const flat = (await server.command('HGETALL', `test:{${name}}:l`)) as string[];
          return flat.flatMap((v, i) =>
            i % 2 === 1 && !flat[i - 1]!.startsWith('_') ? [Number(v.split(' ')[1])] : [],
          );
        },
        aBack: () => untilAsync(() => pong(clients[0]!), "A's client back"),
      });
    } finally {
      partner.openHeld();
      await Promise.all(stores.map((s) => s.close()));
    }
  } finally {
    await Promise.all(calls);
    await fleet.closeAll();
    await partner.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The partner never over the cap for a lease and a second, and B's calls still there. */
async function capHolds(partner: Partner): Promise<void> {
  const end = performance.now() + LEASE_MS + 1000;
  while (performance.now() < end) {
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    await hold(10);
  }
  expect(partner.active).toBe(CAP);
}

describeRedis('a leased gate back from a stale dump', () => {
  it('the cap holds at the partner when Redis restarts from a dump older than its state (the stale dump race)', async () => {
    await staleScene('stale', undefined, async (s) => {
      const { partner, a, b, call } = s;
      // A holds the whole cap; the dump is written then.
      const firstCalls = [call(a, '/held'), call(a, '/held'), call(a, '/held')];
      await partner.waitForActive(CAP);
      await untilAsync(async () => a.block === CAP, "A's block of the whole cap");
      await s.save();
      // A gives it back and B takes it (written after the dump: lost with the restart).
      partner.release();
      await Promise.all(firstCalls);
      for (let i = 0; i < CAP; i++) void call(b, '/held');
      await partner.waitForActive(CAP);
      await untilAsync(async () => b.block === CAP, "B's block of the whole cap");
      expect((await s.blocks()).length).toBe(2);
      // Redis restarts from the dump (A's block of 3 is back, B's is gone) just after B's timer
      // refreshed, so that A's demand, back at once, is the first to refresh after it (B's
      // refresh would tell Redis what B holds).
      const entries = () => s.server().command('HGETALL', `test:{stale}:l`);
      const was = JSON.stringify(await entries());
      await untilAsync(async () => JSON.stringify(await entries()) !== was, "B's next refresh");
      await s.restart();
      expect(Math.max(...(await s.blocks()))).toBe(CAP);
      partner.resetPeak();
      // A's demand is back; B still holds the cap at the partner.
      for (let i = 0; i < CAP; i++) void call(a, '/held');
      await capHolds(partner);
    });
  }, 20_000);

  it('the cap holds when the first to refresh after a restart from a stale dump had its last answer before the dump (the restart race: no sign but the server)', async () => {
    // B's client is back 3 s after the restart (a slow reconnect), so A refreshes first.
    await staleScene('race', 3000, async (s) => {
      const { partner, a, b, call } = s;
      // Each makes a call (an entry each) and gives its unit back; the dump is written after
      // A's last answer, with nothing held in it.
      const firstCalls = [call(a, '/held'), call(b, '/held')];
      await partner.waitForActive(2);
      partner.release();
      await Promise.all(firstCalls);
      await untilAsync(async () => a.block === 0 && b.block === 0, 'both blocks given back');
      await s.save();
      // B takes the whole cap after the dump (lost with the restart); A's entry is intact.
      for (let i = 0; i < CAP; i++) void call(b, '/held');
      await partner.waitForActive(CAP);
      await untilAsync(async () => b.block === CAP, "B's block of the whole cap");
      // Redis restarts from the dump at once, quicker than a refresh and a command timeout (no
      // outage to its processes).
      await s.restart();
      expect(await s.blocks()).toEqual([0, 0]);
      await s.aBack();
      partner.resetPeak();
      // A's demand comes; B still holds the cap at the partner.
      for (let i = 0; i < CAP; i++) void call(a, '/held');
      await capHolds(partner);
    });
  }, 20_000);
});
