import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type StatusScene, startStatusScene } from './status-scene.js';

/** Debian's `chromium` package; .ci/run installs it, so in CI its absence is a failure. */
const CHROMIUM = '/usr/bin/chromium';
const available = existsSync(CHROMIUM);
if (!available && process.env.CI === 'true') {
  throw new Error(`${CHROMIUM} is missing: .ci/run should have installed Debian's chromium`);
}
if (!available) {
  console.warn(
    `status page browser test skipped: ${CHROMIUM} not found (apt-get install -y chromium)`,
  );
}

/** The page's `window`, typed here: this project compiles without the DOM lib. */
interface BrowserWindow {
  getComputedStyle(element: unknown): { color: string };
}

const SCREENSHOT = join(import.meta.dirname, '../../scratch/status-page.png');

describe.skipIf(!available)('status page in headless Chromium', () => {
  let scene: StatusScene;
  let profile: string;
  let browser: BrowserContext;

  beforeAll(async () => {
    scene = await startStatusScene();
    profile = await mkdtemp(join(tmpdir(), 'hostgate-chromium-'));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1100, height: 640 },
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await scene?.close();
    if (profile !== undefined) await rm(profile, { recursive: true, force: true });
  });

  it('shows one row per partner with its bar, and red marks on the leak and the stall', async () => {
    // Let the stall and the leak become visible before the page is loaded.
    await vi.waitFor(
      async () => {
        const res = await fetch(`${scene.url}?format=json`);
        const body = (await res.json()) as { partners: { state: string }[] };
        const states = body.partners.map((p) => p.state);
        expect(states).toEqual(['ok', 'stalled', 'leak', 'ok']);
      },
      { timeout: 5000, interval: 50 },
    );
    const page = await browser.newPage();
    const blocked: string[] = [];
    page.on('request', (request) => {
      if (request.url() !== scene.url) blocked.push(request.url()); // self-contained: nothing else
    });
    await page.goto(scene.url);

    const rows = page.locator('tbody tr');
    await expect.poll(() => rows.count()).toBe(4);
    const state = (partner: string) =>
      page.locator(`tr[data-partner="${partner}"]`).getAttribute('data-state');
    expect(await state('billing')).toBe('ok');
    expect(await state('search')).toBe('stalled');
    expect(await state('ledger')).toBe('leak');
    expect(await state('maps')).toBe('ok');
    expect(
      await page.locator('tr[data-partner="billing"] [role="meter"]').getAttribute('aria-valuenow'),
    ).toBe('13');
    expect(await page.locator('tr[data-partner="billing"] .bar span').textContent()).toBe(
      '13 / 20',
    );
    // The marks are red, as rendered (not only as classes).
    const red = await page
      .locator('tr[data-partner="search"] .mark')
      .evaluate((el) => (globalThis as unknown as BrowserWindow).getComputedStyle(el).color);
    expect(red).toBe('rgb(220, 38, 38)');
    const width = await page
      .locator('tr[data-partner="billing"] .fill')
      .evaluate(
        (el) => el.getBoundingClientRect().width / el.parentElement!.getBoundingClientRect().width,
      );
    expect(width).toBeCloseTo(13 / 20, 2);
    await expect.poll(() => page.locator('.leaks li').count()).toBe(1);
    expect(await page.locator('.leaks li').textContent()).toContain('GET http://127.0.0.1');
    expect(blocked).toEqual([]);

    await mkdir(join(SCREENSHOT, '..'), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
  }, 30_000);
});
