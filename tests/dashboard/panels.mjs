// End-to-end: every overview panel and the session view, as a user looks at them after
// a Claude Code-shaped session (edits, a command that succeeds and one that fails, a
// request that errors, a local turn fitted to a small model) in Debian's headless
// Chromium. Reads what each panel shows and how it is laid out (a column past its
// panel's edge is a column the user cannot see); the Python test asserts on it. Prints
// one JSON line; exits non-zero on any failure. Driven by test_dashboard_e2e.py.
import { join } from "node:path";
import { cells, drive, overflow, requiredEnv } from "./browser.mjs";

const { DASHBOARD_URL: dashboard, GATEWAY_URL: gateway, SCREENSHOT_DIR: shots, CLOUD_MODEL: model } =
  requiredEnv("DASHBOARD_URL", "GATEWAY_URL", "SCREENSHOT_DIR", "CLOUD_MODEL");

const TOOLS = ["Read", "Edit", "Bash", "Glob", "Grep"].map((name) => ({
  name, description: `${name} tool`, input_schema: { type: "object", properties: { file_path: { type: "string" }, command: { type: "string" } } },
}));
const FILE = "/repo/src/lib.rs";
const SESSION = "panels-session";
const call = (name, args) => `[[call:${name} ${JSON.stringify(args)}]]`;
const REMINDER = "<system-reminder>\nAs you answer the user's questions, you can use the following context: CLAUDE.md says run cargo test.\n</system-reminder>\n";

async function turn(messages, { expect = 200, session = SESSION } = {}) {
  const reply = await fetch(`${gateway}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "user-agent": "claude-cli/panels", "x-claude-code-session-id": session },
    body: JSON.stringify({ model, max_tokens: 256, tools: TOOLS, messages }),
  });
  const text = await reply.text();
  if (reply.status !== expect) throw new Error(`gateway answered ${reply.status} (wanted ${expect}): ${text}`);
  if (expect !== 200) return [];
  const body = JSON.parse(text);
  messages.push({ role: "assistant", content: body.content });
  return body.content.filter((b) => b.type === "tool_use");
}

await drive(join(shots, "dashboard-panels-failed.png"), async (page) => {
  // The session: /local with five tools for a model fitted to two, the file read, then
  // an edit, a command that succeeds (no exit code printed, as Claude Code's Bash does)
  // and one that fails.
  // Claude Code sends its <system-reminder> notes as text blocks beside the user's words.
  // It reads 45 files: more than the record lists (40), so it says what it left out.
  const files = [FILE, ...Array.from({ length: 44 }, (_, i) => `/repo/src/m${i}.rs`)];
  const main = [{ role: "user", content: [{ type: "text", text: REMINDER }, { type: "text", text: `/local why does add() fail? ${files.map((f) => call("Read", { file_path: f })).join(" ")}` }] }];
  const reads = await turn(main);
  if (reads.length !== files.length) throw new Error(`expected ${files.length} Read calls, got ${JSON.stringify(main.at(-1))}`);
  main.push({ role: "user", content: reads.map((read) => ({ type: "tool_result", tool_use_id: read.id, content: "pub fn add(a: i32, b: i32) -> i32 { a - b }" })) });
  await turn(main);
  // Here the note follows the user's words in the same text block.
  main.push({ role: "user", content: `/cloud fix it and check ${call("Edit", { file_path: FILE })} ${call("Bash", { command: "cargo build" })} ${call("Bash", { command: "cargo test" })}\n${REMINDER}` });
  const calls = await turn(main);
  const [edit, build, test] = ["Edit", "Bash", "Bash"].map((name, i) => calls.filter((c) => c.name === name)[i === 2 ? 1 : 0]);
  if (!edit || !build || !test) throw new Error(`expected Edit and two Bash calls, got ${JSON.stringify(calls)}`);
  main.push({ role: "user", content: [
    { type: "tool_result", tool_use_id: edit.id, content: "The file /repo/src/lib.rs has been updated." },
    { type: "tool_result", tool_use_id: build.id, content: "   Compiling demo v0.1.0\n    Finished `dev` profile" },
    { type: "tool_result", tool_use_id: test.id, is_error: true, content: "test tests::adds ... FAILED\nExit code 101" },
  ] });
  await turn(main);
  // A request no backend can answer: the backend `flaky` is down.
  await turn([{ role: "user", content: "/via flaky hello" }], { expect: 502, session: "panels-error" });

  // As wide as the desktop window opens (1280 px), narrower than the other tests' page.
  await page.setViewportSize({ width: 1280, height: 1300 });
  await page.goto(dashboard);
  await page.locator("#conn", { hasText: "live" }).waitFor();
  await page.locator('#requests tbody tr[data-key^="seq:"]').nth(4).waitFor();
  await page.locator("#by-route tbody tr").first().waitFor();
  await page.locator("#vram tbody tr").first().waitFor();
  await page.waitForFunction(() => document.querySelector("#summary-since").innerText.includes("since Glider started at"));

  const requests = await page.locator('#requests tbody tr[data-key^="seq:"]').evaluateAll((rows) => rows.map((r) => ({
    text: r.innerText, status: r.cells[r.cells.length - 1].innerText, fitted: [...r.querySelectorAll(".fitted li")].map((li) => li.innerText),
  })));
  const seen = {
    requests,
    requestsOverflow: await overflow(page, "#requests"),
    byBackend: await cells(page, "#by-backend tbody tr"),
    byRoute: await cells(page, "#by-route tbody tr"),
    byBackendOverflow: await overflow(page, "#by-backend"),
    byRouteOverflow: await overflow(page, "#by-route"),
    since: await page.locator("#summary-since").innerText(),
    gpus: await page.locator("#vram-gpus").innerText(),
    vram: await cells(page, "#vram tbody tr"),
    mcp: await cells(page, "#mcp tbody tr"),
    shadow: await cells(page, "#shadow tbody tr"),
    // The routing evidence, read again now that every request above is in the history.
    routeKinds: await page.evaluate(async () => {
      await loadRouteReport();
      return [...document.querySelectorAll("#route-kinds .kind-row")].map((row) => ({
        kind: row.dataset.kind, local: Number(row.dataset.localTokens), cloud: Number(row.dataset.cloudTokens),
        width: row.querySelector(".kind-bar").getBoundingClientRect().width, text: row.innerText,
      }));
    }),
    routeTable: await cells(page, "#route-report tbody tr"),
    routeSuggestion: await page.locator("#route-suggestion").innerText(),
    configPath: await page.locator("#config-path").innerText(),
    config: await page.locator("#config").innerText(),
    restart: await page.locator("#restart").innerText(),
  };
  await page.screenshot({ path: join(shots, "dashboard-panels.png"), fullPage: true });

  // The session view: the episode titled by the user's words, the commands' outcomes,
  // the record as the text a local model receives.
  await page.goto(`${dashboard}/#sessions`);
  await page.locator(`#sessions tr[data-session="claude-code:${SESSION}"]`).click();
  await page.locator("#session-commands tr[data-command]").nth(1).waitFor();
  seen.goals = await page.locator("#episodes .episode .goal").allInnerTexts();
  seen.commands = await cells(page, "#session-commands tbody tr[data-command]");
  await page.locator("#session-record summary").click();
  seen.record = await page.locator("#record-text").innerText();
  seen.recordLeftOut = await page.locator("#record-left-out").innerText();
  seen.recordJsonDump = await page.locator("#record-body dl").count();
  await page.screenshot({ path: join(shots, "dashboard-session-record.png"), fullPage: true });

  return seen;
});
