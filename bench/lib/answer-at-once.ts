/**
 * An inner undici dispatcher that answers every request at once (its headers, four body chunks
 * of 16 KiB, the end) through undici's callback API, and a caller that reads nothing: with them
 * under an interceptor, the interceptor's own work is all a benchmark measures.
 */
import type { Dispatcher } from 'undici';

const CHUNK = Buffer.alloc(16_384);
const noop = () => {};

/** The dispatcher; `rawHeaders` are the response's, as undici's raw pairs. */
export function answerAtOnce(rawHeaders: Buffer[]): Dispatcher.Dispatch {
  return (_opts, handler) => {
    const h = handler as unknown as {
      onConnect(abort: () => void, context: object): void;
      onHeaders(status: number, raw: Buffer[], resume: () => void, text: string): boolean;
      onData(chunk: Buffer): boolean;
      onComplete(trailers: null): void;
    };
    h.onConnect(noop, {});
    h.onHeaders(200, rawHeaders, noop, 'OK');
    for (let i = 0; i < 4; i++) h.onData(CHUNK);
    h.onComplete(null);
    return true;
  };
}

/** The caller's handler: takes everything, throws on an error (a benchmark must not see one). */
export const readsNothing = {
  onConnect: noop,
  onHeaders: () => true,
  onData: () => true,
  onComplete: noop,
  onError(error: Error) {
    throw error;
  },
} as unknown as Dispatcher.DispatchHandler;
