// The dashboard's message-rate chart: enqueues and dequeues per second over the last
// minutes, computed from the counters of /api/destinations polled every 2 s and drawn on a
// canvas (no library). The samples live in `Rates` for the whole session, so the chart keeps
// its history while another page is shown.

/** How many samples are kept: 150 at 2 s, five minutes. */
const KEEP = 150;

export class Rates {
  constructor() {
    this.samples = [];
    this.previous = null;
  }

  /** Adds the totals read at `at` (ms); the rate is the change since the previous read. */
  add(at, enqueued, dequeued) {
    if (this.previous && at > this.previous.at) {
      const seconds = (at - this.previous.at) / 1000;
      // A counter that went down is a restarted broker: no rate for that step.
      const rate = (now, before) => (now >= before ? (now - before) / seconds : 0);
      this.samples.push({
        at,
        enqueue: rate(enqueued, this.previous.enqueued),
        dequeue: rate(dequeued, this.previous.dequeued),
      });
      if (this.samples.length > KEEP) this.samples.shift();
    }
    this.previous = { at, enqueued, dequeued };
  }

  last() {
    return this.samples[this.samples.length - 1] || null;
  }
}

const COLORS = { enqueue: "#b7410e", dequeue: "#1f5fa8", grid: "#e3e7eb", text: "#5f6b76" };

/** Draws `rates` on `canvas`, and records what it drew in the canvas's data attributes. */
export function draw(canvas, rates) {
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(200, canvas.clientWidth);
  const height = Math.max(120, canvas.clientHeight);
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const context = canvas.getContext("2d");
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  context.clearRect(0, 0, width, height);

  const samples = rates.samples;
  const peak = samples.reduce((max, s) => Math.max(max, s.enqueue, s.dequeue), 0);
  const top = niceCeiling(peak);
  const left = 56;
  const right = 10;
  const plotTop = 10;
  const bottom = 24;
  const plotWidth = width - left - right;
  const plotHeight = height - plotTop - bottom;

  context.font = "11px system-ui, sans-serif";
  context.fillStyle = COLORS.text;
  context.strokeStyle = COLORS.grid;
  context.lineWidth = 1;
  context.textAlign = "right";
  context.textBaseline = "middle";
  for (let step = 0; step <= 4; step += 1) {
    const value = (top * step) / 4;
    const y = plotTop + plotHeight - (plotHeight * step) / 4;
    context.beginPath();
    context.moveTo(left, Math.round(y) + 0.5);
    context.lineTo(left + plotWidth, Math.round(y) + 0.5);
    context.stroke();
    context.fillText(`${formatRate(value)}/s`, left - 6, y);
  }
  context.textAlign = "center";
  context.textBaseline = "top";
  const span = KEEP - 1;
  for (const minutesAgo of [5, 4, 3, 2, 1, 0]) {
    const x = left + plotWidth - (plotWidth * minutesAgo * 30) / span;
    context.fillText(minutesAgo === 0 ? "now" : `-${minutesAgo} min`, x, plotTop + plotHeight + 6);
  }

  const line = (key) => {
    if (samples.length < 1) return;
    context.strokeStyle = COLORS[key];
    context.lineWidth = 2;
    context.beginPath();
    samples.forEach((sample, index) => {
      const age = samples.length - 1 - index;
      const x = left + plotWidth - (plotWidth * age) / span;
      const y = plotTop + plotHeight - (top > 0 ? (plotHeight * sample[key]) / top : 0);
      if (index === 0) context.moveTo(x, y);
      else context.lineTo(x, y);
    });
    if (samples.length === 1) context.lineTo(left + plotWidth, plotTop + plotHeight - (top > 0 ? (plotHeight * samples[0][key]) / top : 0));
    context.stroke();
  };
  line("dequeue");
  line("enqueue");

  const last = rates.last();
  canvas.dataset.samples = String(samples.length);
  canvas.dataset.peak = String(peak);
  canvas.dataset.enqueueRate = last ? String(last.enqueue) : "0";
  canvas.dataset.dequeueRate = last ? String(last.dequeue) : "0";
}

/** The smallest of 1, 2, 5 x 10^n at or above `value` (at least 1). */
function niceCeiling(value) {
  if (value <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const factor of [1, 2, 5, 10]) {
    if (factor * magnitude >= value) return factor * magnitude;
  }
  return 10 * magnitude;
}

export function formatRate(value) {
  if (value >= 1000) return `${(value / 1000).toFixed(value >= 10000 ? 0 : 1)}k`;
  if (value >= 10 || value === 0) return value.toFixed(0);
  return value.toFixed(1);
}
