// ferromq's web console in a real browser: Debian's Chromium, driven by playwright-core, logs in
// to the admin endpoint with HTTP Basic credentials and works the console as a person would.
//
//   node console.mjs --url http://127.0.0.1:PORT --user admin --password secret
//                    [--chromium /usr/bin/chromium] [--timeout-ms 60000] [--screenshots DIR]
//
// What it expects (its caller, tests/tests/integration/console.rs, set it up with the JMS
// client): queue console.orders holding 12 messages ("console.orders #0"... with property
// region=EU), console.keep holding 2, and 3 messages of console.work dead-lettered in
// ActiveMQ.DLQ. It talks to its caller in lines:
//   jms COMMAND QUEUE COUNT   (stdout) please have the JMS client do this (ConsoleJms.java);
//                             the caller answers with the client's "ok ..." line on stdin
//   step NAME {json}          (stdout) a step is done, with what it saw
//   screenshot PATH           (stdout) a screenshot was saved
//   result {json}             (stdout) the end: "ok": true when every step passed
// Diagnostics go to stderr. Exit status 0 with ok, 1 otherwise.
import { createServer } from "node:http";
import { mkdtemp, mkdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    user: { type: "string" },
    password: { type: "string" },
    chromium: { type: "string", default: process.env.FERROMQ_CHROMIUM || "/usr/bin/chromium" },
    "timeout-ms": { type: "string", default: "60000" },
    screenshots: { type: "string" },
  },
});
if (!args.url || !args.user) {
  console.error("usage: node console.mjs --url http://HOST:PORT --user U --password P [--chromium PATH] [--timeout-ms N] [--screenshots DIR]");
  process.exit(2);
}
const admin = args.url.replace(/\/$/, "");
/** A queue whose name looks like markup (console.rs has the JMS client fill it). */
const MARKUP_QUEUE = "console.<b>bold</b><img src=x>";
const timeout = Number(args["timeout-ms"]);

// The flags of run.mjs: without the background-networking ones Chromium keeps trying Google's
// hosts on a closed network.
const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const emit = (kind, value) => process.stdout.write(`${kind} ${typeof value === "string" ? value : JSON.stringify(value)}\n`);
const begun = Date.now();
const log = (text) => console.error(`[${((Date.now() - begun) / 1000).toFixed(1)} s] ${text}`);

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** Asks the caller's JMS client to run `command`; its answer line. */
async function jms(command) {
  emit("jms", command);
  const { value, done } = await stdin.next();
  if (done) throw new Error(`the caller closed stdin before answering ${command}`);
  if (!value.startsWith("ok ")) throw new Error(`jms ${command}: ${value}`);
  return value;
}

/** A page on another origin, for the cross-site attempts. */
function serveOtherOrigin() {
  const server = createServer((request, response) => {
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end("<!doctype html><title>another site</title><p>another site</p>");
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

/** Fails the run with `message` unless `condition` holds. */
function expect(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

const result = { ok: false, steps: {}, screenshots: [] };
let context;
let profile;
let other;
let page;
try {
  if (args.screenshots) await mkdir(args.screenshots, { recursive: true });
  profile = await mkdtemp(join(tmpdir(), "ferromq-console-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: args.chromium,
    headless: true,
    args: CHROMIUM_FLAGS,
    timeout,
    viewport: { width: 1280, height: 900 },
    httpCredentials: { username: args.user, password: args.password || "" },
  });
  result.browser = context.browser()?.version() ?? null;
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(timeout);
  page.on("console", (message) => console.error(`[page ${message.type()}] ${message.text()}`));
  page.on("pageerror", (error) => {
    console.error(`[page error] ${error.message}`);
    (result.pageErrors ||= []).push(error.message);
  });
  page.on("dialog", (dialog) => dialog.accept());
  const shoot = async (name) => {
    if (!args.screenshots) return;
    const path = join(args.screenshots, `${name}.png`);
    await page.screenshot({ path, fullPage: true });
    result.screenshots.push(path);
    emit("screenshot", path);
  };
  const step = (name, value, checks) => {
    log(`step ${name} done`);
    result.steps[name] = value;
    emit("step", { name, ...value });
    for (const [condition, message] of checks) expect(condition, `${name}: ${message}: ${JSON.stringify(value)}`);
  };
  const cellText = (selector) => page.locator(selector).first().textContent();
  /** Waits until the text of `selector` is `text`. */
  const waitText = (selector, text) =>
    page.waitForFunction(([s, t]) => document.querySelector(s)?.textContent.trim() === t, [selector, text], { timeout });

  // 1. Log in: the page, its security headers, the dashboard with the broker's name.
  const response = await page.goto(`${admin}/`);
  const headers = response.headers();
  // The broker card says "…" until the first poll answers.
  await page.waitForFunction(() => document.querySelector("#dashboard-cards [data-card=uptime]") !== null, null, { timeout });
  const login = {
    status: response.status(),
    csp: headers["content-security-policy"] || "",
    nosniff: headers["x-content-type-options"] || null,
    referrer: headers["referrer-policy"] || null,
    broker: await cellText("#dashboard-cards [data-card=broker] .value"),
    badge: await cellText("#broker-badge"),
  };
  step("login", login, [
    [login.status === 200, "the page loads"],
    [login.csp.includes("default-src 'self'") && login.csp.includes("frame-ancestors 'none'"), "a restrictive policy"],
    [!login.csp.includes("unsafe-inline"), "no inline script"],
    [login.nosniff === "nosniff" && login.referrer === "no-referrer", "nosniff, no-referrer"],
    [login.badge === `${login.broker} · active`, "the broker, active"],
  ]);

  // 2. The queues table: console.orders with its depth.
  await page.click('nav a[data-nav="destinations"]');
  const ordersPending = '#destinations tr[data-name="console.orders"] td[data-col="pending"]';
  await waitText(ordersPending, "12");
  // Filtering keeps the matching rows only; sorting by pending puts the deepest first.
  await page.fill("#destination-filter", "console.");
  await page.click('#destinations th[data-sort="pending"]');
  const order = await page.$$eval("#destinations tbody tr", (rows) => rows.map((row) => row.dataset.name));
  const queues = {
    pending: await cellText(ordersPending),
    order,
    // A queue named like markup (the JMS client made it) shows as its name, as text.
    markupName: await page.$$eval("#destinations tbody tr", (rows) => rows.map((row) => row.dataset.name).find((name) => name.includes("<"))),
    elements: await page.evaluate(() => document.querySelectorAll("#destinations b, #destinations img").length),
  };
  step("queues", queues, [
    [queues.order.join() === `console.paged,console.orders,console.keep,${MARKUP_QUEUE},console.work`, "the deepest first"],
    [queues.markupName === MARKUP_QUEUE && queues.elements === 0, "a queue's name is text"],
    [queues.order.every((name) => name.startsWith("console.")), "filtered"],
  ]);

  // 2b. The markup-named queue's page: the name round-trips through the URL and the API.
  await page.locator("#destinations tbody tr", { hasText: MARKUP_QUEUE }).locator('td[data-col="name"] a').click();
  await page.waitForFunction(() => document.querySelectorAll("#messages tbody tr[data-id]").length === 1, null, { timeout });
  const markupPage = {
    title: await cellText("main h1"),
    preview: await cellText("#messages tbody tr[data-id] td.preview"),
    elements: await page.evaluate(() => document.querySelectorAll("main b, main img").length),
  };
  step("markup_queue", markupPage, [
    [markupPage.title === `queue ${MARKUP_QUEUE}` && markupPage.elements === 0, "the name as text"],
    [markupPage.preview === `${MARKUP_QUEUE} #0`, "its message"],
  ]);
  await page.goto(`${admin}/#/destinations`);

  // 3. A queue's page: browse, then one message's detail.
  await page.click('#destinations tr[data-name="console.orders"] td[data-col="name"] a');
  await page.waitForFunction(() => document.querySelectorAll("#messages tbody tr[data-id]").length === 12, null, { timeout });
  const browsed = await page.$$eval("#messages tbody tr[data-id] td.preview", (cells) => cells.map((cell) => cell.textContent));
  const browseTotal = await page.getAttribute("#browse-total", "data-total");
  await shoot("queue-page");
  await page.click("#messages tbody tr[data-id] td a");
  await page.waitForSelector("#message-body");
  const properties = await page.$$eval("#message-properties tr", (rows) => rows.map((row) => [...row.children].map((cell) => cell.textContent)));
  const browse = { total: Number(browseTotal), previews: browsed, body: await cellText("#message-body"), properties };
  step("browse", browse, [
    [browse.total === 12, "12 messages"],
    [browse.previews[0] === "console.orders #0" && browse.previews[11] === "console.orders #11", "in delivery order"],
    [browse.body === "console.orders #0", "the first message's body"],
    [browse.properties.some(([name, value]) => name === "region" && value === "EU"), "its region property"],
  ]);
  await shoot("message-detail");

  // 3b. Paging: 60 messages, 50 a page.
  await page.goto(`${admin}/#/queue/console.paged`);
  await page.waitForFunction(() => document.querySelectorAll("#messages tbody tr[data-id]").length === 50, null, { timeout });
  const firstPage = { shown: await cellText("#browse-total"), first: await cellText("#messages tbody tr[data-id] td.preview") };
  await page.click("#browse-next");
  await page.waitForFunction(() => document.querySelectorAll("#messages tbody tr[data-id]").length === 10, null, { timeout });
  const secondPage = {
    shown: await cellText("#browse-total"),
    first: await cellText("#messages tbody tr[data-id] td.preview"),
    nextDisabled: await page.isDisabled("#browse-next"),
  };
  await page.fill("#browse-selector", "index >= 55");
  await page.click("#browse-apply");
  await page.waitForFunction(() => document.querySelectorAll("#messages tbody tr[data-id]").length === 5, null, { timeout });
  const selected = await cellText("#browse-total");
  step("paging", { firstPage, secondPage, selected }, [
    [firstPage.shown === "1–50 of 60" && firstPage.first === "console.paged #0", "the first page"],
    [secondPage.shown === "51–60 of 60" && secondPage.first === "console.paged #50" && secondPage.nextDisabled, "the second page"],
    [selected === "1–5 of 5", "the selector's page"],
  ]);

  // 4. The dead-letter queue: retry its messages to console.work, then have them consumed.
  await page.goto(`${admin}/#/queue/${encodeURIComponent("ActiveMQ.DLQ")}`);
  await waitText('#destination-cards [data-stat="pending"] .value', "3");
  await page.click('details[data-action="retry-form"] > summary');
  await page.click('#retry-form button[type="submit"]');
  await page.waitForFunction(() => /Retried 3/.test(document.getElementById("toast")?.textContent || ""), null, { timeout });
  const retried = await cellText("#toast");
  await waitText('#destination-cards [data-stat="pending"] .value', "0");
  const consumed = await jms("consume console.work 3");
  await page.goto(`${admin}/#/destinations`);
  const workRow = '#destinations tr[data-name="console.work"]';
  await waitText(`${workRow} td[data-col="pending"]`, "0");
  await page.waitForFunction((row) => Number(document.querySelector(`${row} td[data-col="dequeued"]`)?.textContent) >= 3, workRow, { timeout });
  const retry = {
    toast: retried,
    consumed,
    workPending: await cellText(`${workRow} td[data-col="pending"]`),
    workDequeued: await cellText(`${workRow} td[data-col="dequeued"]`),
  };
  step("retry", retry, [
    [retry.consumed.endsWith("console.work_#0,console.work_#1,console.work_#2"), "the JMS client got the three back"],
  ]);

  // 5. Purge console.orders from its page: its depth reaches 0.
  await page.goto(`${admin}/#/queue/console.orders`);
  await waitText('#destination-cards [data-stat="pending"] .value', "12");
  await page.click("#purge");
  await page.waitForFunction(() => /Purged 12/.test(document.getElementById("toast")?.textContent || ""), null, { timeout });
  await waitText('#destination-cards [data-stat="pending"] .value', "0");
  await page.waitForFunction(() => document.querySelector("#messages td.empty")?.textContent === "The queue is empty", null, { timeout });
  step("purge", { toast: await cellText("#toast"), pending: await cellText('#destination-cards [data-stat="pending"] .value') }, []);

  // 6. Send from the console to a new queue: a body that looks like markup stays text, the
  //    properties keep their types.
  const markup = '<img src=x onerror="window.__xss = 1">sent from the console ✓';
  await page.goto(`${admin}/#/queue/console.outbox`);
  await page.click('details[data-action="send-form"] > summary');
  await page.fill("#send-queue-body", markup);
  await page.fill("#send-queue-priority", "7");
  await page.fill("#send-queue-properties", "origin=console\ncount=3\nlabel=\"42\"");
  await page.click('#send-form button[type="submit"]');
  await page.waitForFunction(() => /^Sent ID:/.test(document.getElementById("toast")?.textContent || ""), null, { timeout });
  await page.waitForFunction(() => document.querySelectorAll("#messages tbody tr[data-id]").length === 1, null, { timeout });
  const sentPreview = await cellText("#messages tbody tr[data-id] td.preview");
  await page.click("#messages tbody tr[data-id] td a");
  await page.waitForSelector("#message-body");
  const sent = {
    preview: sentPreview,
    body: await cellText("#message-body"),
    properties: await page.$$eval("#message-properties tr", (rows) => rows.map((row) => [...row.children].map((cell) => cell.textContent))),
    priority: await page.$$eval("#message-detail table.kv tr", (rows) => rows.map((row) => [...row.children].map((cell) => cell.textContent)).find(([name]) => name === "Priority")?.[1]),
    images: await page.evaluate(() => document.querySelectorAll("img").length),
    xss: await page.evaluate(() => window.__xss ?? null),
  };
  step("send", sent, [
    [sent.preview === markup && sent.body === markup, "the body shown as text"],
    [sent.images === 0 && sent.xss === null, "no markup from the message ran"],
    [sent.priority === "7", "priority 7"],
    [JSON.stringify(sent.properties) === JSON.stringify([["count", "3"], ["label", "42"], ["origin", "console"]]), "the properties"],
  ]);

  // 7. Move it by selector to console.inbox, where the JMS client gets it.
  await page.goto(`${admin}/#/queue/console.outbox`);
  await page.click('details[data-action="move-form"] > summary');
  await page.fill("#move-to", "console.inbox");
  await page.fill("#move-selector", "origin = 'console' AND count = 3");
  await page.click('#move-form button[type="submit"]');
  await page.waitForFunction(() => /Moved 1 message\(s\) to console.inbox/.test(document.getElementById("toast")?.textContent || ""), null, { timeout });
  await waitText('#destination-cards [data-stat="pending"] .value', "0");
  const movedToast = await cellText("#toast");
  const received = await jms("consume console.inbox 1");
  step("move", { toast: movedToast, received }, [
    [received.endsWith(markup.replaceAll(" ", "_")), "the JMS client got the console's message"],
  ]);

  // 8. Delete console.inbox from its page: gone from the table.
  await page.goto(`${admin}/#/queue/console.inbox`);
  await waitText('#destination-cards [data-stat="pending"] .value', "0");
  await page.click("#delete-destination");
  await page.waitForFunction(() => window.location.hash === "#/destinations", null, { timeout });
  await page.waitForFunction(() => document.querySelector('#destinations tr[data-name="console.outbox"]') !== null
    && document.querySelector('#destinations tr[data-name="console.inbox"]') === null, null, { timeout });
  step("delete", { toast: await cellText("#toast") }, []);

  // 9. Durable subscribers: an offline one (made by the JMS client) is listed, and removed.
  await jms("subscribe console.news offline");
  await page.goto(`${admin}/#/subscriptions`);
  const offlineRow = '#subscriptions tr[data-subscription="offline"]';
  await page.waitForSelector(offlineRow);
  const subscription = await page.$$eval(`${offlineRow} td`, (cells) => cells.map((cell) => cell.textContent));
  await shoot("subscriptions");
  await page.click(`${offlineRow} button`);
  await page.waitForFunction((row) => document.querySelector(row) === null, offlineRow, { timeout });
  step("subscriptions", { subscription }, [
    [subscription[0] === "console-offline" && subscription[2] === "console.news" && subscription[4] === "offline", "the offline subscription"],
  ]);

  // 9b. Connections: the JMS client's are listed; one of them is closed from the console.
  await jms("open console-victim 1");
  await page.goto(`${admin}/#/connections`);
  await page.waitForFunction(() => [...document.querySelectorAll("#connections tr[data-connection]")]
    .some((row) => row.children[3]?.textContent === "console-victim"), null, { timeout });
  const connections = await page.$$eval("#connections tr[data-connection]", (rows) => rows.map((row) => [...row.children].map((cell) => cell.textContent)));
  await shoot("connections");
  const victim = await page.$$eval("#connections tr[data-connection]", (rows) => rows.find((row) => row.children[3]?.textContent === "console-victim")?.dataset.connection);
  await page.click(`#connections tr[data-connection="${victim}"] button`);
  await page.waitForFunction((id) => document.querySelector(`#connections tr[data-connection="${id}"]`) === null, victim, { timeout });
  const closed = await jms("closed console-victim 1");
  step("connections", { connections, closed }, [
    [connections.some((cells) => cells[1] === "openwire" && cells[3] === "console-victim" && cells[4] === "admin"), "the JMS connection, its protocol, client id and user"],
  ]);

  // 10. The dashboard's rate chart moves with a burst of messages.
  await page.goto(`${admin}/#/`);
  const samplesBefore = Number(await page.getAttribute("#rate-chart", "data-samples"));
  await jms("send console.rates 300");
  await page.waitForFunction(() => Number(document.getElementById("rate-chart")?.dataset.peak) > 0, null, { timeout });
  // One more poll, so that the burst is inside the line, not at its end.
  const polls = Number(await page.getAttribute("body", "data-polls"));
  await page.waitForFunction((n) => Number(document.body.dataset.polls) > n, polls, { timeout });
  await shoot("dashboard");
  const chart = {
    samplesBefore,
    samples: Number(await page.getAttribute("#rate-chart", "data-samples")),
    peak: Number(await page.getAttribute("#rate-chart", "data-peak")),
  };
  step("chart", chart, [
    [chart.peak > 0, "the line rose"],
    [chart.samples > chart.samplesBefore, "new samples"],
  ]);

  // 11. Cross-site requests are refused: from a page of another origin (the browser sends the
  //    credentials it holds, but no token), and with a foreign Origin header and the token.
  other = await serveOtherOrigin();
  const otherOrigin = `http://127.0.0.1:${other.address().port}`;
  const purgeKeep = `${admin}/api/destinations/queue/console.keep/purge`;
  const evil = await context.newPage();
  await evil.goto(`${otherOrigin}/`);
  const attempts = await evil.evaluate(async (target) => {
    const outcome = {};
    try {
      await fetch(target, { method: "POST", mode: "no-cors", credentials: "include", body: "{}" });
      outcome.noCors = "sent";
    } catch (error) {
      outcome.noCors = `failed: ${error}`;
    }
    try {
      const answer = await fetch(target, {
        method: "POST",
        credentials: "include",
        headers: { "Content-Type": "application/json", "X-Ferromq-Token": "guessed" },
        body: "{}",
      });
      outcome.cors = `answered ${answer.status}`;
    } catch (error) {
      outcome.cors = `failed: ${error}`;
    }
    return outcome;
  }, purgeKeep);
  // A form posted to the endpoint: the browser navigates to its answer.
  const submitted = evil.waitForNavigation({ timeout });
  await evil.evaluate((target) => {
    const form = document.createElement("form");
    form.method = "POST";
    form.action = target;
    document.body.appendChild(form);
    form.submit();
  }, purgeKeep);
  const formResponse = await submitted;
  const formAnswer = { status: formResponse?.status() ?? null, body: (await evil.textContent("body").catch(() => "")) || "" };
  await evil.close();
  const token = (await (await context.request.get(`${admin}/api/token`)).json()).token;
  const foreign = await context.request.post(purgeKeep, {
    headers: { Origin: "http://evil.example", "X-Ferromq-Token": token, "Content-Type": "application/json" },
    data: "{}",
  });
  const crossSite = await context.request.post(purgeKeep, {
    headers: { "Sec-Fetch-Site": "cross-site", "X-Ferromq-Token": token, "Content-Type": "application/json" },
    data: "{}",
  });
  const noToken = await context.request.post(purgeKeep, { headers: { "Content-Type": "application/json" }, data: "{}" });
  const keep = await (await context.request.get(`${admin}/api/destinations/queue/console.keep`)).json();
  const crossOrigin = {
    attempts,
    formAnswer,
    foreignOrigin: foreign.status(),
    crossSite: crossSite.status(),
    noToken: noToken.status(),
    keepPending: keep.pending + keep.in_flight,
  };
  step("cross_origin", crossOrigin, [
    [crossOrigin.formAnswer.status === 403, "a cross-site form is refused"],
    [crossOrigin.foreignOrigin === 403, "a foreign Origin is refused"],
    [crossOrigin.crossSite === 403, "Sec-Fetch-Site: cross-site is refused"],
    [crossOrigin.noToken === 403, "no token is refused"],
    [!/answered 2/.test(crossOrigin.attempts.cors), "the CORS fetch got nothing"],
    [crossOrigin.keepPending === 2, "console.keep kept its messages"],
  ]);
  result.ok = true;
} catch (error) {
  result.error = String(error?.stack || error);
  if (page && args.screenshots) {
    const path = join(args.screenshots, "failure.png");
    await page.screenshot({ path, fullPage: true }).then(() => result.screenshots.push(path)).catch(() => {});
  }
} finally {
  await context?.close().catch(() => {});
  other?.close();
  if (profile) await rm(profile, { recursive: true, force: true }).catch(() => {});
}
emit("result", result);
process.exitCode = result.ok ? 0 : 1;
process.exit();
