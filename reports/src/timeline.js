// gmem-prof's interactive timeline: a device's memory stacked by site, drawn
// from the JSON beside each `.timeline` element. Pointer over a band: its
// site, bytes then, and stack. Drag across the chart: zoom to that span;
// double-click: the whole run. OOMs are red lines, the peak a red dot,
// kernels at the peak ticks under the axis. No network, no library.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bbbbbb"];
  var W = 960, H = 330, L = 84, R = 16, T = 16, B = 46;
  // The kernel strip: under the plot, above the time labels.
  var STRIP = 10;

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

  function draw(box) {
    var data = JSON.parse(document.getElementById(box.getAttribute("data-json")).textContent);
    var n = data.buckets, step = data.bucket_s;
    // Bands bottom-up: the sites, then the rest of the live bytes.
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
    var view = { from: 0, to: n };
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img" }, null);
    box.insertBefore(svg, box.firstChild);
    var tip = box.querySelector(".tip");

    function render() {
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var ymax = 1;
      for (var j = view.from; j < view.to; j++) ymax = Math.max(ymax, tops[j][bands.length], data.live_max[j] || 0);
      ymax *= 1.08;
      var x = function (i) { return L + (i - view.from) / Math.max(1, view.to - view.from - 1) * (W - L - R); };
      var y = function (v) { return H - B - v / ymax * (H - T - B); };
      for (var b = 0; b < bands.length; b++) {
        var d = "";
        for (var j = view.from; j < view.to; j++) d += (j === view.from ? "M" : "L") + x(j).toFixed(1) + "," + y(tops[j][b + 1]).toFixed(1);
        for (j = view.to - 1; j >= view.from; j--) d += "L" + x(j).toFixed(1) + "," + y(tops[j][b]).toFixed(1);
        el("path", { d: d + "Z", fill: bands[b].color, "fill-opacity": "0.75", stroke: "none", "data-band": b }, svg);
      }
      var line = "";
      for (j = view.from; j < view.to; j++) line += (j === view.from ? "M" : "L") + x(j).toFixed(1) + "," + y(data.live_max[j] || 0).toFixed(1);
      el("path", { d: line, fill: "none", stroke: "#000", "stroke-width": "1", "stroke-dasharray": "3,2" }, svg);
      el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#444" }, svg);
      el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#444" }, svg);
      for (var k = 0; k <= 4; k++) {
        var v = ymax / 1.08 * k / 4;
        var t = el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": "11" }, svg);
        t.textContent = bytes(v);
        var i = view.from + (view.to - 1 - view.from) * k / 4;
        var tx = el("text", { x: x(i), y: H - B + STRIP + 18, "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle", "font-size": "11" }, svg);
        tx.textContent = seconds(i * step);
      }
      var at = function (sec) { return sec / step; };
      var kmax = 0;
      for (j = view.from; j < view.to; j++) kmax = Math.max(kmax, data.kernel_counts[j] || 0);
      if (kmax > 0) {
        var bw = Math.max(1, (W - L - R) / Math.max(1, view.to - view.from));
        for (j = view.from; j < view.to; j++) {
          var c = data.kernel_counts[j] || 0;
          if (!c) continue;
          el("rect", { x: x(j) - bw / 2, y: H - B + 3, width: bw, height: STRIP - 2, fill: "#666",
            "fill-opacity": (0.15 + 0.85 * Math.log(1 + c) / Math.log(1 + kmax)).toFixed(2) }, svg);
        }
      }
      data.ooms.forEach(function (o) {
        var i = at(o.t);
        if (i < view.from || i > view.to - 1) return;
        el("line", { x1: x(i), y1: T, x2: x(i), y2: H - B, stroke: "#d00", "stroke-width": "1.5", "data-oom": o.label }, svg);
      });
      data.kernels.forEach(function (k) {
        var i = at(k.t);
        if (i < view.from || i > view.to - 1) return;
        el("line", { x1: x(i), y1: H - B, x2: x(i), y2: H - B + 6, stroke: "#555", "data-kernel": k.name }, svg);
      });
      var p = at(data.peak.t);
      if (p >= view.from && p <= view.to - 1) el("circle", { cx: x(p), cy: y(data.peak.bytes), r: 4, fill: "#d00" }, svg);
      svg._x = x; svg._y = y;
    }

    // The band and bucket under a point of the chart, in its own units.
    function hit(px, py) {
      var j = Math.round(view.from + (px - L) / (W - L - R) * Math.max(1, view.to - view.from - 1));
      if (j < view.from || j >= view.to) return null;
      if (py > H - B && py <= H - B + STRIP + 2) return { bucket: j, kernels: data.kernel_counts[j] || 0 };
      for (var b = 0; b < bands.length; b++) {
        var y0 = svg._y(tops[j][b]), y1 = svg._y(tops[j][b + 1]);
        if (py <= y0 && py >= y1 && y0 - y1 > 0.1) return { band: b, bucket: j };
      }
      return { band: -1, bucket: j };
    }
    function local(ev) {
      var r = svg.getBoundingClientRect();
      return [(ev.clientX - r.left) / r.width * W, (ev.clientY - r.top) / r.height * H];
    }
    function show(h) {
      if (h && h.kernels !== undefined) {
        tip.hidden = false;
        tip.textContent = h.kernels + " kernel" + (h.kernels === 1 ? "" : "s") +
          (data.kernels_launched ? " launched from " : " started from ") +
          seconds(h.bucket * step) + " to " + seconds((h.bucket + 1) * step);
        return;
      }
      if (!h || h.band < 0) { tip.hidden = true; return; }
      var band = bands[h.band];
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
    var dragFrom = null;
    svg.addEventListener("pointermove", function (ev) { var p = local(ev); show(hit(p[0], p[1])); });
    svg.addEventListener("pointerleave", function () { tip.hidden = true; });
    svg.addEventListener("pointerdown", function (ev) { dragFrom = local(ev)[0]; });
    svg.addEventListener("pointerup", function (ev) {
      if (dragFrom === null) return;
      var a = hit(Math.min(dragFrom, local(ev)[0]), H - B), b = hit(Math.max(dragFrom, local(ev)[0]), H - B);
      dragFrom = null;
      if (a && b && b.bucket - a.bucket >= 2) { view = { from: a.bucket, to: b.bucket + 1 }; render(); }
    });
    svg.addEventListener("dblclick", function () { view = { from: 0, to: n }; render(); });
    render();
    box._hitStrip = function () {
      // The kernel strip under the peak (the self-test uses it).
      var j = Math.min(n - 1, Math.max(0, Math.round(data.peak.t / step)));
      var r = svg.getBoundingClientRect();
      return [r.left + svg._x(j) / W * r.width, r.top + (H - B + STRIP / 2) / H * r.height];
    };
    box._hitPeak = function () {
      // The point of the largest band at the peak (the self-test uses it).
      var j = Math.min(n - 1, Math.max(0, Math.round(data.peak.t / step)));
      var b = 0;
      for (var k = 1; k < bands.length - 1; k++) if ((bands[k].values[j] || 0) > (bands[b].values[j] || 0)) b = k;
      var r = svg.getBoundingClientRect();
      return [r.left + svg._x(j) / W * r.width, r.top + (svg._y(tops[j][b]) + svg._y(tops[j][b + 1])) / 2 / H * r.height];
    };
  }

  var boxes = document.querySelectorAll(".timeline");
  for (var i = 0; i < boxes.length; i++) draw(boxes[i]);
  // #selftest (or #selftest-N for the Nth timeline, from 0): point at the
  // largest band at that timeline's peak and leave what the pointer showed
  // in #selftest (tests/e2e/report.rs).
  var test = /^#selftest(?:-(\d+))?(-strip)?$/.exec(location.hash);
  var which = test ? Number(test[1] || 0) : -1;
  if (which >= 0 && which < boxes.length) {
    var box = boxes[which], svg = box.querySelector("svg");
    var p = test[2] ? box._hitStrip() : box._hitPeak();
    svg.dispatchEvent(new PointerEvent("pointermove", { clientX: p[0], clientY: p[1], bubbles: true }));
    var out = document.createElement("pre");
    out.id = "selftest";
    out.textContent = box.querySelector(".tip").hidden ? "(nothing shown)" : box.querySelector(".tip").textContent;
    document.body.appendChild(out);
  }
})();
