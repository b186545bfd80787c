// End-to-end: the Shadow comparisons panel after a real Claude Code `/compact` went to
// the cloud and its shadow copy to the local model, in Debian's headless Chromium. The
// Python test sends the request and waits for the sample; this reads the panel's rows
// and whether every column is in sight, and keeps a screenshot. Prints one JSON line;
// exits non-zero on any failure. Driven by test_dashboard_e2e.py.
import { join } from "node:path";
import { openBrowser, requiredEnv } from "./browser.mjs";

const { DASHBOARD_URL: dashboard, SCREENSHOT_DIR: shots } = requiredEnv("DASHBOARD_URL", "SCREENSHOT_DIR");

const { page, problems, close } = await openBrowser();
try {
  await page.goto(dashboard);
  // A row of figures, not the empty state's one cell.
  await page.locator("#shadow tbody tr td:nth-child(12)").first().waitFor();
  const seen = {
    head: await page.locator("#shadow thead th").allInnerTexts(),
    rows: await page.locator("#shadow tbody tr").evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.innerText))),
    overflow: await page.evaluate(() => {
      const table = document.querySelector("#shadow");
      const right = Math.max(...[...table.querySelectorAll("th, td")].map((c) => c.getBoundingClientRect().right));
      return Math.max(0, Math.round(right - table.closest("section").getBoundingClientRect().right));
    }),
  };
  await page.locator("#shadow").scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(shots, "dashboard-shadow.png") });
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
  console.log(JSON.stringify(seen));
} catch (e) {
  await page.screenshot({ path: join(shots, "dashboard-shadow-failed.png"), fullPage: true }).catch(() => {});
  if (problems.length) e.message += `\nthe page reported:\n${problems.join("\n")}`;
  throw e;
} finally {
  await close();
}
