// The viewer page's script: the comparison's drawer (tools/viewer_script.h).
#include "tools/viewer_script.h"

namespace strata::tools {

std::string_view ViewerScriptComparison() {
  return R"JS(
  // ---- the comparison ---------------------------------------------------------------------
  function fmtSigned(b) {
    if (b === null || b === undefined) return '-';
    return (b < 0 ? '\u2212' : b > 0 ? '+' : '\u00b1') + fmtBytes(Math.abs(b));
  }
  var sidesDrawn = [false, false];
  function drawComparison(C) {
    var N = Math.max(C.num_events, 1), S = C.series, M = C.moments;
    var COLORS = ['#1f6fb4', '#e6550d'], NAMES = ['A', 'B'];
    var yMax = Math.max(C.peak_requested, C.peaks[0][0], C.peaks[1][0], seriesMax(S.allocated[0]),
                        seriesMax(S.allocated[1]), 1);
    C.references.forEach(function (r) { yMax = Math.max(yMax, r[1]); });
    yMax *= 1.06;
    var gMax = 1;
    S.gap.forEach(function (g) { gMax = Math.max(gMax, Math.abs(g)); });
    gMax *= 1.12;

    var legend = document.getElementById('cmp-legend');
    legendItem(legend, '#d9d9d9', 'requested (peak ' + fmtBytes(C.peak_requested) + ')');
    for (var s = 0; s < 2; s++) {
      legendItem(legend, COLORS[s], NAMES[s] + ' reserved: ' + C.labels[s] + ' (peak ' + fmtBytes(C.peaks[s][0]) + ')', true);
      if (S.allocated[s]) legendItem(legend, COLORS[s], NAMES[s] + ' allocated (peak ' + fmtBytes(seriesMax(S.allocated[s])) + ')', true, true);
    }
    C.references.forEach(function (r) { referenceLegend(legend, r); });
    if (M.length > 0) legendItem(legend, '#c51b7d', 'where the gap grows most (1 = most)', true);
    document.getElementById('gap-title').textContent = 'Reserved B \u2212 A (widest ' + fmtSigned(C.widest[0]) +
        ' at event ' + C.widest[1] + ')';

    var plot = document.getElementById('cmp-plot');
    var W = Math.max(plot.clientWidth || 0, 600);
    var main = {canvas: document.getElementById('cmp'), sel: document.getElementById('cmp-selection'), H: 400};
    var gapp = {canvas: document.getElementById('gap'), sel: document.getElementById('gap-selection'), H: 190};
    var L = 84, R = W - 16, TOP = 12;
    [main, gapp].forEach(function (p) {
      p.ctx = setupCanvas(p.canvas, W, p.H);
      p.B = p.H - (S.time ? 52 : 38);
    });
    main.lo = 0; main.hi = yMax;
    gapp.lo = -gMax; gapp.hi = gMax;
    var x0 = 0, x1 = N;
    function X(e) { return L + (e - x0) / (x1 - x0) * (R - L); }
    function Yof(p, v) { return p.B - (v - p.lo) / (p.hi - p.lo) * (p.B - TOP); }
    // joined: the path goes on from the current point (an area's outline), else it starts anew.
    function stepPath(ctx, p, ys, joined) {
      for (var i = 0; i < S.x.length; i++) {
        var xa = X(S.x[i]), xb = X(i + 1 < S.x.length ? S.x[i + 1] : N), y = Yof(p, ys[i]);
        if (i === 0 && !joined) ctx.moveTo(xa, y); else ctx.lineTo(xa, y);
        ctx.lineTo(xb, y);
      }
    }
    function stepLine(p, ys, color, width, dash) {
      if (!ys || ys.length === 0) return false;
      var ctx = p.ctx;
      ctx.beginPath();
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.setLineDash(dash || []);
      stepPath(ctx, p, ys);
      ctx.stroke();
      ctx.setLineDash([]);
      return true;
    }
    function grid(p) {
      var ctx = p.ctx, span = Math.max(Math.abs(p.lo), Math.abs(p.hi)) / 1.06;
      var unit = 0;
      while (unit < UNITS.length - 1 && span >= Math.pow(1024, unit + 1)) unit++;
      var ub = Math.pow(1024, unit), step = niceStep((p.hi - p.lo) / ub, p === main ? 6 : 4) * ub;
      ctx.strokeStyle = '#e6e6e6';
      ctx.lineWidth = 1;
      ctx.fillStyle = '#444';
      ctx.textAlign = 'right';
      ctx.textBaseline = 'middle';
      for (var v = Math.ceil(p.lo / step) * step; v <= p.hi; v += step) {
        var y = Math.round(Yof(p, v)) + 0.5;
        ctx.strokeStyle = v === 0 && p === gapp ? '#888' : '#e6e6e6';
        ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(R, y); ctx.stroke();
        var label = v / ub, text = (step / ub < 1 ? label.toFixed(1) : label.toFixed(0)) + ' ' + UNITS[unit];
        if (p === gapp && v > 0) text = '+' + text;
        ctx.fillText(text, L - 6, y);
      }
    }
    function xAxis(p) { eventAxis(p.ctx, L, R, TOP, p.B, p.H, x0, x1, X, S); }
    function momentLines(p, labelled) {
      var ctx = p.ctx;
      M.forEach(function (m, k) {
        if (m.event < x0 || m.event > x1) return;
        var x = Math.round(X(m.event + 0.5)) + 0.5;
        ctx.strokeStyle = 'rgba(197,27,125,0.75)';
        ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(x, TOP); ctx.lineTo(x, p.B); ctx.stroke();
        if (labelled) {
          ctx.fillStyle = '#c51b7d';
          ctx.textAlign = 'left';
          ctx.textBaseline = 'top';
          ctx.fillText(String(k + 1), x + 2, TOP + 2 + (k % 3) * 11);
        }
      });
    }
    // Clears plot p, draws its grid and clips what follows to the plot area (until ctx.restore).
    function beginPlot(p) {
      var ctx = p.ctx;
      ctx.clearRect(0, 0, W, p.H);
      ctx.font = '11px sans-serif';
      grid(p);
      ctx.save();
      ctx.beginPath(); ctx.rect(L, TOP, R - L, p.B - TOP); ctx.clip();
      return ctx;
    }
    function renderMain() {
      var p = main, ctx = beginPlot(p);
      if (S.x.length > 0) {
        ctx.fillStyle = '#d9d9d9';
        ctx.beginPath();
        ctx.moveTo(X(S.x[0]), Yof(p, 0));
        stepPath(ctx, p, S.requested, true);
        ctx.lineTo(X(N), Yof(p, 0));
        ctx.closePath();
        ctx.fill();
      }
      C.references.forEach(function (r) { referenceLine(ctx, L, R, Yof(p, r[1]), r); });
      momentLines(p, true);
      for (var s = 0; s < 2; s++) {
        if (S.allocated[s]) stepLine(p, S.allocated[s], COLORS[s], 1, [5, 3]);
      }
      for (s = 0; s < 2; s++) {
        sidesDrawn[s] = stepLine(p, S.reserved[s], COLORS[s], 2) || C.num_events === 0;
      }
      ctx.restore();
      xAxis(p);
    }
    function renderGap() {
      var p = gapp, ctx = beginPlot(p);
      // Above zero (B holds more) in B's colour, below in A's.
      [[0, 1e300, COLORS[1]], [-1e300, 0, COLORS[0]]].forEach(function (part) {
        ctx.fillStyle = part[2];
        ctx.globalAlpha = 0.45;
        ctx.beginPath();
        ctx.moveTo(X(S.x.length ? S.x[0] : 0), Yof(p, 0));
        stepPath(ctx, p, S.gap.map(function (g) { return Math.min(part[1], Math.max(part[0], g)); }), true);
        ctx.lineTo(X(N), Yof(p, 0));
        ctx.closePath();
        ctx.fill();
        ctx.globalAlpha = 1;
      });
      stepLine(p, S.gap, '#333', 1);
      momentLines(p, false);
      ctx.restore();
      xAxis(p);
    }
    function render() { renderMain(); renderGap(); }
    render();

    function lineAt(e) {
      var i = bucketAt(S.x, e);
      if (i < 0) return '';
      var t = timeAt(S, e);
      var h = '<b>event ' + Math.floor(e) + '</b>' + (t !== null ? ', t \u2248 ' + fmtTime(t) : '') +
          (S.x[i] !== Math.floor(e) || (i + 1 < S.x.length && S.x[i + 1] > S.x[i] + 1)
              ? ' <span class="muted">(maxima of events ' + S.x[i] + '\u2013' + ((i + 1 < S.x.length ? S.x[i + 1] : N) - 1) + ')</span>' : '') +
          '<br>requested ' + fmtBytes(S.requested[i]);
      for (var s = 0; s < 2; s++) {
        h += '<br><span style="color:' + COLORS[s] + '">' + NAMES[s] + '</span> ' + esc(C.labels[s]) +
            ': reserved ' + fmtBytes(S.reserved[s][i]) + (S.allocated[s] ? ', allocated ' + fmtBytes(S.allocated[s][i]) : '');
      }
      return h + '<br>reserved B \u2212 A: <b>' + fmtSigned(S.gap[i]) + '</b>';
    }
    function momentHtml(m, k) {
      return '<b>' + (k + 1) + '. event ' + m.event + '</b>: ' + m.kind + ' of ' + fmtBytes(m.bytes) +
          ' <span class="muted">(' + m.bytes + ' bytes, id ' + m.id + ', stream ' + m.stream + ')</span>' +
          '<br>reserved A ' + fmtSigned(m.change[0]) + ', B ' + fmtSigned(m.change[1]) +
          '; gap ' + fmtSigned(m.gap_before) + ' \u2192 ' + fmtSigned(m.gap_after) +
          (m.context !== null ? '<pre>' + esc(m.context) + '</pre>' : '');
    }
    function eventAtPx(px) { return x0 + (px - L) / (R - L) * (x1 - x0); }
    var dragFrom = null, dragPlot = null;
    [main, gapp].forEach(function (p) {
      p.canvas.addEventListener('mousemove', function (ev) {
        var r = p.canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
        if (dragFrom !== null) {
          if (dragPlot !== p) return;
          var a = Math.max(L, Math.min(dragFrom, px)), b = Math.min(R, Math.max(dragFrom, px));
          p.sel.style.display = 'block';
          p.sel.style.left = a + 'px';
          p.sel.style.width = (b - a) + 'px';
          p.sel.style.top = TOP + 'px';
          p.sel.style.height = (p.B - TOP) + 'px';
          return;
        }
        if (px < L || px > R || py < TOP || py > p.B) { hideTip(); return; }
        var e = eventAtPx(px);
        for (var k = 0; k < M.length; k++) {
          if (Math.abs(X(M[k].event + 0.5) - px) <= 3) { showTip(momentHtml(M[k], k), ev); return; }
        }
        showTip(lineAt(e), ev);
      });
      p.canvas.addEventListener('mouseleave', function () { if (dragFrom === null) hideTip(); });
      p.canvas.addEventListener('mousedown', function (ev) {
        dragFrom = ev.clientX - p.canvas.getBoundingClientRect().left;
        dragPlot = p;
        hideTip();
      });
      p.canvas.addEventListener('dblclick', function () { x0 = 0; x1 = N; render(); });
    });
    window.addEventListener('mouseup', function (ev) {
      if (dragFrom === null) return;
      var p = dragPlot, px = ev.clientX - p.canvas.getBoundingClientRect().left;
      var a = eventAtPx(Math.max(L, Math.min(dragFrom, px))), b = eventAtPx(Math.min(R, Math.max(dragFrom, px)));
      dragFrom = null;
      p.sel.style.display = 'none';
      if (b - a >= 2) { x0 = Math.floor(a); x1 = Math.ceil(b); render(); }
    });

    // The table of moments.
    var hint = document.getElementById('moments-hint');
    var table = document.getElementById('moments');
    if (M.length === 0) {
      hint.textContent = C.widest[0] === 0 ? 'The two recordings reserve the same bytes after every event.'
                                           : 'The gap never grows at a single event.';
      table.style.display = 'none';
      return;
    }
    hint.textContent = 'The ' + M.length + ' events at which the gap of reserved bytes (B \u2212 A) moves ' +
        'furthest from zero, largest first, with the allocation or free each one is.';
    var head = document.createElement('tr');
    ['#', 'event', 'what', 'A reserved', 'B reserved', 'gap before \u2192 after', 'grows by',
     'requested live'].forEach(function (t) {
      var th = document.createElement('th');
      th.textContent = t;
      head.appendChild(th);
    });
    if (S.time) head.insertBefore(document.createElement('th'), head.children[2]).textContent = 'time';
    table.appendChild(head);
    M.forEach(function (m, k) {
      var tr = document.createElement('tr');
      tr.className = 'row';
      function cell(text, cls) {
        var td = document.createElement('td');
        td.textContent = text;
        if (cls) td.className = cls;
        tr.appendChild(td);
        return td;
      }
      cell(String(k + 1), 'num');
      cell(String(m.event), 'num');
      if (S.time) cell(m.time !== null ? fmtTime(m.time) : '-', 'num');
      cell(m.kind + ' of ' + fmtBytes(m.bytes) + ' (id ' + m.id + ', stream ' + m.stream + ')');
      for (var s = 0; s < 2; s++) cell(fmtBytes(m.reserved[s]) + ' (' + fmtSigned(m.change[s]) + ')', 'num');
      cell(fmtSigned(m.gap_before) + ' \u2192 ' + fmtSigned(m.gap_after), 'num ' + (m.gap_after > 0 ? 'more' : 'less'));
      cell(fmtBytes(Math.abs(m.gap_after) - Math.abs(m.gap_before)), 'num');
      cell(fmtBytes(m.requested), 'num');
      if (m.context !== null) tr.title = m.context;
      tr.addEventListener('click', function () {
        var span = Math.max(20, Math.round(N / 40));
        x0 = Math.max(0, m.event - span);
        x1 = Math.min(N, m.event + span);
        render();
        main.canvas.scrollIntoView({block: 'nearest'});
      });
      table.appendChild(tr);
    });
  }
)JS";
}

}  // namespace strata::tools
