// A small live line chart on a canvas, one line per key over the last minute: no library, so
// the page works where nothing but the daemon can be reached.
"use strict";

window.LiveChart = class LiveChart {
  constructor(canvas, legend, seconds) {
    this.canvas = canvas;
    this.legend = legend;
    this.seconds = seconds;
    this.series = new Map(); // key -> {color, points: [[ms, value]], deletes: [ms]}
    this.palette = ["#2563a8", "#c0392b", "#2e9d5b", "#c98a16", "#7d3cb5", "#14808c",
                    "#b5487d", "#5b6b12"];
  }

  line(key) {
    let s = this.series.get(key);
    if (!s) {
      s = { color: this.palette[this.series.size % this.palette.length], points: [], deletes: [] };
      this.series.set(key, s);
      const item = document.createElement("span");
      item.className = "legend-item";
      item.style.setProperty("--swatch", s.color);
      item.textContent = key;
      this.legend.appendChild(item);
    }
    return s;
  }

  add(key, value, at = Date.now()) {
    this.line(key).points.push([at, value]);
  }

  deleted(key, at = Date.now()) {
    this.line(key).deletes.push(at);
  }

  // Lines scale to what the last minute holds; older points are dropped.
  draw(now = Date.now()) {
    const { canvas } = this;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || canvas.width;
    const height = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const from = now - this.seconds * 1000;
    let lo = Infinity;
    let hi = -Infinity;
    for (const s of this.series.values()) {
      s.points = s.points.filter(([t]) => t >= from - 2000);
      s.deletes = s.deletes.filter((t) => t >= from);
      for (const [, v] of s.points) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    }
    const left = 38;
    const right = width - 8;
    const top = 8;
    const bottom = height - 20;
    g.strokeStyle = "#d5dae1";
    g.fillStyle = "#69717d";
    g.font = "11px system-ui, sans-serif";
    g.lineWidth = 1;
    g.beginPath();
    g.moveTo(left, top);
    g.lineTo(left, bottom);
    g.lineTo(right, bottom);
    g.stroke();
    g.textAlign = "left";
    g.fillText(`-${this.seconds} s`, left, height - 6);
    g.textAlign = "right";
    g.fillText("now", right, height - 6);
    if (lo === Infinity) return;
    if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
    const pad = (hi - lo) * 0.1;
    lo -= pad;
    hi += pad;
    g.fillText(hi.toFixed(1), left - 4, top + 10);
    g.fillText(lo.toFixed(1), left - 4, bottom);
    const x = (t) => left + ((t - from) / (now - from)) * (right - left);
    const y = (v) => bottom - ((v - lo) / (hi - lo)) * (bottom - top);
    g.save();
    g.beginPath();
    g.rect(left + 1, top, right - left, bottom - top);
    g.clip();
    for (const s of this.series.values()) {
      g.strokeStyle = s.color;
      g.lineWidth = 2;
      g.beginPath();
      s.points.forEach(([t, v], i) => (i ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
      g.stroke();
      g.fillStyle = s.color;
      for (const [t, v] of s.points) g.fillRect(x(t) - 1.5, y(v) - 1.5, 3, 3);
      g.lineWidth = 2;
      for (const t of s.deletes) { // a delete: a cross on the time axis
        g.beginPath();
        g.moveTo(x(t) - 4, bottom - 8);
        g.lineTo(x(t) + 4, bottom);
        g.moveTo(x(t) + 4, bottom - 8);
        g.lineTo(x(t) - 4, bottom);
        g.stroke();
      }
    }
    g.restore();
  }
};
