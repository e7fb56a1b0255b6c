import http from 'node:http';
import type https from 'node:https';
import { describe } from '../common/options.js';
import { HostLimiter, type HostLimiterOptions } from '../partners/host-limiter.js';
import { type AddRequest, failUnsent, GatedNodeRequest, originOf } from './gated-node-request.js';

/** What LimitedHttpAgent needs of the agent it wraps: `http.Agent`, `https.Agent`, a proxy agent. */
export interface WrappedHttpAgent {
  addRequest?: unknown;
  destroy(): void;
}

/**
 * What node:http reads from a request's agent (protocol check, keep-alive default, ports) and
 * what pool-watching code reads (the AWS SDK's socket warning): the wrapped agent's own, live.
 */
const MIRRORED = [
  'protocol',
  'defaultPort',
  'keepAlive',
  'keepAliveMsecs',
  'maxSockets',
  'maxFreeSockets',
  'maxTotalSockets',
  'totalSocketCount',
  'options',
  'sockets',
  'freeSockets',
  'requests',
] as const;

/**
 * A node:http agent that gives every request a permit of its partner's gate before the agent it
 * wraps gives it a socket, and holds it until the response has ended, failed or been aborted:
 * `LimitedAgent` for the clients that take an `http.Agent` (axios's `httpAgent`/`httpsAgent`,
 * got's `agent`, the AWS SDK's `NodeHttpHandler`, `http.request` itself), against the same
 * `HostLimiter`, so that one cap holds per partner whichever client calls it.
 *
 * It wraps an agent rather than being one: keep-alive, `maxSockets`, TLS options, proxies stay
 * with the agent you pass in (`http.Agent`, `https.Agent`, a proxy agent), and one class serves
 * http and https (the wrapped agent's `protocol`). A request the gate sheds fails with
 * `QueueFullError` / `QueueTimeoutError` as its 'error' event (the client's rejection); a
 * request destroyed while it waits (`req.destroy()`, an AbortSignal, axios's `signal`, got's
 * `cancel()`) leaves the queue at once; one destroyed in flight returns its permit once its
 * socket is closed. `destroy()` destroys the wrapped agent.
 *
 * @example
 * const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 20 }] });
 * const httpsAgent = new LimitedHttpAgent(new https.Agent({ keepAlive: true }), limiter);
 * const billing = axios.create({ baseURL: 'https://api.billing.example', httpsAgent });
 */
export class LimitedHttpAgent extends http.Agent {
  /** The limiter whose gates this agent takes permits from. */
  readonly limiter: HostLimiter;
  /** The agent that owns the sockets. */
  readonly agent: http.Agent;
  /** The wrapped agent's (`http:` or `https:`): node:http checks it against the URL's. */
  declare readonly protocol: string;
  /** The wrapped agent's keep-alive. */
  declare readonly keepAlive: boolean;
  /** The wrapped agent's options (TLS ones for an https.Agent): typed so it fits where an `https.Agent` goes. */
  declare options: https.AgentOptions;
  readonly #addRequest: AddRequest;

  constructor(agent: http.Agent, limiterOrOptions: HostLimiter | HostLimiterOptions) {
    super();
    const given = agent as unknown as WrappedHttpAgent | null;
    if (
      given === null ||
      typeof given !== 'object' ||
      typeof given.addRequest !== 'function' ||
      typeof given.destroy !== 'function'
    ) {
      throw new TypeError(
        `LimitedHttpAgent: agent must be an http.Agent or https.Agent (or an agent like them), got ${describe(agent)}`,
      );
    }
    if (given instanceof LimitedHttpAgent) {
      throw new TypeError(
        'LimitedHttpAgent: agent is already a LimitedHttpAgent; wrap the agent inside it once',
      );
    }
    this.agent = agent;
    this.limiter =
      limiterOrOptions instanceof HostLimiter
        ? limiterOrOptions
        : new HostLimiter(limiterOrOptions);
    this.#addRequest = (given.addRequest as AddRequest).bind(agent);
    const inner = agent as unknown as Record<string, unknown>;
    for (const key of MIRRORED) {
      Object.defineProperty(this, key, {
        get: () => inner[key],
        set: (value: unknown) => {
          inner[key] = value;
        },
        configurable: true,
        enumerable: true,
      });
    }
  }

  /** @internal node:http's entry point: every request made with this agent comes here. */
  addRequest(req: http.ClientRequest, options: http.RequestOptions): void {
    let gate: ReturnType<HostLimiter['gateFor']>;
    try {
      gate = this.limiter.gateFor(originOf(req, options));
    } catch (error) {
      // 'reject' for an unknown host, every per-origin gate busy: the request fails unsent.
      failUnsent(req, error as Error);
      return;
    }
    if (gate === undefined) {
      this.#addRequest(req, options);
      return;
    }
    new GatedNodeRequest(req, options, this.#addRequest).start(gate);
  }

  override getName(options?: http.ClientRequestArgs): string {
    return this.agent.getName(options);
  }

  override destroy(): void {
    this.agent.destroy();
  }
}
