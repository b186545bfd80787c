// End-to-end: the Shadow comparisons panel after a real Claude Code `/compact` went to
// the cloud and its shadow copy to the local model, in Debian's headless Chromium. The
// Python test sends the request and waits for the sample; this reads the panel's rows
// and whether every column is in sight, and keeps a screenshot. Prints one JSON line;
// exits non-zero on any failure. Driven by test_dashboard_e2e.py.
import { join } from "node:path";
import { cells, drive, overflow, requiredEnv } from "./browser.mjs";

const { DASHBOARD_URL: dashboard, SCREENSHOT_DIR: shots } = requiredEnv("DASHBOARD_URL", "SCREENSHOT_DIR");

await drive(join(shots, "dashboard-shadow-failed.png"), async (page) => {
  await page.goto(dashboard);
  // A row of figures, not the empty state's one cell.
  await page.locator("#shadow tbody tr td:nth-child(12)").first().waitFor();
  const seen = {
    head: await page.locator("#shadow thead th").allInnerTexts(),
    rows: await cells(page, "#shadow tbody tr"),
    overflow: await overflow(page, "#shadow"),
  };
  await page.locator("#shadow").scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(shots, "dashboard-shadow.png") });
  return seen;
});
