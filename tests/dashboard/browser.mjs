// The headless Chromium the dashboard's browser tests drive: Debian's build through
// playwright-core (no browser download), a throw-away profile, and a page that records
// every problem it reports (page errors, console errors, 4xx/5xx answers, failed loads).
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const TIMEOUT = 30_000;

// The environment variables `names`, by name; throws naming them all if any is unset
// (the Python test that drives a script passes them).
export function requiredEnv(...names) {
  const missing = names.filter((name) => !process.env[name]);
  if (missing.length) throw new Error(`${names.join(", ")} are required (missing: ${missing.join(", ")})`);
  return Object.fromEntries(names.map((name) => [name, process.env[name]]));
}

// Returns { page, problems, close }; `close()` ends the browser and removes its profile.
export async function openBrowser() {
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
  const profile = mkdtempSync(join(tmpdir(), "glider-e2e-chromium-"));
  let context;
  const close = async () => {
    if (context) await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath,
      headless: true,
      viewport: { width: 1500, height: 1300 },
      args: [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
      ],
    });
  } catch (e) {
    await close();
    throw e;
  }
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(TIMEOUT);
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`); });
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  return { page, problems, close };
}

// Run `steps(page)` in a fresh browser and print what it returns as one JSON line; any
// problem the page reported fails the run. On a failure the page is kept as
// `failedShot` and its problems are added to the error. The browser is always closed.
export async function drive(failedShot, steps) {
  const { page, problems, close } = await openBrowser();
  try {
    const seen = await steps(page);
    if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
    console.log(JSON.stringify(seen));
  } catch (e) {
    await page.screenshot({ path: failedShot, fullPage: true }).catch(() => {});
    if (problems.length) e.message += `\nthe page reported:\n${problems.join("\n")}`;
    throw e;
  } finally {
    await close();
  }
}

// Each cell's text of the rows `selector` matches.
export const cells = (page, selector) => page.locator(selector).evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.innerText)));

// How far `selector`'s table reaches past the right edge of what shows it (its panel,
// or the scroll box inside it): 0 when every column is in sight.
export const overflow = (page, selector) => page.evaluate((sel) => {
  const table = document.querySelector(sel);
  let box = table.parentElement;
  while (box && !(box.tagName === "SECTION" || getComputedStyle(box).overflowX === "auto")) box = box.parentElement;
  const shown = box.getBoundingClientRect();
  const right = Math.max(...[...table.querySelectorAll("th, td")].map((c) => c.getBoundingClientRect().right));
  // A scroll box hides what is past it; a section lets it run over the page's edge.
  return Math.max(0, Math.round(right - shown.right), Math.round(right - document.documentElement.clientWidth));
}, selector);
