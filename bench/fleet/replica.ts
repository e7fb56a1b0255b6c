/**
 * One replica of the fleet benchmark: its own Redis client, store and process id, `callers`
 * loops that take a permit, call the partner (20–50 ms) and give it back, but only while the
 * schedule says its half of the fleet is busy. Bundled to plain JavaScript by bench/fleet.ts
 * and forked with a small heap: fifty of them share two cores.
 *
 * Messages: → ready { processId }, ← run { phases }, → done { grants per phase, waits, errors }.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { Semaphore } from '../../src/gate/semaphore.js';
import { fromParent, leaveParent, toParent, workerConfig } from '../lib/fleet.js';
import { createGate, type GateConfig, type SharedGate } from '../shared/gates.js';

export interface ReplicaConfig extends GateConfig {
  partnerPort: number;
  callers: number;
  /** Which half of the fleet this replica is in (0 or 1). */
  half: 0 | 1;
  seed: number;
  /** Every call takes this long (ms) instead of 20–50 ms (the steady phase: 30). */
  delayMs?: number;
  /**
   * A baseline instead of `lib`'s gate (bench/fleet/steady.ts): `'none'` no gate at all,
   * `'local'` a local Semaphore of `cap` permits in this process alone (a static split).
   */
  baseline?: 'none' | 'local';
}

/** A stretch of the run: until `end` (epoch ms), which halves are busy. */
export interface Phase {
  end: number;
  busy: 'all' | 'none' | 0 | 1;
}

export interface ReplicaResult {
  /** [epoch ms, permits held] every 50 ms (hostgate only): the gate's own utilization. */
  held: [number, number][];
  grants: number[];
  /** Waits (ms) of a sample of grants, per phase. */
  waits: number[][];
  errors: number;
  firstError?: string;
}

const MAX_WAITS = 4000;
const config = workerConfig<ReplicaConfig>();
const gate = config.baseline === undefined ? await createGate(config) : baselineGate(config);
// Idle sockets closed before the partner's 5 s keep-alive timeout would close them under a
// request (a half of the fleet idles 5 s at a time).
const agent = new http.Agent({ keepAlive: true, maxSockets: config.callers, timeout: 2000 });
let seed = config.seed >>> 0 || 1;
const random = () => {
  seed = (seed * 1664525 + 1013904223) >>> 0;
  return seed / 2 ** 32;
};

function call(delay: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port: config.partnerPort, path: `/ok?delay=${delay}`, agent },
      (res) => {
        res.resume();
        res.on('end', resolve);
        res.on('error', reject);
      },
    );
    req.on('error', reject);
  });
}

/** No gate (a permit is nothing), or a local gate of `cap` permits: what the fleet does unshared. */
function baselineGate(c: ReplicaConfig): SharedGate {
  if (c.baseline === 'none') {
    return { held: () => 0, acquire: async () => async () => {}, close: async () => {} };
  }
  const local = new Semaphore({ limit: c.cap, maxQueue: 10_000, queueTimeout: 120_000 });
  return {
    held: () => local.held,
    async acquire() {
      const permit = await local.acquire();
      return async () => permit.release();
    },
    close: async () => {},
  };
}

await toParent({ type: 'ready', processId: gate.processId });
const { phases } = await fromParent<{ phases: Phase[] }>('run');
const result: ReplicaResult = {
  held: [],
  grants: phases.map(() => 0),
  waits: phases.map(() => []),
  errors: 0,
};
const end = phases[phases.length - 1]!.end;
const phaseAt = (now: number) => phases.findIndex((p) => now < p.end);
const busy = (i: number) => {
  const b = phases[i]?.busy;
  return b === 'all' || b === config.half;
};

async function caller(): Promise<void> {
  for (let now = Date.now(); now < end; now = Date.now()) {
    const i = phaseAt(now);
    if (!busy(i)) {
      await new Promise((r) => setTimeout(r, Math.max(1, phases[i]!.end - now)));
      continue;
    }
    const asked = performance.now();
    let release: (() => Promise<void>) | undefined;
    try {
      release = await gate.acquire();
      const waits = result.waits[i]!;
      if (waits.length < MAX_WAITS) waits.push(performance.now() - asked);
      result.grants[i]!++;
      await call(config.delayMs ?? 20 + Math.floor(random() * 31));
    } catch (error) {
      result.errors++;
      result.firstError ??= String(error);
    }
    await release?.().catch(() => undefined);
  }
}

const heldNow = gate.held;
const sampler =
  heldNow === undefined
    ? undefined
    : setInterval(() => result.held.push([Date.now(), heldNow()]), 50);
await Promise.all(Array.from({ length: config.callers }, caller));
clearInterval(sampler);
await toParent({ type: 'done', ...result });
await fromParent('close');
await gate.close();
agent.destroy();
await toParent({ type: 'closed' });
leaveParent();
process.exit(0);
