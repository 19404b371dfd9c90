// gmem-prof's interactive timeline: a device's memory stacked by site, drawn
// from the JSON beside each `.timeline` element. Pointer over a band: its
// site, bytes then, and stack. Drag across the chart: zoom to that span;
// double-click: the whole run. OOMs are red lines, the peak a red dot,
// kernels at the peak ticks under the axis; the program's steps a strip
// under the kernels' (pointer: the step's figures), its NVTX ranges lanes
// under that, one per nesting depth (pointer: the instance's figures). No
// network, no library. Each
// band is a path (data-band) whose upper edge runs left to right and lower
// edge back: the browser test reads the chart from that alone.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bbbbbb"];
  // AXIS: the time axis's y; what lies under it (the strips, the time
  // labels) sets each chart's height.
  var W = 960, L = 84, R = 16, T = 16, AXIS = 284;
  // The kernel strip: under the plot, above the time labels; the steps'
  // strip under it, when the program marked steps; then a lane of ranges
  // per nesting depth drawn.
  var STRIP = 10, STEPS = 9, LANE = 8;
  function stepsTop() { return AXIS + STRIP + 2; }
  function rangesTop(data) { return stepsTop() + (data.steps ? STEPS : 0); }
  function lanes(data) { return data.range_lanes || 0; }
  function labelsY(data) { return rangesTop(data) + lanes(data) * LANE + 16; }
  function height(data) { return labelsY(data) + 9; }

  function bytes(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b >= 100 ? b.toFixed(0) : b >= 10 ? b.toFixed(1) : b.toFixed(2)) + " " + u[i];
  }
  function seconds(s) { return s >= 1 ? s.toFixed(3) + " s" : (s * 1000).toFixed(1) + " ms"; }
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  // The bands bottom-up (the sites, then the rest of the live bytes) and,
  // per bucket, where each band starts: tops[j][b] .. tops[j][b + 1].
  function stack(data) {
    var n = data.buckets;
    var bands = data.sites.map(function (s, i) { return { label: s.label, frames: s.frames, values: s.live, color: COLORS[i % 8] }; });
    var other = [];
    for (var j = 0; j < n; j++) {
      var sum = 0;
      for (var b = 0; b < bands.length; b++) sum += bands[b].values[j] || 0;
      other.push(Math.max(0, (data.live[j] || 0) - sum));
    }
    bands.push({ label: data.other_label, frames: [], values: other, color: COLORS[8] });
    var tops = [];
    for (j = 0; j < n; j++) {
      var acc = 0, col = [];
      for (b = 0; b < bands.length; b++) { col.push(acc); acc += bands[b].values[j] || 0; }
      col.push(acc);
      tops.push(col);
    }
    return { bands: bands, tops: tops };
  }

  // The scales of the span `view` shows: bucket → x, bytes → y.
  function scales(chart, view) {
    var ymax = 1;
    for (var j = view.from; j < view.to; j++) ymax = Math.max(ymax, chart.tops[j][chart.bands.length], chart.data.live_max[j] || 0);
    ymax *= 1.08;
    return {
      ymax: ymax,
      x: function (i) { return L + (i - view.from) / Math.max(1, view.to - view.from - 1) * (W - L - R); },
      y: function (v) { return AXIS - v / ymax * (AXIS - T); }
    };
  }

  function drawBands(svg, chart, view, s) {
    var tops = chart.tops;
    for (var b = 0; b < chart.bands.length; b++) {
      var d = "";
      for (var j = view.from; j < view.to; j++) d += (j === view.from ? "M" : "L") + s.x(j).toFixed(1) + "," + s.y(tops[j][b + 1]).toFixed(1);
      for (j = view.to - 1; j >= view.from; j--) d += "L" + s.x(j).toFixed(1) + "," + s.y(tops[j][b]).toFixed(1);
      el("path", { d: d + "Z", fill: chart.bands[b].color, "fill-opacity": "0.75", stroke: "none", "data-band": b }, svg);
    }
    var line = "";
    for (j = view.from; j < view.to; j++) line += (j === view.from ? "M" : "L") + s.x(j).toFixed(1) + "," + s.y(chart.data.live_max[j] || 0).toFixed(1);
    el("path", { d: line, fill: "none", stroke: "#000", "stroke-width": "1", "stroke-dasharray": "3,2" }, svg);
  }

  function drawAxes(svg, chart, view, s) {
    el("line", { x1: L, y1: AXIS, x2: W - R, y2: AXIS, stroke: "#444", "data-axis": "time" }, svg);
    el("line", { x1: L, y1: T, x2: L, y2: AXIS, stroke: "#444" }, svg);
    for (var k = 0; k <= 4; k++) {
      var v = s.ymax / 1.08 * k / 4;
      var t = el("text", { x: L - 6, y: s.y(v) + 4, "text-anchor": "end", "font-size": "11" }, svg);
      t.textContent = bytes(v);
      var i = view.from + (view.to - 1 - view.from) * k / 4;
      var tx = el("text", { x: s.x(i), y: labelsY(chart.data), "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle", "font-size": "11" }, svg);
      tx.textContent = seconds(i * chart.data.bucket_s);
    }
  }

  // Kernels per bucket as a strip of shades under the axis.
  function drawKernelStrip(svg, chart, view, s) {
    var counts = chart.data.kernel_counts, kmax = 0, j;
    for (j = view.from; j < view.to; j++) kmax = Math.max(kmax, counts[j] || 0);
    if (kmax === 0) return;
    var bw = Math.max(1, (W - L - R) / Math.max(1, view.to - view.from));
    for (j = view.from; j < view.to; j++) {
      var c = counts[j] || 0;
      if (!c) continue;
      el("rect", { x: s.x(j) - bw / 2, y: AXIS + 3, width: bw, height: STRIP - 2, fill: "#666",
        "fill-opacity": (0.15 + 0.85 * Math.log(1 + c) / Math.log(1 + kmax)).toFixed(2) }, svg);
    }
  }

  // Each step as a span of the strip under the kernels, shaded in turn.
  function drawStepStrip(svg, chart, view, s) {
    var data = chart.data;
    (data.steps || []).forEach(function (st, k) {
      var a = Math.max(view.from, st.t0 / data.bucket_s), b = Math.min(view.to - 1, st.t1 / data.bucket_s);
      if (b < a) return;
      el("rect", { x: s.x(a), y: stepsTop(), width: Math.max(0.5, s.x(b) - s.x(a)), height: STEPS - 1,
        fill: k % 2 ? "#6f8fb8" : "#a9c0dd", "data-step": st.n }, svg);
    });
  }

  // Each range instance as a span of its depth's lane, shaded by name.
  function drawRangeLanes(svg, chart, view, s) {
    var data = chart.data, top = rangesTop(data);
    (data.ranges || []).forEach(function (r) {
      var a = Math.max(view.from, r.t0 / data.bucket_s), b = Math.min(view.to - 1, r.t1 / data.bucket_s);
      if (b < a) return;
      el("rect", { x: s.x(a), y: top + r.depth * LANE, width: Math.max(0.5, s.x(b) - s.x(a)), height: LANE - 1,
        fill: COLORS[r.name_index % 8], "fill-opacity": "0.6", stroke: "#fff", "stroke-width": "0.5",
        "data-range": r.name, "data-depth": r.depth }, svg);
    });
  }

  // The span of `spans` (steps or ranges: t0, t1 in seconds) that `fits`
  // accepts at moment t: the one holding it, else the nearest within
  // `slack` seconds (spans can be far narrower than a pixel).
  function spanAt(spans, fits, t, slack) {
    var best = null, gap = slack;
    for (var k = 0; k < (spans || []).length; k++) {
      if (!fits(spans[k])) continue;
      var d = t < spans[k].t0 ? spans[k].t0 - t : t > spans[k].t1 ? t - spans[k].t1 : 0;
      if (d <= gap) { best = spans[k]; gap = d; }
      if (d === 0) break;
    }
    return best;
  }

  // OOMs, kernels at the peak, and the peak.
  function drawMarks(svg, chart, view, s) {
    var data = chart.data;
    var at = function (sec) { return sec / data.bucket_s; };
    var inView = function (i) { return i >= view.from && i <= view.to - 1; };
    data.ooms.forEach(function (o) {
      var i = at(o.t);
      if (inView(i)) el("line", { x1: s.x(i), y1: T, x2: s.x(i), y2: AXIS, stroke: "#d00", "stroke-width": "1.5", "data-oom": o.label }, svg);
    });
    data.kernels.forEach(function (k) {
      var i = at(k.t);
      if (inView(i)) el("line", { x1: s.x(i), y1: AXIS, x2: s.x(i), y2: AXIS + 6, stroke: "#555", "data-kernel": k.name }, svg);
    });
    var p = at(data.peak.t);
    if (inView(p)) el("circle", { cx: s.x(p), cy: s.y(data.peak.bytes), r: 4, fill: "#d00", "data-peak": "" }, svg);
  }

  function render(svg, chart, view) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var s = scales(chart, view);
    drawBands(svg, chart, view, s);
    drawAxes(svg, chart, view, s);
    drawKernelStrip(svg, chart, view, s);
    drawStepStrip(svg, chart, view, s);
    drawRangeLanes(svg, chart, view, s);
    drawMarks(svg, chart, view, s);
    return s;
  }

  // What is under a point of the chart, in its own units: a band at a
  // bucket, the kernel strip at a bucket, a step, a range, or nothing.
  function hit(chart, view, s, px, py) {
    var data = chart.data;
    var j = Math.round(view.from + (px - L) / (W - L - R) * Math.max(1, view.to - view.from - 1));
    if (j < view.from || j >= view.to) return null;
    var at = (view.from + (px - L) / (W - L - R) * Math.max(1, view.to - view.from - 1)) * data.bucket_s;
    if (py > AXIS && py <= stepsTop()) return { bucket: j, kernels: data.kernel_counts[j] || 0 };
    if (data.steps && py > stepsTop() && py <= stepsTop() + STEPS) {
      var st = spanAt(data.steps, function () { return true; }, at, data.bucket_s / 2);
      return st ? { bucket: j, step: st } : null;
    }
    var lane = Math.floor((py - rangesTop(data)) / LANE);
    if (py > rangesTop(data) && lane < lanes(data)) {
      var r = spanAt(data.ranges, function (x) { return x.depth === lane; }, at, data.bucket_s / 2);
      return r ? { bucket: j, range: r } : null;
    }
    for (var b = 0; b < chart.bands.length; b++) {
      var y0 = s.y(chart.tops[j][b]), y1 = s.y(chart.tops[j][b + 1]);
      if (py <= y0 && py >= y1 && y0 - y1 > 0.1) return { band: b, bucket: j };
    }
    return { band: -1, bucket: j };
  }

  // A step's figures, in one line.
  function stepWords(st) {
    var kept = function (b) { return (b < 0 ? "-" + bytes(-b) : "+" + bytes(b)); };
    return "step " + st.n + " (pid " + st.pid + "): " + seconds(st.t0) + " to " + seconds(st.t1) +
      ", peak " + bytes(st.peak) + ", kept " + kept(st.kept) +
      (st.tensors_kept === undefined ? "" : "; tensors: peak " + bytes(st.tensors_peak) + ", kept " + kept(st.tensors_kept));
  }

  // A range instance's figures, in one line.
  function rangeWords(r) {
    var kept = r.kept < 0 ? "-" + bytes(-r.kept) : "+" + bytes(r.kept);
    return r.name + " (pid " + r.pid + ", thread " + r.tid + ", depth " + r.depth + "): " + seconds(r.t0) +
      " to " + (r.open ? "the end, never ended" : seconds(r.t1)) + ", CUDA memory kept " + kept;
  }

  // The tooltip for what `hit` found.
  function show(tip, chart, h) {
    var data = chart.data, step = data.bucket_s;
    if (h && (h.step || h.range)) {
      tip.hidden = false;
      tip.textContent = h.step ? stepWords(h.step) : rangeWords(h.range);
      return;
    }
    if (h && h.kernels !== undefined) {
      tip.hidden = false;
      tip.textContent = h.kernels + " kernel" + (h.kernels === 1 ? "" : "s") +
        (data.kernels_launched ? " launched from " : " started from ") +
        seconds(h.bucket * step) + " to " + seconds((h.bucket + 1) * step);
      return;
    }
    if (!h || h.band < 0) { tip.hidden = true; return; }
    var band = chart.bands[h.band];
    tip.hidden = false;
    tip.textContent = "";
    var head = document.createElement("b");
    head.textContent = band.label;
    tip.appendChild(head);
    tip.appendChild(document.createTextNode(": " + bytes(band.values[h.bucket] || 0) + " live at " + seconds(h.bucket * step)));
    if (band.frames.length) {
      var ol = document.createElement("ol");
      band.frames.slice(0, 12).forEach(function (f) { var li = document.createElement("li"); li.textContent = f; ol.appendChild(li); });
      tip.appendChild(ol);
    }
  }

  function draw(box) {
    var data = JSON.parse(document.getElementById(box.getAttribute("data-json")).textContent);
    var chart = stack(data);
    chart.data = data;
    var n = data.buckets;
    var view = { from: 0, to: n };
    var H = height(data);
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img" }, null);
    box.insertBefore(svg, box.firstChild);
    var tip = box.querySelector(".tip");
    var s = render(svg, chart, view);
    function local(ev) {
      var r = svg.getBoundingClientRect();
      return [(ev.clientX - r.left) / r.width * W, (ev.clientY - r.top) / r.height * H];
    }
    function zoom(to) { view = to; s = render(svg, chart, view); }
    var dragFrom = null;
    svg.addEventListener("pointermove", function (ev) { var p = local(ev); show(tip, chart, hit(chart, view, s, p[0], p[1])); });
    svg.addEventListener("pointerleave", function () { tip.hidden = true; });
    svg.addEventListener("pointerdown", function (ev) { dragFrom = local(ev)[0]; });
    svg.addEventListener("pointerup", function (ev) {
      if (dragFrom === null) return;
      var a = hit(chart, view, s, Math.min(dragFrom, local(ev)[0]), AXIS);
      var b = hit(chart, view, s, Math.max(dragFrom, local(ev)[0]), AXIS);
      dragFrom = null;
      if (a && b && b.bucket - a.bucket >= 2) zoom({ from: a.bucket, to: b.bucket + 1 });
    });
    svg.addEventListener("dblclick", function () { zoom({ from: 0, to: n }); });
  }

  var boxes = document.querySelectorAll(".timeline");
  for (var i = 0; i < boxes.length; i++) draw(boxes[i]);
})();
