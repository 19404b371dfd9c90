// Test-only: tests/e2e/report.rs appends this to a copy of a report page
// (shipped pages hold no test code). #selftest, or #selftest-N for the Nth
// timeline (from 0), points at the largest band at that timeline's peak;
// #selftest-N-strip at the kernel strip under the peak, #selftest-N-steps
// at the steps' strip under the peak, #selftest-N-ranges at the middle of
// the first range instance of the top lane. What the tooltip
// then showed is left in a pre element of id "selftest". The chart is
// read from the drawn SVG alone: the peak's dot, the time axis, and each
// band's path, whose upper edge runs left to right and lower edge back.
(function () {
  "use strict";
  var test = /^#selftest(?:-(\d+))?(-strip|-steps|-ranges)?$/.exec(location.hash);
  var boxes = document.querySelectorAll(".timeline");
  var which = test ? Number(test[1] || 0) : -1;
  if (which < 0 || which >= boxes.length) return;
  var box = boxes[which], svg = box.querySelector("svg");
  var vb = svg.viewBox.baseVal;
  var px = Number(svg.querySelector("[data-peak]").getAttribute("cx")), py;
  if (test[2] === "-ranges") {
    var range = svg.querySelector("[data-range][data-depth='0']");
    px = Number(range.getAttribute("x")) + Number(range.getAttribute("width")) / 2;
    py = Number(range.getAttribute("y")) + Number(range.getAttribute("height")) / 2;
  } else if (test[2] === "-steps") {
    var strip = svg.querySelector("[data-step]");
    py = Number(strip.getAttribute("y")) + Number(strip.getAttribute("height")) / 2;
  } else if (test[2]) {
    py = Number(svg.querySelector("[data-axis=time]").getAttribute("y1")) + 5;
  } else {
    // Every band but the last (the rest of the live bytes).
    var paths = svg.querySelectorAll("path[data-band]"), best = null;
    for (var k = 0; k < paths.length - 1; k++) {
      var pts = paths[k].getAttribute("d").replace(/Z$/, "").split(/[ML]/).filter(Boolean)
        .map(function (p) { return p.split(",").map(Number); });
      var m = pts.length / 2, c = 0;
      for (var i = 1; i < m; i++) if (Math.abs(pts[i][0] - px) < Math.abs(pts[c][0] - px)) c = i;
      var top = pts[c][1], bottom = pts[pts.length - 1 - c][1];
      if (!best || bottom - top > best.h) best = { h: bottom - top, y: (top + bottom) / 2 };
    }
    py = best.y;
  }
  var r = svg.getBoundingClientRect();
  svg.dispatchEvent(new PointerEvent("pointermove", {
    clientX: r.left + px / vb.width * r.width, clientY: r.top + py / vb.height * r.height, bubbles: true
  }));
  var tip = box.querySelector(".tip");
  var out = document.createElement("pre");
  out.id = "selftest";
  out.textContent = tip.hidden ? "(nothing shown)" : tip.textContent;
  document.body.appendChild(out);
})();
