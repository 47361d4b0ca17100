// ferromq's browser test page: mqtt.js (MQTT 3.1.1 and 5.0) and stomp.js (STOMP 1.2) over
// ws:// in the browser, driven by run.mjs through window.ferromq (start, publish, done,
// finish). Everything the page sees is kept in window.ferromq.state, which run.mjs prints.
/* global mqtt, StompJs */
"use strict";

(() => {
  // What the page sends; the JMS check (tests/java/MqttJmsChecks.java, `browser`) expects
  // exactly these bodies.
  const MQTT_PREFIX = [0x00, 0x01, 0xfe, 0xff];
  const SENT = {
    4: "mqtt.js 3.1.1 → ferromq ✓",
    5: "mqtt.js 5.0 → ferromq ✓",
    stomp: "stomp.js 1.2 → ferromq ✓",
  };
  // What the page waits for: the JMS check sends two messages to topic browser.in (a text and a
  // bytes message), which each MQTT client receives, and one to topic browser.stomp.in.
  const EXPECTED = { mqtt: 2, stomp: 1 };
  const TIMEOUT_MS = 20000;

  const state = {
    sockets: [],
    errors: [],
    mqtt: { 4: { received: [] }, 5: { received: [] } },
    stomp: { received: [] },
    sent: {},
  };
  const clients = {};

  const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  const utf8 = (text) => new TextEncoder().encode(text);
  const mqttPayload = (version) => {
    const text = utf8(SENT[version]);
    const bytes = new Uint8Array(MQTT_PREFIX.length + text.length);
    bytes.set(MQTT_PREFIX, 0);
    bytes.set(text, MQTT_PREFIX.length);
    return bytes;
  };
  const withTimeout = (what, promise) =>
    Promise.race([
      promise,
      new Promise((_, reject) =>
        setTimeout(() => reject(new Error(`${what}: no answer in ${TIMEOUT_MS} ms`)), TIMEOUT_MS),
      ),
    ]);

  // Every WebSocket the page opens, with the subprotocols offered and the one the broker chose.
  const NativeWebSocket = window.WebSocket;
  window.WebSocket = class extends NativeWebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      const record = { url: String(url), offered: protocols ?? null, protocol: null, closed: null };
      state.sockets.push(record);
      this.addEventListener("open", () => {
        record.protocol = this.protocol;
      });
      this.addEventListener("close", (event) => {
        record.closed = { code: event.code, reason: event.reason, clean: event.wasClean };
      });
    }
  };

  function connectMqtt(url, version) {
    return withTimeout(
      `mqtt.js ${version} CONNECT`,
      new Promise((resolve, reject) => {
        const client = mqtt.connect(url, {
          protocolVersion: version,
          clientId: `ferromq-browser-v${version}-${Math.random().toString(16).slice(2, 10)}`,
          clean: true,
          keepalive: 30,
          reconnectPeriod: 0,
          connectTimeout: TIMEOUT_MS,
        });
        client.once("connect", (connack) => {
          state.mqtt[version].connack = {
            returnCode: connack.returnCode ?? null,
            reasonCode: connack.reasonCode ?? null,
            sessionPresent: connack.sessionPresent,
          };
          resolve(client);
        });
        client.on("error", (error) => {
          state.errors.push(`mqtt.js ${version}: ${error.message}`);
          reject(error);
        });
        client.on("close", () => reject(new Error(`mqtt.js ${version}: closed before CONNACK`)));
        client.on("message", (topic, payload, packet) => {
          state.mqtt[version].received.push({
            topic,
            hex: hex(payload),
            qos: packet.qos,
            userProperties: packet.properties?.userProperties ?? null,
          });
        });
      }),
    );
  }

  function subscribeMqtt(client, version) {
    return withTimeout(
      `mqtt.js ${version} SUBSCRIBE`,
      new Promise((resolve, reject) => {
        client.subscribe("browser/in", { qos: 1 }, (error, granted) => {
          if (error) return reject(error);
          state.mqtt[version].granted = granted.map((g) => g.qos);
          if (granted.some((g) => g.qos >= 0x80)) {
            return reject(new Error(`mqtt.js ${version}: subscription refused ${granted[0].qos}`));
          }
          resolve();
        });
      }),
    );
  }

  function connectStomp(url) {
    return withTimeout(
      "stomp.js CONNECT",
      new Promise((resolve, reject) => {
        const client = new StompJs.Client({
          brokerURL: url,
          stompVersions: new StompJs.Versions([StompJs.Versions.V1_2]),
          reconnectDelay: 0,
          heartbeatIncoming: 10000,
          heartbeatOutgoing: 10000,
        });
        client.onConnect = (frame) => {
          state.stomp.connected = { version: frame.headers.version, server: frame.headers.server };
          resolve(client);
        };
        client.onStompError = (frame) => {
          state.errors.push(`stomp.js ERROR: ${frame.headers.message} ${frame.body}`);
          reject(new Error(`stomp.js ERROR: ${frame.headers.message}`));
        };
        client.onWebSocketError = () => {
          state.errors.push("stomp.js: WebSocket error");
          reject(new Error("stomp.js: WebSocket error"));
        };
        client.onWebSocketClose = (event) => {
          reject(new Error(`stomp.js: WebSocket closed (${event.code}) before CONNECTED`));
        };
        client.activate();
      }),
    );
  }

  // Resolves when the broker sends the RECEIPT asked for by `send(receipt)`.
  function withReceipt(client, receipt, send) {
    return withTimeout(
      `stomp.js RECEIPT ${receipt}`,
      new Promise((resolve) => {
        client.watchForReceipt(receipt, () => resolve());
        send(receipt);
      }),
    );
  }

  async function start(url) {
    clients[4] = await connectMqtt(url, 4);
    clients[5] = await connectMqtt(url, 5);
    await subscribeMqtt(clients[4], 4);
    await subscribeMqtt(clients[5], 5);
    clients.stomp = await connectStomp(url);
    await withReceipt(clients.stomp, "subscribed", (receipt) =>
      clients.stomp.subscribe(
        "/topic/browser.stomp.in",
        (message) => {
          state.stomp.received.push({
            destination: message.headers.destination,
            body: message.body,
            hex: hex(message.binaryBody),
          });
        },
        { receipt },
      ),
    );
    return state;
  }

  function publishMqtt(version, options) {
    return withTimeout(
      `mqtt.js ${version} PUBLISH`,
      new Promise((resolve, reject) => {
        const payload = mqttPayload(version);
        state.sent[version] = hex(payload);
        clients[version].publish("browser/out", payload, options, (error) =>
          error ? reject(error) : resolve(),
        );
      }),
    );
  }

  async function publish() {
    await publishMqtt(4, { qos: 1 });
    await publishMqtt(5, { qos: 1, properties: { userProperties: { origin: "mqtt.js" } } });
    state.sent.stomp = SENT.stomp;
    await withReceipt(clients.stomp, "sent", (receipt) =>
      clients.stomp.publish({
        destination: "/queue/browser.stomp.out",
        body: SENT.stomp,
        headers: { receipt, "content-type": "text/plain" },
      }),
    );
    return state;
  }

  const done = () =>
    state.mqtt[4].received.length >= EXPECTED.mqtt &&
    state.mqtt[5].received.length >= EXPECTED.mqtt &&
    state.stomp.received.length >= EXPECTED.stomp;

  async function finish() {
    const ended = [4, 5].map(
      (version) => new Promise((resolve) => clients[version]?.end(false, {}, resolve) ?? resolve()),
    );
    await Promise.all([...ended, clients.stomp?.deactivate()]);
    return state;
  }

  window.ferromq = { state, start, publish, done, finish };
})();
