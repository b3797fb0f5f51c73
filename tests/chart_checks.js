// Checks every plotly chart of a page as a reader sees it (run by tests/browser.py in headless
// Chromium): each axis holds its data and not far more, nothing is drawn outside the chart's
// cell or the page, no two labels overlap, every series in a legend has a look of its own;
// and the page itself is no wider than the window (its tables fit or scroll in their box).
function checkCharts(win) {
  var doc = win.document, out = [];
  var viewport = doc.documentElement.clientWidth;
  if (doc.documentElement.scrollWidth > viewport + 1) {
    out.push({chart: "page", problems: ["the page is " + doc.documentElement.scrollWidth +
                                        " px wide in a " + viewport + " px window"]});
  }
  doc.querySelectorAll("table").forEach(function (table) {
    var box = table.parentElement;
    if (box.scrollWidth > box.clientWidth + 1 && !box.classList.contains("wrap")) {
      out.push({chart: "table", problems: ["a table overflows its box"]});
    }
  });
  doc.querySelectorAll(".js-plotly-plot").forEach(function (gd, index) {
    var layout = gd._fullLayout, problems = [];
    var name = (layout.title && layout.title.text) || ("chart " + index);
    var svg = gd.querySelector(".main-svg").getBoundingClientRect();
    var cell = gd.parentElement.getBoundingClientRect();
    if (svg.right > cell.right + 1 || svg.left < cell.left - 1) {
      problems.push("drawn " + Math.round(svg.width) + " px wide in a " +
                    Math.round(cell.width) + " px cell");
    }
    if (svg.right > viewport + 1) { problems.push("drawn past the window's edge"); }
    Object.keys(layout).filter(function (k) { return /^[xy]axis\d*$/.test(k); })
      .forEach(function (key) {
        var axis = layout[key];
        if (axis.type === "category" || axis.visible === false) { return; }
        var letter = key[0], values = [];
        gd.calcdata.forEach(function (trace) {
          var t = trace[0] && trace[0].trace;
          if (!t || t.visible !== true || (t[letter + "axis"] || letter) !== axis._id) { return; }
          var valueAxis = t.type === "bar" ? (t.orientation === "h" ? "x" : "y") : null;
          trace.forEach(function (p) {
            if (valueAxis === letter) {
              if (isFinite(p.b) && isFinite(p.s)) { values.push(p.b, p.b + p.s); }
            } else if (valueAxis === null && isFinite(p[letter])) {
              values.push(p[letter]);
            }
          });
        });
        if (!values.length) { return; }
        if (axis.type === "log") {
          values = values.filter(function (v) { return v > 0; }).map(Math.log10);
        }
        var low = Math.min.apply(null, values), high = Math.max.apply(null, values);
        var range = axis.range.slice().sort(function (a, b) { return a - b; });
        var span = Math.max(high - low, Math.abs(high) * 0.1, 1e-9);
        var slack = span * 1e-6;
        if (range[0] > low + slack || range[1] < high - slack) {
          problems.push(key + " " + range + " cuts the data " + low + " to " + high);
        }
        var percent = /%/.test((axis.title && axis.title.text) || "") &&
                      range[0] >= -1 && range[1] <= 106;
        if (!percent && range[1] - range[0] > 3 * span) {
          problems.push(key + " " + range + " reaches far beyond the data " + low + " to " +
                        high);
        }
      });
    var labels = [];
    gd.querySelectorAll(".xtick text, .ytick text, .g-xtitle text, .g-ytitle text, " +
                        ".legendtext, .annotation-text, .g-gtitle text").forEach(function (t) {
      var r = t.getBoundingClientRect();
      if (r.width > 0 && r.height > 0 && t.textContent.trim()) {
        labels.push({text: t.textContent, r: r});
      }
    });
    for (var i = 0; i < labels.length; i++) {
      for (var j = i + 1; j < labels.length; j++) {
        var a = labels[i].r, b = labels[j].r;
        var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 1 && h > 1) {
          problems.push("'" + labels[i].text + "' overlaps '" + labels[j].text + "'");
        }
      }
    }
    var looks = {};
    gd._fullData.forEach(function (t) {
      if (t.visible !== true || t.showlegend === false) { return; }
      var marker = t.marker || {}, line = t.line || {};
      var color = typeof marker.color === "string" ? marker.color : line.color;
      var look = [color, (marker.pattern || {}).shape || "", line.dash || "",
                  t.mode || ""].join("|");
      if (looks[look]) {
        problems.push("'" + t.name + "' looks like '" + looks[look] + "' (" + look + ")");
      }
      looks[look] = t.name;
    });
    out.push({chart: name, problems: problems});
  });
  return out;
}
