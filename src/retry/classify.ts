/** Which failed attempts are worth another try. */

import { isHostgateError } from '../common/errors.js';

/** Transient socket and DNS codes: the request never got an answer, and the next one may. */
const TRANSIENT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
]);
/** Codes that will fail the same way every time: no such host, a bad URL or argument, TLS trust. */
const PERMANENT_CODE =
  /^(ENOTFOUND|ERR_INVALID_URL|ERR_INVALID_ARG|UND_ERR_INVALID_ARG|UND_ERR_NOT_SUPPORTED|UNABLE_TO_)|CERT|SELF_SIGNED|ERR_TLS/;
const MAX_DEPTH = 8;

/**
 * A network failure worth a retry: a transient socket code anywhere in the `cause` chain, or
 * fetch's `TypeError('fetch failed')` with no sign of a permanent cause.
 *
 * Never retried: anything from hostgate itself (a shed error from our own gate — retrying
 * into our own full queue only lengthens it —, a permit hold timeout, a disconnected client),
 * an abort or timeout, and any other error (a bug is not transient).
 */
export function isRetryableError(error: unknown): boolean {
  let transient = false;
  let current = error;
  for (let depth = 0; depth < MAX_DEPTH && current != null; depth++) {
    if (isHostgateError(current)) return false;
    if (typeof current !== 'object') break;
    const { name, code } = current as { name?: unknown; code?: unknown };
    if (name === 'AbortError' || name === 'TimeoutError') return false;
    if (typeof code === 'string') {
      if (TRANSIENT_CODES.has(code)) transient = true;
      else if (PERMANENT_CODE.test(code)) return false;
    }
    current = (current as { cause?: unknown }).cause;
  }
  return transient || (error instanceof TypeError && error.message === 'fetch failed');
}
