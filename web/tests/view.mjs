#!/usr/bin/env node
// The web view in a real browser (Debian's chromium, driven by playwright-core) against the
// controller of a running diamond lab (A-{B,C}-D):
//   node web/tests/view.mjs URL LAB_DIR DAR_LAB
// Loads URL, waits for the nodes, selects destination D and sees A route through B; takes the
// link B-D down with `DAR_LAB link down B D --dir LAB_DIR` and waits for the link to turn red
// and A's route to move to C; opens a link's charts; finds the link_down event. Exits 0 if
// all of that is seen, 1 with the step that failed otherwise (and a screenshot in LAB_DIR).
// src/lab/web_view_integration_test.cc runs it in the lab's controller namespace.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [url, labDir, darLab] = process.argv.slice(2);
if (!url || !labDir || !darLab) {
  console.error('usage: view.mjs URL LAB_DIR DAR_LAB');
  process.exit(2);
}
const WAIT_MS = 15000;
const CHROMIUM = '/usr/bin/chromium';

const log = (message) => console.log(`view: ${message}`);
let step = 'starting chromium';

// Waits until `predicate(arg)`, evaluated in the page, is true; fails the step otherwise.
async function until(page, what, predicate, timeout = WAIT_MS) {
  step = what;
  await page.waitForFunction(predicate, null, { timeout, polling: 100 });
  log(`ok: ${what}`);
}

async function run(page) {
  page.on('console', (m) => m.type() === 'error' && log(`page console: ${m.text()}`));
  page.on('pageerror', (e) => log(`page error: ${e.message}`));
  let fetches = 0;
  page.on('request', (r) => r.url().includes('api/topology') && fetches++);
  const start = Date.now();
  step = `loading ${url}`;
  await page.goto(url, { timeout: WAIT_MS });
  await until(page, 'the four nodes are drawn', () =>
    ['A', 'B', 'C', 'D'].every((n) => document.querySelector(`[data-node="${n}"]`)));
  await until(page, 'the stream is live', () =>
    document.getElementById('stream').dataset.state === 'live');
  // A lab just brought up: its agents connect and take tables within seconds.
  await until(page, 'every agent is connected', () =>
    document.getElementById('agents').textContent === '4/4', 2 * WAIT_MS);

  step = 'selecting destination D';
  await page.selectOption('#dest', 'D');
  await until(page, 'A routes toward D through B', () =>
    document.querySelector('.route[data-from="A"][data-to="B"]'));

  step = 'taking the link B-D down';
  execFileSync(darLab, ['link', 'down', 'B', 'D', '--dir', labDir], { stdio: 'inherit' });
  await until(page, 'the link B->D is down and red', () => {
    const line = document.querySelector('line[data-src="B"][data-dst="D"]');
    if (line?.dataset.state !== 'down') return false;
    const [r, g, b] = getComputedStyle(line).stroke.match(/\d+/g).map(Number);
    return r > 180 && g < 90 && b < 90;
  });
  await until(page, "A's route toward D moves from B to C", () =>
    !document.querySelector('.route[data-from="A"][data-to="B"]') &&
    document.querySelector('.route[data-from="A"][data-to="C"]'));

  step = 'clicking the link A->C';
  await page.click('line[data-src="A"][data-dst="C"]', { timeout: WAIT_MS });
  await until(page, "the link's charts are drawn", () =>
    document.querySelectorAll('#link-pane .uplot').length === 2);
  await until(page, 'the events list shows link_down', () =>
    document.querySelector('#events li[data-kind="link_down"]'));
  // Once a second at most, and once for each of the three choices made above.
  const seconds = (Date.now() - start) / 1000;
  step = 'counting the topology fetches';
  if (fetches > Math.ceil(seconds) + 4) throw new Error(`${fetches} in ${seconds} s`);
  log(`ok: ${fetches} topology fetches in ${seconds.toFixed(1)} s`);
  await page.screenshot({ path: join(labDir, 'web-view.png'), fullPage: true });
}

const userDataDir = mkdtempSync(join(tmpdir(), 'dar-web-view-'));
let context;
let page;
let code = 0;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  page = context.pages()[0] ?? (await context.newPage());
  await run(page);
  log('all checks passed');
} catch (error) {
  code = 1;
  console.error(`view: FAILED at "${step}": ${error.message.split('\n')[0]}`);
  if (page) {
    const shot = join(labDir, 'web-view-failure.png');
    await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
    console.error(`view: screenshot ${shot}`);
  }
} finally {
  await context?.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(code);
