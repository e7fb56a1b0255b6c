/**
 * One process of the shared-gate benchmark: `callers` loops, each taking a permit from the
 * shared gate, calling the partner, giving the permit back, until the parent's deadline.
 *
 * Messages: → ready, ← go { deadline (epoch ms) }, → stopped, ← close, → result.
 */
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { fromParent, leaveParent, toParent, workerConfig } from '../lib/fleet.js';
import { createGate, type GateConfig } from './gates.js';

export interface WorkerConfig extends GateConfig {
  callers: number;
  partnerUrl: string;
  holdMs: number;
}

export interface WorkerResult {
  grants: number;
  errors: number;
  /** Wait of every grant, ms (from asking to holding). */
  waits: number[];
  firstError?: string;
}

const config = workerConfig<WorkerConfig>();
const gate = await createGate(config);
const dispatcher = new Agent({ connections: config.callers, pipelining: 1 });
const go = fromParent<{ type: 'go'; deadline: number }>('go');
const closing = fromParent('close');
await toParent({ type: 'ready' });
const { deadline } = await go;

const result: WorkerResult = { grants: 0, errors: 0, waits: [] };
const url = `${config.partnerUrl}/ok?delay=${config.holdMs}`;

async function caller(): Promise<void> {
  while (Date.now() < deadline) {
    const asked = performance.now();
    let release: (() => Promise<void>) | undefined;
    try {
      release = await gate.acquire();
      result.waits.push(performance.now() - asked);
      result.grants++;
      const response = await request(url, { dispatcher });
      await response.body.dump();
    } catch (error) {
      result.errors++;
      result.firstError ??= String(error);
    }
    try {
      await release?.();
    } catch (error) {
      result.errors++;
      result.firstError ??= `release: ${String(error)}`;
    }
  }
}

await Promise.all(Array.from({ length: config.callers }, caller));
await toParent({ type: 'stopped' });
await closing;
await gate.close();
await dispatcher.close();
await toParent({ type: 'result', ...result });
leaveParent();
