// ferromq's real-browser test driver: serves index.html, page.js and the browser bundles of
// mqtt.js and stomp.js from a static HTTP server on a free loopback port, launches Debian's
// Chromium through playwright-core, and in the page connects mqtt.js (MQTT 3.1.1 and 5.0) and
// stomp.js (STOMP 1.2) to the broker's ws:// connector.
//
//   node run.mjs --ws ws://127.0.0.1:PORT [--chromium /usr/bin/chromium] [--timeout-ms 60000]
//
// It talks to its caller (tests/tests/integration/browser.rs) in lines on stdout:
//   ready {json}   every client is connected and subscribed: the caller (its JMS client) now sends to topics
//                  browser.in and browser.stomp.in; the page then publishes its messages
//   result {json}  what the page saw (sockets and their subprotocols, CONNACKs, messages
//                  received, errors); "ok": true when every expected message arrived
// Diagnostics go to stderr. Exit status 0 with ok, 1 otherwise.
import { createServer } from "node:http";
import { readFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    ws: { type: "string" },
    chromium: { type: "string", default: process.env.FERROMQ_CHROMIUM || "/usr/bin/chromium" },
    "timeout-ms": { type: "string", default: "60000" },
  },
});
if (!args.ws) {
  console.error("usage: node run.mjs --ws ws://HOST:PORT [--chromium PATH] [--timeout-ms N]");
  process.exit(2);
}
const timeout = Number(args["timeout-ms"]);

// The known working flags on these machines (/work/.library/env/machines/rust.md): without the
// background-networking ones Chromium keeps trying Google's hosts on a closed network.
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

const FILES = {
  "/": ["index.html", "text/html; charset=utf-8"],
  "/index.html": ["index.html", "text/html; charset=utf-8"],
  "/page.js": ["page.js", "text/javascript; charset=utf-8"],
  "/mqtt.min.js": ["node_modules/mqtt/dist/mqtt.min.js", "text/javascript; charset=utf-8"],
  "/stomp.umd.min.js": [
    "node_modules/@stomp/stompjs/bundles/stomp.umd.min.js",
    "text/javascript; charset=utf-8",
  ],
};

function serve() {
  const server = createServer(async (request, response) => {
    const path = new URL(request.url, "http://localhost").pathname;
    const file = FILES[path];
    if (path === "/favicon.ico") {
      response.writeHead(204).end();
      return;
    }
    if (!file) {
      response.writeHead(404).end();
      return;
    }
    try {
      const body = await readFile(join(here, file[0]));
      response.writeHead(200, { "content-type": file[1], "cache-control": "no-store" }).end(body);
    } catch (error) {
      response.writeHead(500).end(String(error));
    }
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

const emit = (kind, value) => process.stdout.write(`${kind} ${JSON.stringify(value)}\n`);

let server;
let context;
let profile;
let page;
let result = { ok: false };
try {
  server = await serve();
  const origin = `http://127.0.0.1:${server.address().port}`;
  profile = await mkdtemp(join(tmpdir(), "ferromq-chromium-"));
  // A fresh profile each run; Playwright passes it to Chromium as --user-data-dir.
  context = await chromium.launchPersistentContext(profile, {
    executablePath: args.chromium,
    headless: true,
    args: CHROMIUM_FLAGS,
    timeout,
  });
  result.browser = context.browser()?.version() ?? null;
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(timeout);
  page.on("console", (message) => console.error(`[page ${message.type()}] ${message.text()}`));
  page.on("pageerror", (error) => console.error(`[page error] ${error.message}`));
  await page.goto(`${origin}/index.html`);
  result.origin = origin;

  const ready = await page.evaluate((url) => window.ferromq.start(url), args.ws);
  emit("ready", { sockets: ready.sockets, mqtt: ready.mqtt, stomp: ready.stomp });
  await page.evaluate(() => window.ferromq.publish());
  await page.waitForFunction(() => window.ferromq.done(), null, { timeout });
  await page.evaluate(() => window.ferromq.finish());
  result.ok = true;
} catch (error) {
  result.error = String(error?.stack || error);
} finally {
  if (page) {
    try {
      result.state = await page.evaluate(() => window.ferromq?.state ?? null);
    } catch (error) {
      result.stateError = String(error);
    }
  }
  await context?.close().catch(() => {});
  server?.close();
  if (profile) await rm(profile, { recursive: true, force: true }).catch(() => {});
}
emit("result", result);
process.exitCode = result.ok ? 0 : 1;
