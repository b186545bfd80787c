// End-to-end: Debian's headless Chromium loads the dashboard, a request goes through the
// gateway, and its row appears in the page live (over /ws, without a reload). Prints one
// JSON line with what it saw; exits non-zero on any failure. Driven by
// test_dashboard_e2e.py, which starts `glider serve` and passes the URLs.
import { openBrowser, requiredEnv } from "./browser.mjs";

const { DASHBOARD_URL: dashboard, GATEWAY_URL: gateway, SCREENSHOT: screenshot, MODEL: model } = requiredEnv("DASHBOARD_URL", "GATEWAY_URL", "SCREENSHOT", "MODEL");

const { page, problems, close } = await openBrowser();
try {
  await page.goto(dashboard);
  await page.locator("#conn", { hasText: "live" }).waitFor();
  await page.locator('#backends tr[data-backend="local"]').waitFor();
  await page.locator("#restart.ok").waitFor();
  // A marker that a reload would wipe: the row must arrive without one.
  await page.evaluate(() => { window.__gliderE2E = "same page"; });

  const ask = (body) => fetch(`${gateway}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "user-agent": "e2e-client/1.0" },
    body: JSON.stringify(body),
  });
  const reply = await ask({
    model, max_tokens: 64, stream: true,
    messages: [{ role: "user", content: "hello from the browser test" }],
  });
  if (reply.status !== 200) throw new Error(`gateway answered ${reply.status}: ${await reply.text()}`);
  await reply.text();
  const missing = await ask({ model: "no-such-model", max_tokens: 8, messages: [{ role: "user", content: "x" }] });
  if (missing.status !== 404) throw new Error(`expected 404 for an unknown model, got ${missing.status}`);

  const row = page.locator('#requests tbody tr[data-key^="seq:"]', { hasText: model, has: page.locator(".pill-ok") });
  await row.waitFor();
  await page.locator('#requests tbody tr[data-key^="seq:"]', { hasText: "no-such-model", has: page.locator(".pill-err") }).waitFor();
  const cells = await row.locator("td").allInnerTexts();
  await page.locator('#by-backend tr[data-group="local"]').waitFor();
  await page.locator("#sum-local", { hasText: "100%" }).waitFor();
  const marker = await page.evaluate(() => window.__gliderE2E);
  if (marker !== "same page") throw new Error("the page reloaded instead of updating live");
  const backendCells = await page.locator('#backends tr[data-backend="local"] td').allInnerTexts();
  const byBackend = await page.locator('#by-backend tr[data-group="local"] td').allInnerTexts();
  // The Delegate CLIs view: the page's own POST re-discovers and the table is redrawn.
  await page.locator("#discover").click();
  await page.locator("#discover-result", { hasText: "found at" }).waitFor();
  for (const vendor of ["claude", "cursor-agent", "agy"]) {
    await page.locator(`#vendors tr[data-vendor="${vendor}"]`).waitFor();
  }

  // The hot-swap panel: every module of the registry at the version it started with.
  for (const module of ["backends", "classifier", "fan_out", "runtime"]) {
    await page.locator(`#hotswap tr[data-module="${module}"]`, { hasText: "since start" }).waitFor();
  }
  const hotswap = await page.locator("#hotswap tbody tr").allInnerTexts();

  await page.screenshot({ path: screenshot, fullPage: true });
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
  console.log(JSON.stringify({ row: cells, backend: backendCells, by_backend: byBackend, hotswap }));
} finally {
  await close();
}
