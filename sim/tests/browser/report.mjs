// The sim's HTML reports in a real browser (Debian's Chromium, driven by playwright-core):
//
//   node sim/tests/browser/report.mjs [--screenshot OUT.png] REPORT.html…
//
// For each report, at a desktop's 1280 px and a phone's 390 px: the page loads with no console
// error and no failed load; every chart in the file (each `<svg` in its source) is in the page
// and rendered — a nonzero box and drawn shapes inside; at 1280 px the first grid's two charts
// sit side by side; at 390 px the page is no wider than the screen (nothing cut off at the
// right), every chart scrolled to lies wholly inside the screen and is what shows at its centre,
// and every table lies inside the screen (a wide one scrolls inside itself). Exits 1 naming each
// failure. With --screenshot, the first report is then photographed at 1200×1600 (the picture
// in docs/sim-report.png; scripts/sim-report-png).
//
// Chromium runs headless with a fresh profile (playwright makes one per launch) and no
// background networking, which a closed network would refuse at every start. CHROMIUM overrides
// the executable (default /usr/bin/chromium).
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

const args = process.argv.slice(2);
let screenshot = null;
const reports = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--screenshot") screenshot = args[++i];
  else reports.push(args[i]);
}
if (reports.length === 0 || (args.includes("--screenshot") && !screenshot)) {
  console.error("usage: node report.mjs [--screenshot OUT.png] REPORT.html…");
  process.exit(2);
}

const VIEWPORTS = [
  { name: "desktop", width: 1280, height: 900 },
  { name: "phone", width: 390, height: 844 },
];

const failures = [];
const fail = (where, what) => failures.push(`${where}: ${what}`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});

try {
  for (const report of reports) {
    const source = readFileSync(report, "utf8");
    const expectedCharts = source.split("<svg").length - 1;
    if (expectedCharts === 0) fail(report, "the file holds no chart");
    for (const viewport of VIEWPORTS) {
      await check(report, expectedCharts, viewport);
    }
  }
  if (screenshot && failures.length === 0) {
    const page = await browser.newPage({ viewport: { width: 1200, height: 1600 } });
    await page.goto(pathToFileURL(resolve(reports[0])).href);
    await page.screenshot({ path: screenshot });
    await page.close();
    console.log(`wrote ${screenshot} (1200×1600, ${reports[0]})`);
  }
} finally {
  await browser.close();
}

if (failures.length > 0) {
  for (const f of failures) console.error(`FAIL ${f}`);
  process.exit(1);
}
console.log(`ok: ${reports.length} report(s) at ${VIEWPORTS.map((v) => v.width).join(" and ")} px`);

async function check(report, expectedCharts, viewport) {
  const where = `${report} at ${viewport.width}px`;
  const page = await browser.newPage({
    viewport: { width: viewport.width, height: viewport.height },
  });
  page.on("console", (m) => m.type() === "error" && fail(where, `console error: ${m.text()}`));
  page.on("pageerror", (e) => fail(where, `page error: ${e.message}`));
  page.on("requestfailed", (r) => fail(where, `failed to load ${r.url()}`));
  await page.goto(pathToFileURL(resolve(report)).href, { waitUntil: "load" });

  const charts = page.locator("svg");
  const count = await charts.count();
  if (count !== expectedCharts) {
    fail(where, `${count} charts in the page, ${expectedCharts} in the file`);
  }
  for (let i = 0; i < count; i++) {
    const chart = charts.nth(i);
    await chart.scrollIntoViewIfNeeded();
    const box = await chart.boundingBox();
    const shapes = await chart.locator("rect, path, line, polyline, circle, text").count();
    if (!box || box.width < 1 || box.height < 1) {
      fail(where, `chart ${i + 1} has no size (${JSON.stringify(box)})`);
      continue;
    }
    if (shapes === 0) fail(where, `chart ${i + 1} draws nothing`);
    if (viewport.name !== "phone") continue;
    if (box.x < 0 || box.x + box.width > viewport.width + 0.5) {
      fail(where, `chart ${i + 1} spans x ${box.x.toFixed(0)}–${(box.x + box.width).toFixed(0)}, beyond the screen`);
    }
    if (box.y < 0 || box.y + box.height > viewport.height + 0.5) {
      fail(where, `chart ${i + 1} (${box.height.toFixed(0)} px high) is not wholly on screen when scrolled to`);
    }
    // What shows at the chart's centre is the chart (nothing on top of it).
    const shown = await chart.evaluate((svg) => {
      const r = svg.getBoundingClientRect();
      const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
      return hit !== null && (hit === svg || svg.contains(hit));
    });
    if (!shown) fail(where, `chart ${i + 1} is covered at its centre`);
  }

  if (viewport.name === "phone") {
    const { scrollWidth, clientWidth } = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      clientWidth: document.documentElement.clientWidth,
    }));
    if (scrollWidth > clientWidth) {
      fail(where, `the page is ${scrollWidth} px wide on a ${clientWidth} px screen`);
    }
    const tables = page.locator("table");
    for (let i = 0; i < (await tables.count()); i++) {
      const box = await tables.nth(i).boundingBox();
      if (box && box.x + box.width > viewport.width + 0.5) {
        fail(where, `table ${i + 1} reaches x ${(box.x + box.width).toFixed(0)}`);
      }
    }
  } else {
    // Two columns of charts where there is room, as before the page became responsive.
    const boxes = await page.evaluate(() => {
      const grid = document.querySelector(".grid");
      return grid
        ? [...grid.children].slice(0, 2).map((c) => {
            const r = c.getBoundingClientRect();
            return { left: r.left, right: r.right };
          })
        : [];
    });
    if (boxes.length === 2 && boxes[1].left < boxes[0].right) {
      fail(where, `the first grid's charts are stacked, not side by side (${JSON.stringify(boxes)})`);
    }
  }
  await page.close();
}
