/** Up-front option validation: bad input throws a `TypeError` naming the option and the value. */

/** setTimeout's largest delay; anything longer would fire at once. */
export const MAX_TIMER_MS = 2_147_483_647;

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  if (value !== null && typeof value === 'object') return 'an object';
  return String(value);
}

export function checkKnownKeys(where: string, options: object, known: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      throw new TypeError(
        `${where}: unknown option ${JSON.stringify(key)}; expected one of ${known.join(', ')}`,
      );
    }
  }
}

export function checkObject(where: string, value: unknown): asserts value is object {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(`${where} must be an options object, got ${describe(value)}`);
  }
}

export function positiveInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new TypeError(`${name} must be a positive integer, got ${describe(value)}`);
  }
  return value;
}

export function nonNegativeInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`${name} must be a non-negative integer, got ${describe(value)}`);
  }
  return value;
}

/** A duration in ms that a timer can honour: finite, > 0 and at most ~24.8 days. */
export function durationMs(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_TIMER_MS) {
    throw new TypeError(
      `${name} must be a duration in ms greater than 0 and at most ${MAX_TIMER_MS}, got ${describe(value)}`,
    );
  }
  return value;
}

export function optionalString(name: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string, got ${describe(value)}`);
  }
  return value;
}

export function optionalSignal(name: string, value: unknown): AbortSignal | undefined {
  if (value === undefined || value === null) return undefined;
  if (!(value instanceof AbortSignal)) {
    throw new TypeError(`${name} must be an AbortSignal, got ${describe(value)}`);
  }
  return value;
}
