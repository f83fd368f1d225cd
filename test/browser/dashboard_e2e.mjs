// test/browser/dashboard_e2e.mjs: a headless Chromium that test/t/040_dashboard.pl drives.
//
//   node dashboard_e2e.mjs --user-data-dir DIR [--chromium /usr/bin/chromium]
//
// Reads one JSON command a line on stdin, {"id": N, "cmd": NAME, ...}, and answers each with
// one JSON line on stdout, {"id": N, "ok": true, ...} or {"id": N, "ok": false, "error": ...};
// a wait_* command that measures first says {"id": N, "armed": true} (start the action then).
// The first line is {"ready": true, "pid": ..., "browser": VERSION}.  Logs go to stderr.
//
// Commands:
//   open {url}                     a new page at url (the previous one stays open)
//   wait_db {state, timeout}       #db-state[data-state=state]
//   wait_dot {icao24, timeout}     the aircraft's <circle>; ms from "armed" to seen
//   wait_zone {zone, timeout}      the zone's <g> with class crowded
//   wait_db_cycle {since, timeout} the page saw the database down, then up, after since (ms)
//   latency                        the page's commit -> page figures
//   screenshot {path}
//   close_page                     closes the current page (a browser leaving)
//   quit                           closes the browser and exits
// stdin closing or SIGTERM closes the browser too.
import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const userDataDir = opt('--user-data-dir');
const executablePath = opt('--chromium', '/usr/bin/chromium');
if (!userDataDir) {
  console.error('dashboard_e2e: --user-data-dir is required');
  process.exit(2);
}

const log = (...a) => console.error(new Date().toISOString(), ...a);
const reply = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync',
         '--disable-quic'],
  viewport: { width: 1400, height: 820 },
  handleSIGTERM: true,
  handleSIGINT: true,
});
for (const p of context.pages()) await p.close();  // the blank first tab
let page = null;
let closing = false;

async function shutdown(code) {
  if (closing) return;
  closing = true;
  try { await context.close(); } catch (e) { log('close:', e.message); }
  process.exit(code);
}

function needPage() {
  if (!page) throw new Error('no page open');
  return page;
}

const commands = {
  async open({ url }) {
    page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') log('page console:', m.text()); });
    page.on('pageerror', (e) => log('page error:', e.message));
    await page.goto(url, { waitUntil: 'load' });
    return {};
  },

  async wait_db({ state, timeout = 10000 }) {
    await needPage().waitForSelector(`#db-state[data-state="${state}"]`, { state: 'attached', timeout });
    return {};
  },

  async wait_dot({ id, icao24, timeout = 5000 }) {
    const p = needPage();
    const t0 = Date.now();
    const seen = p.waitForSelector(`circle.aircraft[data-icao24=${JSON.stringify(icao24)}]`,
                                   { state: 'attached', timeout });
    reply({ id, armed: true, at: t0 });
    const dot = await seen;
    const at = Date.now();
    return { ms: at - t0, at, class: await dot.getAttribute('class') };
  },

  async wait_zone({ zone, timeout = 8000 }) {
    const t0 = Date.now();
    const g = await needPage().waitForSelector(`g.zone.crowded[data-zone=${JSON.stringify(zone)}]`,
                                               { state: 'attached', timeout });
    return { ms: Date.now() - t0, label: await g.evaluate((e) => e.textContent) };
  },

  async wait_db_cycle({ since, timeout = 30000 }) {
    const p = needPage();
    await p.waitForFunction((since) => {
      const s = window.sdpDashboard.dbStates.filter((x) => x.at >= since).map((x) => x.state);
      const down = s.indexOf('down');
      return down >= 0 && s.indexOf('up', down) > down;
    }, since, { timeout, polling: 50 });
    return { states: await p.evaluate((since) => window.sdpDashboard.dbStates.filter((x) => x.at >= since), since) };
  },

  async latency() {
    return await needPage().evaluate(() => {
      const e = document.getElementById('commit-to-page-ms');
      return {
        text: e.textContent, ms: Number(e.dataset.ms), p50: Number(e.dataset.p50),
        samples: Number(e.dataset.samples), aircraft: Number(document.getElementById('aircraft-count').textContent),
        breakdown: document.getElementById('delay-breakdown').textContent,
      };
    });
  },

  async screenshot({ path }) {
    await needPage().screenshot({ path });
    return { path };
  },

  async close_page() {
    await needPage().close();
    page = null;
    return {};
  },

  async quit() {
    setImmediate(() => shutdown(0));
    return {};
  },
};

reply({ ready: true, pid: process.pid, browser: context.browser()?.version() ?? 'unknown' });

// Commands run one at a time, in order.
let queue = Promise.resolve();
const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (!line.trim()) return;
  queue = queue.then(async () => {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch (e) {
      reply({ ok: false, error: `bad command: ${e.message}` });
      return;
    }
    const run = commands[msg.cmd];
    try {
      if (!run) throw new Error(`unknown command ${msg.cmd}`);
      reply({ id: msg.id, ok: true, ...(await run(msg)) });
    } catch (e) {
      log(`${msg.cmd} failed:`, e.message);
      reply({ id: msg.id, ok: false, error: e.message.split('\n')[0] });
    }
  });
});
rl.on('close', () => queue.then(() => shutdown(0)));
