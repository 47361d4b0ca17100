// ferromq's web console: a single page over the admin endpoint's JSON API (api.js), built
// with DOM calls only (dom.js), with the rate chart of chart.js. The location's hash names
// the page (#/, #/destinations, #/queue/NAME, #/queue/NAME/message/ID, #/topic/NAME,
// #/subscriptions, #/connections); every 2 s the console reads /api/status, /api/broker and
// /api/destinations, feeds the rate chart and lets the page shown refresh what it shows.

import { ApiError, del, destinationPath, get, post, query } from "./api.js";
import { Rates, draw, formatRate } from "./chart.js";
import { bytes, count, duration, el, replace, time, toast } from "./dom.js";

const POLL_MS = 2000;
const PAGE_SIZE = 50;
const ADVISORY = "ActiveMQ.Advisory.";

const state = {
  status: null,
  broker: null,
  destinations: [],
  error: null,
  rates: new Rates(),
  polls: 0,
};

/** The page shown: `{ update() }`, called after every poll. */
let current = null;

// ----- polling ---------------------------------------------------------------------------

async function poll() {
  try {
    state.status = await get("/api/status");
    if (state.status.role === "active") {
      const [broker, destinations] = await Promise.all([get("/api/broker"), get("/api/destinations")]);
      state.broker = broker;
      state.destinations = destinations;
      const counted = destinations.filter((d) => !d.name.startsWith(ADVISORY));
      const sum = (key) => counted.reduce((total, d) => total + (d[key] || 0), 0);
      state.rates.add(Date.now(), sum("enqueued"), sum("dequeued"));
    }
    state.error = null;
  } catch (error) {
    state.error = error;
  }
  state.polls += 1;
  document.body.dataset.polls = String(state.polls);
  showBadge();
  try {
    current?.update?.();
  } catch (error) {
    console.error(error);
  }
  setTimeout(poll, POLL_MS);
}

function showBadge() {
  const badge = document.getElementById("broker-badge");
  if (state.error) {
    badge.className = "broker down";
    badge.textContent = state.error instanceof ApiError ? `error: ${state.error.message}` : "the broker does not answer";
    return;
  }
  const status = state.status;
  badge.className = "broker";
  badge.textContent = status ? `${status.name} · ${status.role}` : "";
}

/** The numbers of destination `kind` `name` from the last poll. */
function statsOf(kind, name) {
  return state.destinations.find((d) => d.kind === kind && d.name === name) || null;
}

function memoryPercent(destination) {
  const limit = destination.memory_limit_bytes || state.broker?.memory_limit_bytes || 0;
  return limit > 0 ? Math.min(100, Math.floor((destination.memory_bytes * 100) / limit)) : null;
}

function destinationLink(kind, name) {
  return `#/${kind}/${encodeURIComponent(name)}`;
}

/** Runs `action` (a promise-returning function), showing its outcome or its error. */
async function act(what, action) {
  try {
    const answer = await action();
    toast(typeof what === "function" ? what(answer) : what);
    return answer;
  } catch (error) {
    toast(`${error.message}`, true);
    return undefined;
  }
}

function errorPanel(error) {
  const status = error instanceof ApiError ? ` (${error.status})` : "";
  return el("div", { class: "panel error-panel" }, `Cannot read this${status}: ${error.message}`);
}

// ----- the dashboard ---------------------------------------------------------------------

function dashboard(container) {
  const cards = el("div", { class: "cards", id: "dashboard-cards" });
  const canvas = el("canvas", { id: "rate-chart", "aria-label": "messages per second" });
  const now = el("span", { class: "muted", id: "rate-now" });
  const deepest = el("tbody");
  replace(
    container,
    el("h1", {}, "Dashboard"),
    cards,
    el(
      "div",
      { class: "panel" },
      el("div", { class: "legend" },
        el("span", {}, el("span", { class: "swatch enqueue" }), "enqueued / s"),
        el("span", {}, el("span", { class: "swatch dequeue" }), "dequeued / s"),
        now),
      el("div", { class: "chart-wrap" }, canvas),
    ),
    el("h2", {}, "Deepest queues"),
    el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, el("th", {}, "Queue"), el("th", { class: "num" }, "Pending"),
        el("th", { class: "num" }, "Consumers"), el("th", { class: "num" }, "Enqueued"),
        el("th", { class: "num" }, "Dequeued"))),
      deepest),
  );
  const card = (label, value, sub, meter) =>
    el("div", { class: "card", "data-card": label.toLowerCase() },
      el("div", { class: "label" }, label), el("div", { class: "value" }, value),
      sub ? el("div", { class: "sub" }, sub) : null, meter || null);
  const usage = (used, limit) =>
    limit > 0 ? el("meter", { min: 0, max: limit, value: used, high: limit * 0.8 }) : null;
  const update = () => {
    const broker = state.broker;
    const status = state.status;
    if (!broker || !status) {
      replace(cards, card("Broker", status ? status.name : "…", status ? status.role : "waiting for the broker"));
      draw(canvas, state.rates);
      return;
    }
    const c = broker.connections;
    const queues = state.destinations.filter((d) => d.kind === "queue");
    const pending = queues.reduce((total, d) => total + d.pending + d.in_flight, 0);
    const limitText = (limit) => (limit > 0 ? ` of ${bytes(limit)}` : "");
    replace(
      cards,
      card("Broker", broker.name, `ferromq ${broker.version}`),
      card("Role", status.role, `since ${time(status.since_unix_ms)}`),
      card("Uptime", duration(broker.uptime_seconds)),
      card("Connections", count(c.stomp + c.openwire + (c.amqp || 0) + (c.mqtt || 0)),
        `OpenWire ${c.openwire} · STOMP ${c.stomp} · AMQP ${c.amqp || 0} · MQTT ${c.mqtt || 0}`),
      card("Destinations", `${count(broker.destinations.queues)} / ${count(broker.destinations.topics)}`, "queues / topics"),
      card("Pending", count(pending), "messages in queues"),
      card("Memory", bytes(broker.memory_bytes), `held${limitText(broker.memory_limit_bytes || 0)}`,
        usage(broker.memory_bytes, broker.memory_limit_bytes || 0)),
      card("Store", bytes(broker.store.used_bytes), `${broker.store.kind}${limitText(broker.store.limit_bytes)}`,
        usage(broker.store.used_bytes, broker.store.limit_bytes)),
      broker.temp
        ? card("Temp store", bytes(broker.temp.used_bytes), `${broker.temp.full ? "full · " : ""}${limitText(broker.temp.limit_bytes)}`,
          usage(broker.temp.used_bytes, broker.temp.limit_bytes))
        : null,
    );
    draw(canvas, state.rates);
    const last = state.rates.last();
    now.textContent = last ? `now: ${formatRate(last.enqueue)} in, ${formatRate(last.dequeue)} out per second` : "measuring…";
    const top = [...queues].sort((a, b) => b.pending + b.in_flight - (a.pending + a.in_flight)).slice(0, 8);
    replace(deepest, top.length === 0
      ? el("tr", {}, el("td", { class: "empty", colspan: 5 }, "No queues yet"))
      : top.map((d) => el("tr", { "data-name": d.name },
        el("td", { class: "name" }, el("a", { href: destinationLink("queue", d.name) }, d.name)),
        el("td", { class: "num" }, count(d.pending + d.in_flight)),
        el("td", { class: "num" }, count(d.consumers)),
        el("td", { class: "num" }, count(d.enqueued)),
        el("td", { class: "num" }, count(d.dequeued)))));
  };
  update();
  return { update };
}

// ----- queues and topics -----------------------------------------------------------------

const listing = { filter: "", kind: "all", advisory: false, sort: "name", descending: false };

const COLUMNS = [
  { key: "name", label: "Name", value: (d) => d.name.toLowerCase() },
  { key: "kind", label: "Type", value: (d) => d.kind },
  { key: "pending", label: "Pending", numeric: true, value: (d) => d.pending + d.in_flight },
  { key: "consumers", label: "Consumers", numeric: true, value: (d) => d.consumers },
  { key: "producers", label: "Producers", numeric: true, value: (d) => d.producers },
  { key: "enqueued", label: "Enqueued", numeric: true, value: (d) => d.enqueued },
  { key: "dequeued", label: "Dequeued", numeric: true, value: (d) => d.dequeued },
  { key: "memory", label: "Memory %", numeric: true, value: (d) => memoryPercent(d) ?? -1 },
];

function destinations(container) {
  const body = el("tbody");
  const headRow = el("tr");
  const shown = el("span", { class: "muted", id: "destination-count" });
  const filter = el("input", {
    type: "search", id: "destination-filter", placeholder: "Filter by name", value: listing.filter,
    oninput: (event) => { listing.filter = event.target.value; update(); },
  });
  const kind = el("select", { id: "destination-kind", onchange: (event) => { listing.kind = event.target.value; update(); } },
    ["all", "queue", "topic"].map((value) => el("option", { value, selected: listing.kind === value },
      value === "all" ? "Queues and topics" : `${value[0].toUpperCase()}${value.slice(1)}s`)));
  const advisory = el("input", { type: "checkbox", id: "destination-advisory", checked: listing.advisory,
    onchange: (event) => { listing.advisory = event.target.checked; update(); } });
  replace(
    container,
    el("h1", {}, "Queues and topics"),
    el("div", { class: "toolbar" }, filter, kind,
      el("label", {}, advisory, " advisory topics"), el("span", { class: "grow" }), shown),
    el("table", { class: "grid", id: "destinations" }, el("thead", {}, headRow), body),
  );
  const header = () => {
    replace(headRow, COLUMNS.map((column) => {
      const classes = ["sortable"];
      if (column.numeric) classes.push("num");
      if (listing.sort === column.key) classes.push(listing.descending ? "sorted-desc" : "sorted-asc");
      return el("th", {
        class: classes.join(" "), "data-sort": column.key, title: "Sort",
        onclick: () => {
          if (listing.sort === column.key) listing.descending = !listing.descending;
          else { listing.sort = column.key; listing.descending = Boolean(column.numeric); }
          update();
        },
      }, column.label);
    }));
  };
  const update = () => {
    header();
    const needle = listing.filter.trim().toLowerCase();
    const column = COLUMNS.find((c) => c.key === listing.sort) || COLUMNS[0];
    const rows = state.destinations
      .filter((d) => listing.kind === "all" || d.kind === listing.kind)
      .filter((d) => listing.advisory || !d.name.startsWith(ADVISORY))
      .filter((d) => !needle || d.name.toLowerCase().includes(needle))
      .sort((a, b) => {
        const x = column.value(a);
        const y = column.value(b);
        const order = x < y ? -1 : x > y ? 1 : a.name.localeCompare(b.name);
        return listing.descending ? -order : order;
      });
    shown.textContent = `${rows.length} of ${state.destinations.length}`;
    replace(body, rows.length === 0
      ? el("tr", {}, el("td", { class: "empty", colspan: COLUMNS.length }, state.destinations.length ? "Nothing matches" : "No destinations yet"))
      : rows.map((d) => {
        const percent = memoryPercent(d);
        return el("tr", { "data-name": d.name, "data-kind": d.kind },
          el("td", { class: "name", "data-col": "name" }, el("a", { href: destinationLink(d.kind, d.name) }, d.name)),
          el("td", { "data-col": "kind" }, el("span", { class: `badge kind-${d.kind}` }, d.kind)),
          el("td", { class: "num", "data-col": "pending" }, count(d.pending + d.in_flight)),
          el("td", { class: "num", "data-col": "consumers" }, count(d.consumers)),
          el("td", { class: "num", "data-col": "producers" }, count(d.producers)),
          el("td", { class: "num", "data-col": "enqueued" }, count(d.enqueued)),
          el("td", { class: "num", "data-col": "dequeued" }, count(d.dequeued)),
          el("td", { class: "num", "data-col": "memory", title: bytes(d.memory_bytes) },
            percent === null ? bytes(d.memory_bytes)
              : [el("meter", { class: "memory", min: 0, max: 100, value: percent, high: 80 }), ` ${percent}`]));
      }));
  };
  update();
  return { update };
}

// ----- one queue or topic ----------------------------------------------------------------

function statCards(kind, name) {
  const d = statsOf(kind, name);
  if (!d) return [el("div", { class: "card" }, el("div", { class: "label" }, "Not found"),
    el("div", { class: "sub" }, `No ${kind} ${name} on this broker (yet).`))];
  const card = (label, value, key) => el("div", { class: "card", "data-stat": key },
    el("div", { class: "label" }, label), el("div", { class: "value" }, value));
  const percent = memoryPercent(d);
  return [
    card("Pending", count(d.pending + d.in_flight), "pending"),
    card("In flight", count(d.in_flight), "in_flight"),
    card("Consumers", count(d.consumers), "consumers"),
    card("Producers", count(d.producers), "producers"),
    card("Enqueued", count(d.enqueued), "enqueued"),
    card("Dequeued", count(d.dequeued), "dequeued"),
    card("Expired", count(d.expired), "expired"),
    card("Dead-lettered", count(d.dead_lettered), "dead_lettered"),
    card("Memory", percent === null ? bytes(d.memory_bytes) : `${percent} % (${bytes(d.memory_bytes)})`, "memory"),
  ];
}

/** A form in a collapsible box; `submit(formData, form)` runs on submit. */
function actionBox(title, id, fields, button, submit, buttonClass) {
  const form = el("form", { class: "stack", id, onsubmit: async (event) => {
    event.preventDefault();
    const submitButton = form.querySelector("button[type=submit]");
    submitButton.disabled = true;
    try {
      await submit(new FormData(form), form);
    } finally {
      submitButton.disabled = false;
    }
  } }, fields, el("div", { class: "full" }, el("button", { type: "submit", class: buttonClass || "primary" }, button)));
  return el("details", { class: "action", "data-action": id }, el("summary", {}, title), form);
}

const field = (label, input, hint) => [el("label", { for: input.id }, label), input, hint ? el("div", { class: "hint" }, hint) : null];

function sendBox(kind, name, after) {
  const prefix = `send-${kind}`;
  return actionBox("Send a message", "send-form", [
    field("Body", el("textarea", { id: `${prefix}-body`, name: "body", placeholder: "The message body" })),
    field("Body type", el("select", { id: `${prefix}-body-type`, name: "body_type" },
      el("option", { value: "text" }, "text"), el("option", { value: "bytes" }, "bytes (base64)"))),
    field("Persistent", el("input", { type: "checkbox", id: `${prefix}-persistent`, name: "persistent", checked: true })),
    field("Priority", el("input", { type: "number", id: `${prefix}-priority`, name: "priority", min: 0, max: 9, placeholder: "4" })),
    field("Time to live (ms)", el("input", { type: "number", id: `${prefix}-ttl`, name: "ttl_ms", min: 0, placeholder: "never expires" })),
    field("Correlation id", el("input", { type: "text", id: `${prefix}-correlation`, name: "correlation_id" })),
    field("Reply to", el("input", { type: "text", id: `${prefix}-reply-to`, name: "reply_to", placeholder: "queue://NAME" })),
    field("Type", el("input", { type: "text", id: `${prefix}-type`, name: "type" })),
    field("Properties", el("textarea", { id: `${prefix}-properties`, name: "properties", placeholder: "name=value, one a line" }),
      "Numbers and true/false are sent as such; quote a value (\"42\") to send it as a string."),
  ], "Send", async (data, form) => {
    let properties;
    try {
      properties = parseProperties(String(data.get("properties") || ""));
    } catch (error) {
      toast(error.message, true);
      return;
    }
    const request = {
      body: String(data.get("body") || ""),
      body_type: String(data.get("body_type") || "text"),
      persistent: data.get("persistent") === "on",
      properties,
    };
    for (const key of ["priority", "ttl_ms"]) {
      const value = String(data.get(key) || "").trim();
      if (value) request[key] = Number(value);
    }
    for (const key of ["correlation_id", "reply_to", "type"]) {
      const value = String(data.get(key) || "").trim();
      if (value) request[key] = value;
    }
    const answer = await act((a) => `Sent ${a.id}`, () => post(`${destinationPath(kind, name)}/messages`, request));
    if (answer) {
      form.querySelector("textarea[name=body]").value = "";
      after();
    }
  });
}

/** `name=value` lines as a property map: numbers and booleans as such, "quoted" as strings. */
function parseProperties(text) {
  const properties = {};
  for (const [index, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`property line ${index + 1}: write name=value`);
    const key = line.slice(0, at).trim();
    const value = line.slice(at + 1).trim();
    if (/^".*"$/.test(value)) properties[key] = value.slice(1, -1);
    else if (value === "true" || value === "false") properties[key] = value === "true";
    else if (value !== "" && /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(value)) properties[key] = Number(value);
    else properties[key] = value;
  }
  return properties;
}

function deleteButton(kind, name) {
  const force = el("input", { type: "checkbox", id: "delete-force" });
  return el("span", { class: "delete-group" },
    el("button", { type: "button", class: "danger", id: "delete-destination", onclick: async () => {
      if (!window.confirm(`Delete ${kind} ${name}${kind === "topic" ? " and its durable subscriptions" : " and its messages"}?`)) return;
      const answer = await act(`Deleted ${kind} ${name}`,
        () => del(`${destinationPath(kind, name)}${query({ force: force.checked ? "true" : "false" })}`));
      if (answer) window.location.hash = "#/destinations";
    } }, `Delete ${kind}`),
    el("label", { title: "Close the consumers attached" }, " ", force, " force"));
}

function destinationPage(kind, name) {
  return (container) => {
    const cards = el("div", { class: "cards", id: "destination-cards" });
    const extra = el("div");
    const parts = [
      el("h1", {}, el("span", { class: `badge kind-${kind}` }, kind), " ", name),
      cards,
    ];
    let browser = null;
    const refresh = () => browser?.load();
    const toolbar = el("div", { class: "toolbar" });
    if (kind === "queue") {
      toolbar.append(
        el("button", { type: "button", class: "danger", id: "purge", onclick: async () => {
          if (!window.confirm(`Remove every message of queue ${name}?`)) return;
          await act((a) => `Purged ${a.removed} message(s)`, () => post(`${destinationPath(kind, name)}/purge`));
          refresh();
        } }, "Purge"),
      );
    }
    toolbar.append(deleteButton(kind, name));
    parts.push(el("div", { class: "panel" }, toolbar, sendBox(kind, name, refresh)));
    if (kind === "queue") {
      parts[parts.length - 1].append(
        actionBox("Move or copy messages", "move-form", [
          field("To queue", el("input", { type: "text", id: "move-to", name: "to", required: true })),
          field("Selector", el("input", { type: "text", id: "move-selector", name: "selector", placeholder: "every message (SQL 92, e.g. JMSPriority > 4)" })),
          field("At most", el("input", { type: "number", id: "move-limit", name: "limit", min: 1, placeholder: "all" })),
          field("Copy", el("input", { type: "checkbox", id: "move-copy", name: "copy" }), "Keep the messages here too"),
        ], "Move", async (data) => {
          const request = { to: String(data.get("to") || "").trim(), copy: data.get("copy") === "on" };
          const selector = String(data.get("selector") || "").trim();
          if (selector) request.selector = selector;
          const limit = String(data.get("limit") || "").trim();
          if (limit) request.limit = Number(limit);
          await act((a) => `${request.copy ? "Copied" : "Moved"} ${a.moved} message(s) to ${request.to}`,
            () => post(`${destinationPath(kind, name)}/move`, request));
          refresh();
        }),
        actionBox("Retry dead-lettered messages", "retry-form", [
          field("Selector", el("input", { type: "text", id: "retry-selector", name: "selector", placeholder: "every message" })),
          field("At most", el("input", { type: "number", id: "retry-limit", name: "limit", min: 1, placeholder: "all" })),
          el("div", { class: "full muted" }, "Each message goes back to the destination it was dead-lettered from; messages that do not say where they came from stay."),
        ], "Retry", async (data) => {
          const request = {};
          const selector = String(data.get("selector") || "").trim();
          if (selector) request.selector = selector;
          const limit = String(data.get("limit") || "").trim();
          if (limit) request.limit = Number(limit);
          await act((a) => `Retried ${a.retried} message(s)${a.skipped ? `; ${a.skipped} without an original destination stayed` : ""}`,
            () => post(`${destinationPath(kind, name)}/retry`, request));
          refresh();
        }),
      );
      browser = messageBrowser(name);
      parts.push(el("h2", {}, "Messages"), browser.node);
    } else {
      parts.push(el("h2", {}, "Subscriptions"), extra);
    }
    replace(container, ...parts);
    const update = () => {
      replace(cards, ...statCards(kind, name));
      if (kind === "topic") {
        const subscriptions = statsOf(kind, name)?.subscriptions || [];
        replace(extra, el("table", { class: "grid", id: "topic-subscriptions" },
          el("thead", {}, el("tr", {}, ["Subscription", "Durable", "Pending", "Consumers", "Enqueued", "Dequeued"]
            .map((label, index) => el("th", { class: index > 1 ? "num" : null }, label)))),
          el("tbody", {}, subscriptions.length === 0
            ? el("tr", {}, el("td", { class: "empty", colspan: 6 }, "No subscriptions"))
            : subscriptions.map((s) => el("tr", {},
              el("td", { class: "name" }, s.name),
              el("td", {}, s.durable ? "yes" : "no"),
              el("td", { class: "num" }, count(s.pending + s.in_flight)),
              el("td", { class: "num" }, count(s.consumers)),
              el("td", { class: "num" }, count(s.enqueued)),
              el("td", { class: "num" }, count(s.dequeued)))))));
      }
    };
    update();
    browser?.load();
    return { update };
  };
}

/** The paged list of a queue's messages, in delivery order, with a selector. */
function messageBrowser(name) {
  let offset = 0;
  let selector = "";
  const body = el("tbody");
  const total = el("span", { class: "muted", id: "browse-total" });
  const previous = el("button", { type: "button", id: "browse-previous", onclick: () => { offset = Math.max(0, offset - PAGE_SIZE); load(); } }, "‹ Previous");
  const next = el("button", { type: "button", id: "browse-next", onclick: () => { offset += PAGE_SIZE; load(); } }, "Next ›");
  const selectorInput = el("input", { type: "text", id: "browse-selector", class: "grow", placeholder: "Selector (SQL 92), e.g. JMSType = 'order' AND amount > 10" });
  const form = el("form", { class: "toolbar", onsubmit: (event) => { event.preventDefault(); selector = selectorInput.value.trim(); offset = 0; load(); } },
    selectorInput, el("button", { type: "submit", id: "browse-apply" }, "Browse"),
    el("button", { type: "button", id: "browse-refresh", onclick: () => load() }, "Refresh"));
  const node = el("div", { id: "browser" }, form,
    el("table", { class: "grid", id: "messages" },
      el("thead", {}, el("tr", {}, ["Message id", "Time", "Priority", "Persistent", "Deliveries", "Type", "Body", "Size"]
        .map((label, index) => el("th", { class: [2, 4, 7].includes(index) ? "num" : null }, label)))),
      body),
    el("div", { class: "pager" }, previous, next, total));
  const load = async () => {
    try {
      const page = await get(`${destinationPath("queue", name)}/messages${query({ offset, limit: PAGE_SIZE, selector })}`);
      const messages = page.messages || [];
      total.textContent = messages.length === 0 ? `none of ${count(page.total)}`
        : `${count(page.offset + 1)}–${count(page.offset + messages.length)} of ${count(page.total)}`;
      total.dataset.total = String(page.total);
      previous.disabled = page.offset === 0;
      next.disabled = page.offset + messages.length >= page.total;
      replace(body, messages.length === 0
        ? el("tr", {}, el("td", { class: "empty", colspan: 8 }, selector ? "No message matches" : "The queue is empty"))
        : messages.map((m) => el("tr", { "data-id": m.id },
          el("td", { class: "mono name" }, el("a", { href: `#/queue/${encodeURIComponent(name)}/message/${encodeURIComponent(m.id)}` }, m.id)),
          el("td", {}, time(m.timestamp_ms)),
          el("td", { class: "num" }, m.priority),
          el("td", {}, m.persistent ? "yes" : "no"),
          el("td", { class: "num" }, m.delivery_count),
          el("td", {}, m.type || ""),
          el("td", { class: "preview mono", title: m.body_type }, previewText(m, 120)),
          el("td", { class: "num" }, bytes(m.body_size)))));
    } catch (error) {
      total.textContent = "";
      replace(body, el("tr", {}, el("td", { class: "empty", colspan: 8 }, `Cannot browse: ${error.message}`)));
    }
  };
  return { node, load };
}

function previewText(message, cut) {
  if (message.body_preview === null || message.body_preview === undefined) return message.body_type === "none" ? "(no body)" : "";
  const text = typeof message.body_preview === "string" ? message.body_preview : JSON.stringify(message.body_preview);
  const prefix = message.body_type === "text" || message.body_type === "map" ? "" : `${message.body_type}, base64: `;
  return `${prefix}${text.length > cut ? `${text.slice(0, cut)}…` : text}`;
}

function messagePage(name, id) {
  return (container) => {
    const detail = el("div", { id: "message-detail" }, "Loading…");
    replace(container,
      el("h1", {}, el("a", { href: destinationLink("queue", name) }, name), " › ", el("span", { class: "mono" }, id)),
      detail);
    const path = `${destinationPath("queue", name)}/messages/${encodeURIComponent(id)}`;
    (async () => {
      let m;
      try {
        m = await get(path);
      } catch (error) {
        replace(detail, errorPanel(error));
        return;
      }
      const row = (label, value) => el("tr", {}, el("th", {}, label), el("td", { class: "mono" }, value ?? "–"));
      const properties = Object.entries(m.properties || {});
      replace(detail,
        el("div", { class: "toolbar" },
          el("button", { type: "button", class: "danger", id: "delete-message", onclick: async () => {
            if (!window.confirm(`Remove message ${id} from ${name}?`)) return;
            const answer = await act("Message removed", () => del(path));
            if (answer) window.location.hash = destinationLink("queue", name);
          } }, "Remove this message")),
        el("h2", {}, "Headers"),
        el("table", { class: "grid kv" }, el("tbody", {},
          row("Message id", m.id),
          row("Destination", `${m.destination.kind}://${m.destination.name}`),
          row("Timestamp", m.timestamp_ms ? `${time(m.timestamp_ms)} (${m.timestamp_ms})` : null),
          row("Expiration", m.expiration_ms ? `${time(m.expiration_ms)} (${m.expiration_ms})` : "never"),
          row("Priority", m.priority),
          row("Persistent", m.persistent ? "yes" : "no"),
          row("Redelivered", m.redelivered ? "yes" : "no"),
          row("Delivery count", m.delivery_count),
          row("Correlation id", m.correlation_id),
          row("Reply to", m.reply_to),
          row("Type", m.type),
          row("Group id", m.group_id))),
        el("h2", {}, `Properties (${properties.length})`),
        el("table", { class: "grid kv", id: "message-properties" }, el("tbody", {}, properties.length === 0
          ? el("tr", {}, el("td", { class: "empty", colspan: 2 }, "None"))
          : properties.map(([key, value]) => row(key, typeof value === "string" ? value : JSON.stringify(value))))),
        el("h2", {}, `Body: ${m.body_type}, ${bytes(m.body_size)}${m.body_truncated ? " (cut short)" : ""}`),
        bodyView(m));
    })();
    return { update() {} };
  };
}

/** A map body (a JSON object, or its text) indented. */
function prettyMap(preview) {
  if (typeof preview !== "string") return JSON.stringify(preview, null, 2);
  try {
    return JSON.stringify(JSON.parse(preview), null, 2);
  } catch {
    return preview;
  }
}

function bodyView(m) {
  if (m.body_preview === null || m.body_preview === undefined) return el("p", { class: "muted" }, "No body.");
  if (m.body_type === "text") return el("pre", { class: "body", id: "message-body" }, m.body_preview);
  if (m.body_type === "map") return el("pre", { class: "body", id: "message-body" }, prettyMap(m.body_preview));
  // bytes, object, stream: base64 of the first bytes, shown as a hex dump.
  let raw;
  try {
    raw = atob(m.body_preview);
  } catch {
    return el("pre", { class: "body", id: "message-body" }, m.body_preview);
  }
  const lines = [];
  for (let at = 0; at < raw.length; at += 16) {
    const chunk = raw.slice(at, at + 16);
    const hex = [...chunk].map((c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
    const ascii = [...chunk].map((c) => (c.charCodeAt(0) >= 32 && c.charCodeAt(0) < 127 ? c : ".")).join("");
    lines.push(`${at.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return el("pre", { class: "body", id: "message-body" }, lines.join("\n"));
}

// ----- durable subscribers ---------------------------------------------------------------

function subscriptions(container) {
  const body = el("tbody");
  replace(container, el("h1", {}, "Durable topic subscribers"),
    el("table", { class: "grid", id: "subscriptions" },
      el("thead", {}, el("tr", {}, ["Client id", "Subscription", "Topic", "Selector", "State", "Pending", ""]
        .map((label, index) => el("th", { class: index === 5 ? "num" : null }, label)))),
      body));
  let failed = null;
  const update = async () => {
    let list;
    try {
      list = await get("/api/subscriptions");
      failed = null;
    } catch (error) {
      if (!failed) replace(body, el("tr", {}, el("td", { class: "empty", colspan: 7 }, `Cannot list: ${error.message}`)));
      failed = error;
      return;
    }
    list.sort((a, b) => Number(b.active) - Number(a.active) || a.client_id.localeCompare(b.client_id) || a.subscription_name.localeCompare(b.subscription_name));
    replace(body, list.length === 0 ? el("tr", {}, el("td", { class: "empty", colspan: 7 }, "No durable subscriptions"))
      : list.map((s) => el("tr", { "data-client-id": s.client_id, "data-subscription": s.subscription_name },
        el("td", { class: "name" }, s.client_id),
        el("td", { class: "name" }, s.subscription_name),
        el("td", { class: "name" }, el("a", { href: destinationLink("topic", s.topic) }, s.topic)),
        el("td", { class: "mono" }, s.selector || ""),
        el("td", {}, el("span", { class: `badge ${s.active ? "on" : "off"}` }, s.active ? "active" : "offline")),
        el("td", { class: "num" }, count(s.pending)),
        el("td", {}, s.active ? null : el("button", { type: "button", class: "danger", onclick: async () => {
          if (!window.confirm(`Remove the durable subscription ${s.client_id}:${s.subscription_name} and its ${s.pending} message(s)?`)) return;
          await act("Subscription removed", () => del(`/api/subscriptions/${encodeURIComponent(s.client_id)}/${encodeURIComponent(s.subscription_name)}`));
          update();
        } }, "Remove")))));
  };
  update();
  return { update };
}

// ----- connections -----------------------------------------------------------------------

function connections(container) {
  const body = el("tbody");
  const consumers = el("tbody");
  const producers = el("tbody");
  const head = (labels, numeric) => el("thead", {}, el("tr", {}, labels.map((label, index) =>
    el("th", { class: numeric.includes(index) ? "num" : null }, label))));
  replace(container, el("h1", {}, "Connections"),
    el("table", { class: "grid", id: "connections" },
      head(["Id", "Protocol", "Remote address", "Client id", "User", "Connected", "Consumers", "Producers", ""], [6, 7]), body),
    el("h2", {}, "Consumers"),
    el("table", { class: "grid", id: "consumers" },
      head(["Connection", "Consumer", "Destination", "Selector", "Prefetch", "In flight", "Durable subscription"], [4, 5]), consumers),
    el("h2", {}, "Producers"),
    el("table", { class: "grid", id: "producers" }, head(["Connection", "Producer", "Destination", "Sent"], [3]), producers));
  const destinationText = (d) => (d ? `${d.kind}://${d.name}` : "(any)");
  const fill = async (target, path, columns, row) => {
    let list;
    try {
      list = await get(path);
    } catch (error) {
      replace(target, el("tr", {}, el("td", { class: "empty", colspan: columns }, `Cannot list: ${error.message}`)));
      return;
    }
    replace(target, list.length === 0 ? el("tr", {}, el("td", { class: "empty", colspan: columns }, "None")) : list.map(row));
  };
  const update = async () => {
    await Promise.all([
      fill(body, "/api/connections", 9, (c) => el("tr", { "data-connection": c.id },
        el("td", { class: "mono name" }, c.id),
        el("td", {}, c.protocol),
        el("td", { class: "mono" }, c.remote),
        el("td", { class: "name" }, c.client_id || ""),
        el("td", {}, c.user || ""),
        el("td", {}, time(c.connected_since_ms)),
        el("td", { class: "num" }, count(c.consumers)),
        el("td", { class: "num" }, count(c.producers)),
        el("td", {}, el("button", { type: "button", class: "danger", onclick: async () => {
          if (!window.confirm(`Close connection ${c.id} (${c.protocol} from ${c.remote})?`)) return;
          await act("Connection closed", () => del(`/api/connections/${encodeURIComponent(c.id)}`));
          update();
        } }, "Close")))),
      fill(consumers, "/api/consumers", 7, (c) => el("tr", {},
        el("td", { class: "mono name" }, c.connection_id),
        el("td", { class: "mono name" }, c.consumer_id),
        el("td", { class: "name" }, el("a", { href: destinationLink(c.destination.kind, c.destination.name) }, destinationText(c.destination))),
        el("td", { class: "mono" }, c.selector || ""),
        el("td", { class: "num" }, count(c.prefetch)),
        el("td", { class: "num" }, count(c.in_flight)),
        el("td", { class: "name" }, c.durable_subscription || ""))),
      fill(producers, "/api/producers", 4, (p) => el("tr", {},
        el("td", { class: "mono name" }, p.connection_id),
        el("td", { class: "mono name" }, p.producer_id),
        el("td", { class: "name" }, destinationText(p.destination)),
        el("td", { class: "num" }, count(p.sent)))),
    ]);
  };
  update();
  return { update };
}

// ----- routing ---------------------------------------------------------------------------

const ROUTES = [
  [/^#?\/?$/, "dashboard", () => dashboard],
  [/^#\/destinations$/, "destinations", () => destinations],
  [/^#\/queue\/([^/]+)\/message\/([^/]+)$/, "destinations", (m) => messagePage(decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^#\/(queue|topic)\/([^/]+)$/, "destinations", (m) => destinationPage(m[1], decodeURIComponent(m[2]))],
  [/^#\/subscriptions$/, "subscriptions", () => subscriptions],
  [/^#\/connections$/, "connections", () => connections],
];

function show() {
  const hash = window.location.hash || "#/";
  const container = document.getElementById("view");
  let page = null;
  let section = null;
  for (const [pattern, name, make] of ROUTES) {
    const match = hash.match(pattern);
    if (match) {
      try {
        page = make(match);
        section = name;
      } catch {
        page = null;
      }
      break;
    }
  }
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("current", link.dataset.nav === section);
  }
  if (!page) {
    current = null;
    replace(container, el("h1", {}, "Not found"), el("p", {}, "No such page: ", el("code", {}, hash), ". ",
      el("a", { href: "#/" }, "Back to the dashboard")));
    return;
  }
  current = page(container);
  document.body.dataset.page = section;
}

window.addEventListener("hashchange", show);
window.addEventListener("resize", () => current?.update?.());
show();
poll();
