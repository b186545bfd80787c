// End-to-end: the Sessions view and the charts in Debian's headless Chromium. Real
// traffic goes through the gateway to glider-mock with tool calls (Read, then Edit and a
// failing Bash), as a CLI's tool loop sends it; the Sessions view lists the sessions
// most recent first, shows the timeline (local and cloud), the files read and edited,
// the command and its failure, the open error, updates live over /ws, and forgets a
// session after the confirm dialog. The charts are drawn by the embedded uPlot. Prints
// one JSON line with what it saw; exits non-zero on any failure. Driven by
// test_dashboard_e2e.py, which starts `glider serve` and passes the URLs.
import { join } from "node:path";
import { cells, drive, requiredEnv } from "./browser.mjs";

const { DASHBOARD_URL: dashboard, GATEWAY_URL: gateway, SCREENSHOT_DIR: shots, CLOUD_MODEL: model } = requiredEnv("DASHBOARD_URL", "GATEWAY_URL", "SCREENSHOT_DIR", "CLOUD_MODEL");

const TOOLS = [
  { name: "Read", description: "Read a file", input_schema: { type: "object", properties: { file_path: { type: "string" } }, required: ["file_path"] } },
  { name: "Edit", description: "Edit a file", input_schema: { type: "object", properties: { file_path: { type: "string" }, old_string: { type: "string" }, new_string: { type: "string" } }, required: ["file_path"] } },
  { name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } },
];
const FILE = "/repo/src/lib.rs";
const call = (name, args) => `[[call:${name} ${JSON.stringify(args)}]]`;

// One Messages request of a Claude Code session, as the CLI sends it.
async function turn(session, messages) {
  const reply = await fetch(`${gateway}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "user-agent": "claude-cli/e2e", "x-claude-code-session-id": session },
    body: JSON.stringify({ model, max_tokens: 256, tools: TOOLS, messages }),
  });
  const text = await reply.text();
  if (reply.status !== 200) throw new Error(`gateway answered ${reply.status}: ${text}`);
  const body = JSON.parse(text);
  messages.push({ role: "assistant", content: body.content });
  return body.content.filter((b) => b.type === "tool_use");
}

await drive(join(shots, "dashboard-sessions-failed.png"), async (page) => {
  const dialogs = [];
  page.on("dialog", (d) => { dialogs.push(d.message()); d.accept(); });

  // An earlier, short session: one title-like request the user sent to the local model.
  await turn("e2e-session-0", [{ role: "user", content: "/local write a five word title for this session" }]);

  // The main session, first half: /local, read the file, get its content back.
  const main = [{ role: "user", content: `/local why does add() fail? ${call("Read", { file_path: FILE })}` }];
  const [read] = await turn("e2e-session-1", main);
  if (!read || read.name !== "Read") throw new Error(`expected a Read call, got ${JSON.stringify(main.at(-1))}`);
  main.push({ role: "user", content: [{ type: "tool_result", tool_use_id: read.id, content: "pub fn add(a: i32, b: i32) -> i32 { a - b }" }] });
  await turn("e2e-session-1", main);

  await page.goto(`${dashboard}/#sessions`);
  await page.locator("#conn", { hasText: "live" }).waitFor();
  const sessionRow = (id) => page.locator(`#sessions tr[data-session="claude-code:${id}"]`);
  await sessionRow("e2e-session-1").waitFor();
  await sessionRow("e2e-session-0").waitFor();
  const order = await page.locator("#sessions tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.session));
  await sessionRow("e2e-session-1").click();
  await page.locator("#session-files tr[data-path]", { hasText: FILE }).waitFor();
  await page.evaluate(() => { window.__gliderE2E = "same page"; });

  // Second half, while the view is open: /cloud, edit and run the tests, which fail.
  main.push({ role: "user", content: `/cloud fix it and run the tests ${call("Edit", { file_path: FILE, old_string: "a - b", new_string: "a + b" })} ${call("Bash", { command: "cargo test" })}` });
  const calls = await turn("e2e-session-1", main);
  const edit = calls.find((c) => c.name === "Edit");
  const bash = calls.find((c) => c.name === "Bash");
  if (!edit || !bash) throw new Error(`expected Edit and Bash calls, got ${JSON.stringify(calls)}`);
  main.push({ role: "user", content: [
    { type: "tool_result", tool_use_id: edit.id, content: "The file /repo/src/lib.rs has been updated." },
    { type: "tool_result", tool_use_id: bash.id, is_error: true, content: "test tests::adds ... FAILED\nfailures: tests::adds\nExit code 101" },
  ] });
  await turn("e2e-session-1", main);

  // The view follows /ws: the command, its failure and the open error arrive in place.
  const command = page.locator('#session-commands tr[data-command="cargo test"]');
  await command.locator(".pill-err").waitFor();
  await page.locator("#session-errors tr.open-error").first().waitFor();
  await page.locator("#session-files tr[data-path] .op-edited").waitFor();
  await page.locator("#episodes .episode").nth(1).locator("tr.step").nth(1).waitFor();
  if (await page.evaluate(() => window.__gliderE2E) !== "same page") throw new Error("the page reloaded instead of updating live");
  const files = await cells(page, "#session-files tbody tr[data-path]");
  const commands = await cells(page, "#session-commands tbody tr[data-command]");
  const errors = await cells(page, "#session-errors tbody tr.open-error");
  const steps = await page.locator("#episodes .episode").evaluateAll((eps) => eps.map((ep) => [...ep.querySelectorAll("tr.step")].map((r) => ({ local: r.dataset.local, text: r.innerText }))));
  const meta = await page.locator("#session-meta").innerText();
  await page.screenshot({ path: join(shots, "dashboard-sessions.png"), fullPage: true });

  // Forget the earlier session: confirm, then it is gone from the list.
  await sessionRow("e2e-session-0").click();
  await page.locator("#session-title", { hasText: "e2e-session-0" }).waitFor();
  await page.locator("#forget").click();
  await sessionRow("e2e-session-0").waitFor({ state: "detached" });
  await page.locator("#sessions-notice", { hasText: "Forgot claude-code:e2e-session-0" }).waitFor();

  // The charts, on the overview: uPlot's canvases hold drawn pixels and the data.
  await page.locator('#tabs a[data-view="overview"]').click();
  await page.locator("#view-overview:not([hidden])").waitFor();
  await page.waitForFunction(() => Number(document.querySelector("#chart-requests")?.dataset.sum) >= 5);
  await page.waitForFunction(() => Number(document.querySelector("#chart-saved")?.dataset.sum) > 0);
  const charts = await page.evaluate(() => Object.fromEntries(["requests", "latency", "saved"].map((name) => {
    const canvas = document.querySelector(`#chart-${name} .uplot canvas`);
    if (!canvas) return [name, null];
    const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    let drawn = 0;
    let series = 0;
    for (let i = 0; i < pixels.length; i += 4) {
      if (pixels[i + 3] > 0) drawn++;
      // The saved chart's bars are stroked in #6a3bb5.
      if (Math.abs(pixels[i] - 106) < 40 && Math.abs(pixels[i + 1] - 59) < 40 && Math.abs(pixels[i + 2] - 181) < 40 && pixels[i + 3] > 100) series++;
    }
    return [name, { width: canvas.width, height: canvas.height, drawn, series, sum: Number(document.querySelector(`#chart-${name}`).dataset.sum) }];
  })));
  const saved = await page.locator("#sum-saved-cost").innerText();
  await page.screenshot({ path: join(shots, "dashboard-charts.png"), fullPage: true });

  return { order, files, commands, errors, steps, meta, dialogs, charts, saved };
});
