/** The limiters side by side: fixed, hostgate AIMD and gradient, and the Netflix ports. */
import { Agent, type Dispatcher } from 'undici';
import { AdaptiveController } from '../../src/adaptive/controller.js';
import { parseAdaptive } from '../../src/adaptive/options.js';
import { attachController } from '../../src/adaptive/signals.js';
import { HostLimiter, limitHosts, type Semaphore } from '../../src/index.js';
import { prng } from '../../test/helpers/prng.js';
import type { Contender, ContenderKind } from '../overload/driver.js';
import { Gradient2Port, VegasPort } from './netflix.js';

export type AdaptiveKind = 'fixed' | 'aimd' | 'gradient' | 'gradient2' | 'vegas';

export const ADAPTIVE_LABEL: Record<AdaptiveKind, string> = {
  fixed: 'fixed limit',
  aimd: 'hostgate AIMD',
  gradient: 'hostgate gradient',
  gradient2: 'Netflix Gradient2 (port)',
  vegas: 'Netflix Vegas (port)',
};

export interface GateOptions {
  /** The contract: a fixed gate's limit, an adaptive gate's ceiling. */
  contract: number;
  maxQueue: number;
  queueTimeout: number;
  /** Adaptive gates start here (Netflix's default initial limit is 20). */
  initial?: number;
  /** Queue discipline option passed through to the partner rule, if any. */
  extra?: Record<string, unknown>;
}

const AGENT = { keepAliveTimeout: 10_000, keepAliveMaxTimeout: 10_000 } as const;

export interface AdaptiveContender extends Contender {
  name: AdaptiveKind;
  gate: Semaphore;
}

export function makeAdaptiveContender(
  kind: AdaptiveKind,
  origin: string,
  options: GateOptions,
  seed = 1,
): AdaptiveContender {
  const initial = Math.min(options.contract, options.initial ?? 20);
  const builtIn = kind === 'aimd' || kind === 'gradient';
  const limiter = new HostLimiter({
    partners: [
      {
        name: 'partner',
        hosts: [origin],
        limit: options.contract,
        maxQueue: options.maxQueue,
        queueTimeout: options.queueTimeout,
        ...(builtIn ? { adaptive: { algorithm: kind, min: 1, initial } } : {}),
        ...options.extra,
      },
    ],
    unknownHosts: 'reject',
  });
  const gate = limiter.gate('partner')!;
  if (kind === 'gradient2' || kind === 'vegas') {
    const resolved = parseAdaptive('bench', { min: 1, initial }, options.contract)!;
    const bounds = { min: 1, max: options.contract, initial };
    const port = kind === 'vegas' ? new VegasPort(bounds, prng(seed)) : new Gradient2Port(bounds);
    attachController(new AdaptiveController(gate, resolved, port));
  }
  const agent = new Agent(AGENT);
  const dispatcher: Dispatcher = agent.compose(limitHosts(limiter));
  const problems = (idle: boolean) => {
    const s = gate.stats();
    const out: string[] = [];
    if (s.held > options.contract) out.push(`held ${s.held} > contract ${options.contract}`);
    if (s.doubleReleases !== 0) out.push(`${s.doubleReleases} double releases`);
    if (idle && (s.held !== 0 || s.queued !== 0)) out.push(`not idle: held ${s.held}`);
    return out;
  };
  return {
    name: kind,
    kind: 'hostgate' as ContenderKind,
    permits: options.contract,
    dispatcher,
    submit: (fn) => fn(),
    queued: () => gate.queued,
    checkNow: () => problems(false),
    checkIdle: () => problems(true),
    gate,
    close: async () => {
      await agent.close().catch(() => undefined);
    },
  };
}
