// bench/console_page.js OLD_URL NEW_URL LAST_QUEUE ROUNDS: the page-side half
// of bench/console.sh (read it there). Prints a Markdown table of medians.
'use strict';
const path = require('node:path');
const { chromium } = require(path.join(__dirname, '..', 'console', 'node_modules', 'playwright-core'));

const [oldUrl, newUrl, lastQueue, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText);

async function measure(browser, url) {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    // the page's own functions are globals of a classic script: wrapped before it runs
    await page.addInitScript(() => {
        window.__refresh = [];
        window.__long = 0;
        new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long += e.duration; })
            .observe({ entryTypes: ['longtask'] });
        let wrapped = false;
        document.addEventListener('DOMContentLoaded', () => {
            if (wrapped || typeof window.renderQueues !== 'function') return;
            wrapped = true;
            const orig = window.renderQueues;
            window.renderQueues = (d) => {
                const t = performance.now();
                orig(d);
                window.__refresh.push(performance.now() - t);
            };
        });
    });
    const t0 = Date.now();
    await page.goto(url);
    await page.waitForSelector(`#queues tr[data-queue="${lastQueue}"]`, { timeout: 120000 });
    const first = Date.now() - t0;
    await page.evaluate(() => { window.__refresh = []; window.__long = 0; });
    await new Promise((r) => setTimeout(r, 12000));
    const { refresh, busy } = await page.evaluate(() => ({ refresh: window.__refresh, busy: window.__long }));
    const t1 = Date.now();
    await page.click('#queues tr[data-queue="q00017"] button.peek');
    await page.waitForSelector('#peek-section:not([hidden])');
    const peek = Date.now() - t1;
    await page.close();
    return { first, refresh: median(refresh), busy, peek };
}

function median(xs) {
    if (xs.length === 0) return NaN;
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

(async () => {
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
    const got = { old: [], new: [] };
    try {
        for (let r = 0; r < rounds; r++) {
            for (const who of ['old', 'new', 'new', 'old']) {
                const m = await measure(browser, who === 'old' ? oldUrl : newUrl);
                got[who].push(m);
                process.stderr.write(`round ${r + 1} ${who}: ${JSON.stringify(m)}\n`);
            }
        }
    } finally {
        await browser.close();
    }
    const rows = [['first view', 'first'], ['refresh', 'refresh'], ['busy in 12 s', 'busy'], ['peek', 'peek']];
    console.log('| ms (median) | old | new | new / old |');
    console.log('|---|---:|---:|---:|');
    for (const [label, key] of rows) {
        const o = median(got.old.map((m) => m[key]));
        const n = median(got.new.map((m) => m[key]));
        console.log(`| ${label} | ${o.toFixed(0)} | ${n.toFixed(0)} | ${(n / o).toFixed(2)}x |`);
    }
})().catch((e) => { console.error(e); process.exit(1); });
