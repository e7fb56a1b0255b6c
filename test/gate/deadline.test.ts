import type { IncomingMessage } from 'node:http';
import { describe, expect, test } from 'vitest';
import { InvalidHeader, parseDeadline } from '../../middleware/deadline.js';
import {
  expectedWaitMs,
  formatDuration,
  formatGrpcTimeout,
  MAX_BUDGET_MS,
  parseDuration,
  parseGrpcTimeout,
} from '../../src/gate/deadline.js';

describe('parseGrpcTimeout', () => {
  test.each([
    ['100m', 100],
    ['2S', 2000],
    ['1H', 3_600_000],
    ['3M', 180_000],
    ['1500u', 1.5],
    ['2000000n', 2],
    ['0m', 0],
    [' 250m ', 250],
    ['99999999m', 99_999_999],
    ['99999999H', MAX_BUDGET_MS], // past setTimeout's bound: counted as the bound
  ])('%j is %d ms', (value, ms) => {
    expect(parseGrpcTimeout(value)).toBe(ms);
  });

  test.each([
    '',
    '100',
    '100ms',
    '2s', // units are case-sensitive: s is not S
    '1h',
    '-1m',
    '1.5S',
    '123456789m', // more than 8 digits
    'm',
    '100m, 200m',
    '0x10m',
    'Infinity',
  ])('%j is not a grpc-timeout', (value) => {
    expect(parseGrpcTimeout(value)).toBeUndefined();
  });
});

describe('parseDuration', () => {
  test.each([
    ['250', 250],
    ['1.5', 1.5],
    ['0', 0],
    ['300ms', 300],
    ['2s', 2000],
    ['1.5s', 1500],
    ['2m', 120_000],
    ['1h', 3_600_000],
    [' 40 ', 40],
    ['9999999999999999', MAX_BUDGET_MS],
  ])('%j is %d ms', (value, ms) => {
    expect(parseDuration(value)).toBe(ms);
  });

  test.each([
    '',
    '-5',
    '+5',
    '1e3',
    '2S', // grpc's unit, not this format's
    '100m ms',
    '100, 200',
    'abc',
    'NaN',
    'Infinity',
    '.5',
    '5.',
    '1 s',
    '12345678901234567', // 17 digits
  ])('%j is not a duration', (value) => {
    expect(parseDuration(value)).toBeUndefined();
  });
});

describe('formatting the budget left', () => {
  test.each([
    [250.9, '250m'],
    [0, '0m'],
    [-3, '0m'],
    [99_999_999, '99999999m'],
    [100_000_000.5, '100000S'],
  ])('grpc-timeout of %d ms is %j (rounded down)', (ms, text) => {
    expect(formatGrpcTimeout(ms)).toBe(text);
    expect(parseGrpcTimeout(text)).toBeLessThanOrEqual(Math.max(0, ms));
  });
  test('a duration is whole ms, rounded down', () => {
    expect(formatDuration(1234.9)).toBe('1234');
    expect(formatDuration(-1)).toBe('0');
  });
});

describe('expectedWaitMs', () => {
  test('is 0 while a permit is free and nobody waits', () => {
    expect(expectedWaitMs({ limit: 4, held: 3, queued: 0 }, 100)).toBe(0);
  });
  test('is (queued + 1) / limit hold times once the gate is full', () => {
    expect(expectedWaitMs({ limit: 4, held: 4, queued: 0 }, 100)).toBe(25);
    expect(expectedWaitMs({ limit: 4, held: 4, queued: 7 }, 100)).toBe(200);
    expect(expectedWaitMs({ limit: 1, held: 1, queued: 2 }, 50)).toBe(150);
  });
});

function req(headers: Record<string, string | string[]>): IncomingMessage {
  return { headers } as unknown as IncomingMessage;
}

describe('outbound deadline option', () => {
  test('a number is every request budget', () => {
    expect(parseDeadline(300)!.budgetFor(req({ 'x-request-timeout': '5' }))).toBe(300);
  });

  test('a function reads the request; undefined means no deadline', () => {
    const d = parseDeadline((r) => (r.headers['x-tier'] === 'gold' ? 900 : undefined))!;
    expect(d.budgetFor(req({ 'x-tier': 'gold' }))).toBe(900);
    expect(d.budgetFor(req({}))).toBeUndefined();
  });

  test('a function returning a bad budget throws a TypeError naming it', () => {
    const d = parseDeadline(() => -1)!;
    expect(() => d.budgetFor(req({}))).toThrow(/deadline function result must be a budget/);
  });

  describe('headers', () => {
    const d = parseDeadline({
      header: ['x-request-timeout', 'grpc-timeout'],
      default: 500,
      max: 2000,
    })!;
    test.each<[Record<string, string | string[]>, number]>([
      [{ 'x-request-timeout': '250' }, 250],
      [{ 'x-request-timeout': '1.5s' }, 1500],
      [{ 'grpc-timeout': '300m' }, 300],
      [{ 'grpc-timeout': '1S' }, 1000],
      [{ 'x-request-timeout': '100', 'grpc-timeout': '900m' }, 100], // first listed wins
      [{ 'x-request-timeout': '1H' }, 500], // grpc unit in a duration header: invalid, default
      [{ 'x-request-timeout': 'abc', 'grpc-timeout': '700m' }, 700], // an invalid one is skipped
      [{ 'x-request-timeout': '10s' }, 2000], // capped by max
      [{ 'grpc-timeout': '99999999H' }, 2000],
      [{}, 500], // none: default
      [{ 'x-request-timeout': '-1' }, 500],
      [{ 'x-request-timeout': '0' }, 0], // a valid, already spent budget
    ])('%j gives %d ms', (headers, ms) => {
      expect(d.budgetFor(req(headers))).toBe(ms);
    });

    test('without a default, an absent or bad header falls back to max, never unlimited', () => {
      const capped = parseDeadline({ header: 'x-request-timeout', max: 800 })!;
      expect(capped.budgetFor(req({}))).toBe(800);
      expect(capped.budgetFor(req({ 'x-request-timeout': 'soon' }))).toBe(800);
    });

    test('a default function is capped by max too', () => {
      const capped = parseDeadline({ header: 'x-request-timeout', default: () => 5000, max: 800 })!;
      expect(capped.budgetFor(req({}))).toBe(800);
    });

    test("invalid: 'reject' names the bad header", () => {
      const strict = parseDeadline({ header: 'grpc-timeout', max: 800, invalid: 'reject' })!;
      expect(strict.budgetFor(req({ 'grpc-timeout': '5 seconds' }))).toEqual(
        new InvalidHeader('grpc-timeout'),
      );
      expect(strict.budgetFor(req({ 'grpc-timeout': '5S' }))).toBe(800);
      expect(strict.budgetFor(req({}))).toBe(800);
    });

    test('a header object can set the format and any header name case', () => {
      const custom = parseDeadline({ header: { name: 'X-Budget', format: 'grpc' } })!;
      expect(custom.budgetFor(req({ 'x-budget': '2S' }))).toBe(2000);
      expect(custom.budgetFor(req({}))).toBeUndefined();
    });
  });

  test.each<[unknown, RegExp]>([
    [-1, /deadline must be a budget in ms from 0/],
    [Number.NaN, /deadline must be a budget/],
    [Number.POSITIVE_INFINITY, /deadline must be a budget/],
    ['300', /deadline must be an options object, got "300"/],
    [{}, /give at least one of header, default, max/],
    [{ max: -5 }, /deadline.max must be a budget/],
    [{ default: '1s' }, /deadline.default must be a budget/],
    [{ header: 'bad header', max: 1 }, /deadline.header: name must be an HTTP header name/],
    [{ header: [{ name: 'x', format: 'iso' }] }, /deadline.header\[0\]: format must be/],
    [{ header: 'x', invalid: 'drop' }, /deadline.invalid must be 'ignore' or 'reject'/],
    [{ header: 'x', shedEarly: 'yes' }, /deadline.shedEarly must be a boolean/],
    [{ header: 'x', timeout: 5 }, /unknown option "timeout"/],
    [{ max: 5, propagate: ['a', 'b'] }, /deadline.propagate must be one header/],
    [{ max: 5, propagate: 'no spaces' }, /deadline.propagate: name must be an HTTP header name/],
  ])('rejects %j at construction', (value, message) => {
    expect(() => parseDeadline(value as never)).toThrow(TypeError);
    expect(() => parseDeadline(value as never)).toThrow(message);
  });
});
