// End-to-end: the overview's Local models panel in Debian's headless Chromium. The page
// shows the local model before any reply (its window, no speed, the cap a quarter of
// the window gives); one streamed request goes through the gateway to glider-mock
// (slowed: a first byte after a pause, the rest in timed pieces), and the row updates
// live with the measured prompt and generation speed and the cap that speed implies.
// Prints one JSON line with what it saw (the cells before and after, and /api/fit as
// the page read it); exits non-zero on any failure. Driven by test_dashboard_e2e.py,
// which starts `glider serve` and passes the URLs.
import { openBrowser, requiredEnv } from "./browser.mjs";

const { DASHBOARD_URL: dashboard, GATEWAY_URL: gateway, SCREENSHOT: screenshot, MODEL: model } = requiredEnv("DASHBOARD_URL", "GATEWAY_URL", "SCREENSHOT", "MODEL");

const { page, problems, close } = await openBrowser();
try {
  await page.goto(dashboard);
  await page.locator("#conn", { hasText: "live" }).waitFor();
  const row = page.locator(`#fit tr[data-backend="local"][data-model="${model}"]`);
  await row.waitFor();
  const before = await row.locator("td").allInnerTexts();
  const note = await page.locator("#fit-note").innerText();
  await page.evaluate(() => { window.__gliderE2E = "same page"; });

  const reply = await fetch(`${gateway}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "user-agent": "e2e-client/1.0" },
    body: JSON.stringify({
      model, max_tokens: 64000, stream: true,
      messages: [{ role: "user", content: "measure me ".repeat(200) }],
    }),
  });
  if (reply.status !== 200) throw new Error(`gateway answered ${reply.status}: ${await reply.text()}`);
  await reply.text();

  // The sixth cell counts the replies measured: the row is redrawn without a reload.
  await page.locator(`#fit tr[data-backend="local"][data-model="${model}"] td:nth-child(6)`, { hasText: "1" }).waitFor();
  const after = await row.locator("td").allInnerTexts();
  // The request's row says what was fitted: the cap Glider set in place of 64,000.
  const fitted = await page.locator('#requests tbody tr[data-key^="seq:"] .fitted').innerText();
  const api = await page.evaluate(() => fetch("/api/fit", { cache: "no-store" }).then((r) => r.json()));
  if (await page.evaluate(() => window.__gliderE2E) !== "same page") throw new Error("the page reloaded instead of updating live");
  await page.locator("#fit").scrollIntoViewIfNeeded();
  await page.screenshot({ path: screenshot, fullPage: true });
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
  console.log(JSON.stringify({ before, after, note, api, fitted }));
} finally {
  await close();
}
