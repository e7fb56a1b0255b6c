import type { IncomingMessage, ServerResponse } from 'node:http';
import { checkKnownKeys, checkObject } from '../src/common/options.js';
import { ClientDisconnectedError, findShedError, type Permit, Semaphore } from '../src/index.js';
import { internal, type ShedOptions } from './shed.js';

export interface AdmitOptions {
  /** Inbound requests handled at once. */
  limit: number;
  /** Requests waiting beyond `limit` (default 10 × limit); past it, 503 at once. */
  maxQueue?: number;
  /** How long a request may wait for its turn, in ms (default 1000); then 503. */
  queueTimeout?: number;
  /** Gate name: stats and the `partner` field of the 503 body (default `'inbound'`). */
  name?: string;
  /** Status for shed requests (default 503). */
  status?: number;
  /** Builds the `application/problem+json` body, as in `shed()`. */
  problem?: ShedOptions['problem'];
}

export interface AdmitMiddleware {
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void;
  /** The inbound gate (`stats()`, `setLimit()`). */
  readonly gate: Semaphore;
}

const ADMIT_KEYS = ['limit', 'maxQueue', 'queueTimeout', 'name', 'status', 'problem'] as const;

/**
 * Inbound gate: at most `limit` requests are handled at once, `maxQueue` more wait up to
 * `queueTimeout`, and the rest get `503` + `Retry-After` at once. A waiting request whose
 * client leaves gives up its place; a permit is held until the response has finished or the
 * client has left, and returns exactly once.
 *
 * @example
 * app.use(admit({ limit: 200, maxQueue: 400, queueTimeout: 1000 }));
 */
export function admit(options: AdmitOptions): AdmitMiddleware {
  checkObject('admit options', options);
  checkKnownKeys('admit', options, ADMIT_KEYS);
  const { status, problem } = options;
  const respond = internal.resolve('admit', { status, problem }, ['status', 'problem']);
  let gate: Semaphore;
  try {
    gate = new Semaphore({
      limit: options.limit,
      maxQueue: options.maxQueue,
      queueTimeout: options.queueTimeout,
      name: options.name ?? 'inbound',
    });
  } catch (error) {
    throw new TypeError(`admit: ${(error as Error).message}`);
  }

  const middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => {
    if (internal.isGone(res)) return; // left before reaching us: 'close' has fired already
    const permit = gate.tryAcquire();
    if (permit !== undefined) {
      // 'close' always fires once per response (after 'finish' on a normal end).
      res.once('close', () => permit.release());
      next();
      return;
    }
    new Admission(gate, req, res, next, respond).wait();
  };
  return Object.assign(middleware, { gate });
}

/** A request waiting for its turn. One 'close' listener serves both phases. */
class Admission {
  #permit: Permit | undefined = undefined;
  #waiting: AbortController | undefined = new AbortController();

  constructor(
    readonly gate: Semaphore,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly next: (err?: unknown) => void,
    readonly respond: ReturnType<typeof internal.resolve>,
  ) {}

  wait(): void {
    this.res.once('close', this.#onClose);
    this.gate.acquire({ signal: this.#waiting!.signal }).then(this.#onGrant, this.#onReject);
  }

  readonly #onClose = (): void => {
    const permit = this.#permit;
    if (permit !== undefined) {
      this.#permit = undefined;
      permit.release();
    } else {
      // Still queued: leave the queue now (the gate frees the slot at once).
      this.#waiting?.abort(new ClientDisconnectedError());
    }
  };

  readonly #onGrant = (permit: Permit): void => {
    this.#waiting = undefined;
    this.#permit = permit;
    this.next();
  };

  readonly #onReject = (error: unknown): void => {
    this.#waiting = undefined;
    this.res.off('close', this.#onClose);
    if (error instanceof ClientDisconnectedError) return;
    const shedError = findShedError(error);
    if (shedError === undefined || this.res.headersSent) {
      this.next(error);
      return;
    }
    if (internal.isGone(this.res)) return;
    internal.writeShed(shedError, this.req, this.res, this.respond);
  };
}
