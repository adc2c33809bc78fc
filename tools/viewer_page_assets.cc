#include "tools/viewer_page_assets.h"

namespace strata::tools {

std::string_view ViewerPageHead() {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
}

std::string_view ViewerPageCss() {
  return R"CSS(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 14px 22px;
       color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 2px; }
h2 { font-size: 15px; margin: 0 0 4px; }
#subtitle { color: #555; font-size: 13px; }
.status { font-size: 11px; color: #999; margin: 2px 0 6px; }
.status.error { color: #b00020; font-size: 14px; font-weight: bold; }
#figures { display: grid; grid-template-columns: repeat(3, max-content auto); gap: 2px 10px;
           font-size: 12.5px; margin: 4px 0 8px; }
#figures dt { color: #666; }
#figures dd { margin: 0 18px 0 0; font-weight: 600; }
section { margin-top: 14px; }
.legend { font-size: 12px; margin: 2px 0 4px; line-height: 20px; }
.legend .item { white-space: nowrap; margin-right: 14px; }
.legend .sw { display: inline-block; width: 12px; height: 12px; vertical-align: -1px;
              margin-right: 4px; border-radius: 2px; }
.legend .ln { display: inline-block; width: 18px; height: 0; vertical-align: 4px;
              margin-right: 4px; border-top: 2px solid; }
.plot { position: relative; }
canvas { display: block; }
.hint { font-size: 11px; color: #888; margin-top: 2px; }
#selection { position: absolute; display: none; pointer-events: none;
             background: rgba(66, 133, 244, 0.15); border: 1px solid rgba(66, 133, 244, 0.7); }
#tooltip { position: fixed; display: none; pointer-events: none; z-index: 10; max-width: 540px;
           background: rgba(255, 255, 255, 0.97); border: 1px solid #999; border-radius: 3px;
           padding: 6px 8px; font-size: 12px; box-shadow: 0 2px 8px rgba(0, 0, 0, 0.2); }
#tooltip pre { margin: 4px 0 0; font-size: 11px; white-space: pre-wrap; max-height: 260px;
               overflow: hidden; background: #f6f6f6; padding: 3px; }
#tooltip .muted { color: #777; }
.selection { position: absolute; display: none; pointer-events: none;
             background: rgba(66, 133, 244, 0.15); border: 1px solid rgba(66, 133, 244, 0.7); }
h3 { font-size: 13px; margin: 10px 0 2px; font-weight: 600; }
#moments { border-collapse: collapse; font-size: 12px; margin-top: 4px; }
#moments th { text-align: left; color: #555; font-weight: 600; border-bottom: 1px solid #ccc;
              padding: 3px 10px 3px 0; }
#moments td { padding: 2px 10px 2px 0; border-bottom: 1px solid #eee; white-space: nowrap; }
#moments td.num { text-align: right; font-variant-numeric: tabular-nums; }
#moments tr.row { cursor: pointer; }
#moments tr.row:hover { background: #f2f6fc; }
.more { color: #b2182b; }
.less { color: #2166ac; }
)CSS";
}

std::string_view ViewerPageBody() {
  return R"HTML(<body>
<h1 id="title"></h1>
<div id="subtitle"></div>
<div id="status" class="status">rendering...</div>
<dl id="figures"></dl>
<section id="timeline-section">
<h2>Active memory timeline</h2>
<div class="legend" id="tl-legend"></div>
<div class="plot" id="tl-plot"><canvas id="tl"></canvas><div id="selection"></div></div>
<div class="hint">Each band is one allocation, from its alloc event to its free event; when one
ends, those above it shift down. Hover for details; drag to zoom, double-click to zoom out.</div>
</section>
<section id="compare-section" style="display: none">
<h2>Reserved memory of two recordings of the same events</h2>
<div class="legend" id="cmp-legend"></div>
<div class="plot" id="cmp-plot"><canvas id="cmp"></canvas><div class="selection" id="cmp-selection"></div></div>
<h3 id="gap-title">Reserved B &minus; A</h3>
<div class="plot" id="gap-plot"><canvas id="gap"></canvas><div class="selection" id="gap-selection"></div></div>
<div class="hint">Both recordings made the same allocations and frees (the x axis); the grey area
is the bytes requested and live. The lower plot is the difference of their reserved bytes (above
zero: B holds more). Numbered lines mark the events where that difference grows most, listed
below. Hover for the figures at an event; drag to zoom, double-click to zoom out; click a row to
zoom to its event.</div>
<h3>Where they diverge</h3>
<div class="hint" id="moments-hint"></div>
<table id="moments"></table>
</section>
<section id="segments-section">
<h2>Segments</h2>
<div class="legend" id="seg-legend"></div>
<div class="plot" id="seg-plot"><canvas id="seg"></canvas></div>
<div class="hint" id="seg-hint"></div>
</section>
<div id="tooltip"></div>
)HTML";
}

std::string_view ViewerPageJs() {
  return R"JS(
(function () {
  'use strict';
  var statusEl = document.getElementById('status');
  var failed = false;
  function fail(msg) {
    failed = true;
    statusEl.textContent = 'error: ' + msg;
    statusEl.className = 'status error';
  }
  window.onerror = function (msg, src, line) {
    fail(msg + (line ? ' (line ' + line + ')' : ''));
  };
  var D;
  try {
    D = JSON.parse(document.getElementById('data').textContent);
  } catch (e) {
    fail('cannot read the embedded data: ' + e.message);
    return;
  }

  var UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  function fmtBytes(b) {
    if (b === null || b === undefined) return '-';
    var i = 0, v = b;
    while (i < UNITS.length - 1 && v >= 1024) { v /= 1024; i++; }
    return (i === 0 ? String(b) : v.toFixed(2)) + ' ' + UNITS[i];
  }
  function fmtTime(ns) {
    if (ns === null || ns === undefined) return null;
    if (ns < 1e3) return ns + ' ns';
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + ' \u00b5s';
    if (ns < 1e9) return (ns / 1e6).toFixed(2) + ' ms';
    return (ns / 1e9).toFixed(3) + ' s';
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }
  function niceStep(span, target) {
    if (!(span > 0)) return 1;
    var raw = span / target, mag = Math.pow(10, Math.floor(Math.log10(raw))), n = raw / mag;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * mag;
  }
  function hexPlus(hex, off) {
    return '0x' + (parseInt(hex, 16) + off).toString(16);
  }
  function setupCanvas(canvas, w, h) {
    var r = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * r);
    canvas.height = Math.round(h * r);
    canvas.style.width = w + 'px';
    canvas.style.height = h + 'px';
    var c = canvas.getContext('2d');
    c.setTransform(r, 0, 0, r, 0, 0);
    return c;
  }
  function legendItem(parent, color, text, line, dashed) {
    var s = document.createElement('span');
    s.className = 'item';
    var sw = document.createElement('span');
    sw.className = line ? 'ln' : 'sw';
    if (line) sw.style.borderTop = '2px ' + (dashed ? 'dashed ' : 'solid ') + color;
    else sw.style.background = color;
    s.appendChild(sw);
    s.appendChild(document.createTextNode(text));
    parent.appendChild(s);
  }
  // A reference (e.g. PyTorch's peak reserved) as a legend item and as a dashed line across the
  // plot from L to R at height y.
  function referenceLegend(parent, r) {
    legendItem(parent, '#888', r[0] + ' (' + fmtBytes(r[1]) + ')', true, true);
  }
  function referenceLine(ctx, L, R, y, r) {
    ctx.strokeStyle = '#888';
    ctx.lineWidth = 1;
    ctx.setLineDash([6, 4]);
    ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(R, y); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = '#555';
    ctx.textAlign = 'right';
    ctx.textBaseline = 'bottom';
    ctx.fillText(r[0] + ' (' + fmtBytes(r[1]) + ')', R - 4, y - 2);
  }
  function seriesMax(arr) { var m = 0; if (arr) arr.forEach(function (v) { if (v > m) m = v; }); return m; }
  function bucketAt(arr, e) {  // last i with arr[i] <= e
    var lo = 0, hi = arr.length - 1, r = -1;
    while (lo <= hi) { var m = (lo + hi) >> 1; if (arr[m] <= e) { r = m; lo = m + 1; } else hi = m - 1; }
    return r;
  }
  // The time of the last sample of series S at or before event e (null without times).
  function timeAt(S, e) {
    if (!S.time) return null;
    for (var i = bucketAt(S.x, e); i >= 0; i--) if (S.time[i] !== null) return S.time[i];
    return null;
  }

  var tip = document.getElementById('tooltip');
  function showTip(html, ev) {
    tip.innerHTML = html;
    tip.style.display = 'block';
    var x = ev.clientX + 14, y = ev.clientY + 14, w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  document.getElementById('title').textContent = D.title;
  document.getElementById('subtitle').textContent = D.subtitle || '';
  var figs = document.getElementById('figures');
  D.figures.forEach(function (f) {
    var dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = f[0];
    dd.textContent = f[1];
    figs.appendChild(dt);
    figs.appendChild(dd);
  });

  var STREAM_HUES = [212, 28, 135, 282, 352, 178, 48, 318];
  function streamColor(stream) {
    return 'hsl(' + STREAM_HUES[stream % STREAM_HUES.length] + ',60%,52%)';
  }
  function bandColor(stream, id) {
    // Neighbours differ in lightness so that bands stay apart; the hue tells the stream.
    var h = (Math.imul(id | 0, 2654435761) >>> 0) / 4294967296;
    var hue = STREAM_HUES[stream % STREAM_HUES.length] + (h - 0.5) * 16;
    return 'hsl(' + hue.toFixed(0) + ',' + (48 + 22 * h).toFixed(0) + '%,' +
        (38 + 30 * ((h * 7) % 1)).toFixed(0) + '%)';
  }

  var numBands = 0, numSegments = 0;

  // ---- the timeline -----------------------------------------------------------------------
  function drawTimeline(T) {
    var N = Math.max(T.num_events, 1);
    var S = T.series, E = T.external || null;
    var bands = T.bands.map(function (b) {
      return {a: b[0], f: b[1], size: b[2], stream: b[3], id: b[4], ctx: b[5], addr: b[6],
              ta: b[7], tf: b[8], pts: [], cur: 0, color: bandColor(b[3], b[4])};
    });
    numBands = bands.length;
    // Stack: a band starts on top of those live; when one ends, those above shift down by its
    // size over one event. pts holds (x, bottom) pairs.
    var evs = [];
    bands.forEach(function (b, i) {
      evs.push([b.a, 1, i]);
      if (b.f < T.num_events) evs.push([b.f, 0, i]);
    });
    evs.sort(function (p, q) { return p[0] - q[0] || p[1] - q[1]; });
    var live = [], top = 0;
    evs.forEach(function (ev) {
      var x = ev[0], b = bands[ev[2]];
      if (ev[1] === 1) {
        b.cur = top;
        b.pts.push(x, top);
        live.push(b);
        top += b.size;
        return;
      }
      var k = live.indexOf(b);
      live.splice(k, 1);
      top -= b.size;
      b.pts.push(x, b.cur);
      for (var j = k; j < live.length; j++) {
        var c = live[j];
        c.pts.push(x, c.cur);
        c.cur -= b.size;
        c.pts.push(x + 1, c.cur);
      }
    });
    live.forEach(function (b) { b.pts.push(N, b.cur); });

    var yMax = Math.max(T.peak_requested, T.peak_reserved || 0, 1);
    if (E) yMax = Math.max(yMax, seriesMax(E.requested), seriesMax(E.allocated), seriesMax(E.reserved));
    T.references.forEach(function (r) { yMax = Math.max(yMax, r[1]); });
    yMax *= 1.06;

    var legend = document.getElementById('tl-legend');
    var streams = {};
    bands.forEach(function (b) { streams[b.stream] = true; });
    Object.keys(streams).forEach(function (s) { legendItem(legend, streamColor(+s), 'stream ' + s); });
    if (T.small_count > 0) legendItem(legend, '#d4d4d4', T.small_count + ' smaller allocations');
    // A replay's requested bytes are the trace's: drawn once, from the trace when there is one.
    var ownRequested = S.x.length > 0;
    legendItem(legend, ownRequested ? '#555' : '#1f77b4', 'requested (peak ' +
        fmtBytes(ownRequested ? T.peak_requested : seriesMax(E && E.requested)) + ')', true);
    if (E) {
      legendItem(legend, '#ff7f0e', 'allocated (peak ' + fmtBytes(seriesMax(E.allocated)) + ')', true);
      legendItem(legend, '#2ca02c', 'reserved (peak ' + fmtBytes(seriesMax(E.reserved)) + ')', true);
    } else if (S.reserved) {
      legendItem(legend, '#2ca02c', 'reserved (peak ' + fmtBytes(T.peak_reserved) + ')', true);
    }
    T.references.forEach(function (r) { referenceLegend(legend, r); });
    if (T.markers.some(function (m) { return m[1] === 'oom'; })) legendItem(legend, '#d62728', 'out of memory', true);
    if (T.markers.some(function (m) { return m[1] === 'empty_cache'; })) legendItem(legend, '#9467bd', 'empty_cache', true, true);

    var plot = document.getElementById('tl-plot');
    var canvas = document.getElementById('tl');
    var W = Math.max(plot.clientWidth || 0, 600), Hc = 500;
    var ctx = setupCanvas(canvas, W, Hc);
    var L = 84, R = W - 16, TOP = 12, B = Hc - (S.time ? 52 : 38);
    var x0 = 0, x1 = N;
    function X(e) { return L + (e - x0) / (x1 - x0) * (R - L); }
    function Y(b) { return B - b / yMax * (B - TOP); }
    function stepLine(xs, ys, color, width, dash) {
      if (!xs || xs.length === 0) return;
      ctx.beginPath();
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.setLineDash(dash || []);
      for (var i = 0; i < xs.length; i++) {
        var xa = X(xs[i]), xb = X(i + 1 < xs.length ? xs[i + 1] : N), y = Y(ys[i]);
        if (i === 0) ctx.moveTo(xa, y); else ctx.lineTo(xa, y);
        ctx.lineTo(xb, y);
      }
      ctx.stroke();
      ctx.setLineDash([]);
    }

    function render() {
      ctx.clearRect(0, 0, W, Hc);
      ctx.font = '11px sans-serif';
      // Grid and y labels.
      var unit = 0;
      while (unit < UNITS.length - 1 && yMax / 1.06 >= Math.pow(1024, unit + 1)) unit++;
      var ub = Math.pow(1024, unit), ystep = niceStep(yMax / ub, 6) * ub;
      ctx.strokeStyle = '#e6e6e6';
      ctx.lineWidth = 1;
      ctx.fillStyle = '#444';
      ctx.textAlign = 'right';
      ctx.textBaseline = 'middle';
      for (var v = 0; v <= yMax; v += ystep) {
        var y = Math.round(Y(v)) + 0.5;
        ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(R, y); ctx.stroke();
        var label = v / ub;
        ctx.fillText((ystep / ub < 1 ? label.toFixed(1) : label.toFixed(0)) + ' ' + UNITS[unit], L - 6, y);
      }
      ctx.save();
      ctx.beginPath();
      ctx.rect(L, TOP, R - L, B - TOP);
      ctx.clip();
      // The total requested: grey; the bands cover the part they account for.
      if (S.x.length > 0) {
        ctx.fillStyle = '#d4d4d4';
        ctx.beginPath();
        ctx.moveTo(X(S.x[0]), Y(0));
        for (var i = 0; i < S.x.length; i++) {
          var xb = X(i + 1 < S.x.length ? S.x[i + 1] : N), yy = Y(S.requested[i]);
          ctx.lineTo(X(S.x[i]), yy);
          ctx.lineTo(xb, yy);
        }
        ctx.lineTo(X(N), Y(0));
        ctx.closePath();
        ctx.fill();
      }
      bands.forEach(function (b) {
        if (b.f < x0 || b.a > x1) return;
        var p = b.pts;
        ctx.fillStyle = b.color;
        ctx.beginPath();
        ctx.moveTo(X(p[0]), Y(p[1]));
        for (var j = 2; j < p.length; j += 2) ctx.lineTo(X(p[j]), Y(p[j + 1]));
        for (j = p.length - 2; j >= 0; j -= 2) ctx.lineTo(X(p[j]), Y(p[j + 1] + b.size));
        ctx.closePath();
        ctx.fill();
      });
      stepLine(S.x, S.requested, '#555', 1);
      if (E) {
        if (!ownRequested) stepLine(E.x, E.requested, '#1f77b4', 1.5);
        stepLine(E.x, E.allocated, '#ff7f0e', 1.5);
        stepLine(E.x, E.reserved, '#2ca02c', 2);
      } else if (S.reserved) {
        stepLine(S.x, S.reserved, '#2ca02c', 2);
      }
      T.references.forEach(function (r) { referenceLine(ctx, L, R, Y(r[1]), r); });
      T.markers.forEach(function (m) {
        var x = Math.round(X(m[0])) + 0.5, oom = m[1] === 'oom';
        ctx.strokeStyle = oom ? '#d62728' : '#9467bd';
        ctx.lineWidth = oom ? 1.5 : 1;
        ctx.setLineDash(oom ? [] : [4, 3]);
        ctx.beginPath(); ctx.moveTo(x, TOP); ctx.lineTo(x, B); ctx.stroke();
        ctx.setLineDash([]);
        if (oom) {
          ctx.fillStyle = '#d62728';
          ctx.textAlign = 'left';
          ctx.textBaseline = 'top';
          ctx.fillText('OOM', x + 3, TOP + 2);
        }
      });
      ctx.restore();
      // Axes and x labels (event index; time below when the trace has it).
      ctx.strokeStyle = '#333';
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(L + 0.5, TOP); ctx.lineTo(L + 0.5, B + 0.5); ctx.lineTo(R, B + 0.5); ctx.stroke();
      var xstep = Math.max(1, niceStep(x1 - x0, 10));
      ctx.fillStyle = '#444';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      for (var e = Math.ceil(x0 / xstep) * xstep; e <= x1; e += xstep) {
        var x = Math.round(X(e)) + 0.5;
        ctx.beginPath(); ctx.moveTo(x, B); ctx.lineTo(x, B + 5); ctx.stroke();
        ctx.fillText(String(e), x, B + 7);
        var t = timeAt(S, e);
        if (t !== null) { ctx.fillStyle = '#888'; ctx.fillText(fmtTime(t), x, B + 21); ctx.fillStyle = '#444'; }
      }
      ctx.fillText(S.time ? 'event (time since recording started)' : 'event', (L + R) / 2, Hc - 14);
    }
    render();

    function offsetAt(b, e) {
      var p = b.pts, off = p[1];
      for (var j = 0; j < p.length && p[j] <= e; j += 2) off = p[j + 1];
      return off;
    }
    function eventLine(e) {
      var s = '<div class="muted">event ' + Math.floor(e);
      var t = timeAt(S, e);
      if (t !== null) s += ', t \u2248 ' + fmtTime(t);
      var i = bucketAt(S.x, e);
      if (i >= 0) s += '<br>requested ' + fmtBytes(S.requested[i]) + (S.reserved ? ', reserved ' + fmtBytes(S.reserved[i]) : '');
      if (E) {
        var k = bucketAt(E.x, e);
        if (k >= 0) s += '<br>replay: requested ' + fmtBytes(E.requested[k]) + ', allocated ' + fmtBytes(E.allocated[k]) + ', reserved ' + fmtBytes(E.reserved[k]);
      }
      return s + '</div>';
    }
    var sel = document.getElementById('selection'), dragFrom = null;
    function eventAtPx(px) { return x0 + (px - L) / (R - L) * (x1 - x0); }
    canvas.addEventListener('mousemove', function (ev) {
      var r = canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
      if (dragFrom !== null) {
        var a = Math.max(L, Math.min(dragFrom, px)), b = Math.min(R, Math.max(dragFrom, px));
        sel.style.display = 'block';
        sel.style.left = a + 'px';
        sel.style.width = (b - a) + 'px';
        sel.style.top = TOP + 'px';
        sel.style.height = (B - TOP) + 'px';
        return;
      }
      if (px < L || px > R || py < TOP || py > B) { hideTip(); return; }
      var e = eventAtPx(px), bytes = (B - py) / (B - TOP) * yMax;
      for (var m = 0; m < T.markers.length; m++) {
        var mk = T.markers[m];
        if (Math.abs(X(mk[0]) - px) <= 3) {
          var h = '<b>' + (mk[1] === 'oom' ? 'out of memory' : 'empty_cache') + '</b> after event ' + mk[0] +
              '<br>' + (mk[1] === 'oom' ? 'request of ' : 'gave back ') + fmtBytes(mk[2]) +
              (mk[3] !== null ? ' on stream ' + mk[3] : '') + (mk[5] !== null ? '<br>t = ' + fmtTime(mk[5]) : '');
          if (mk[4] !== null && T.contexts[mk[4]] !== undefined) h += '<pre>' + esc(T.contexts[mk[4]]) + '</pre>';
          showTip(h, ev);
          return;
        }
      }
      for (var i = 0; i < bands.length; i++) {
        var bd = bands[i];
        if (e < bd.a || e >= bd.f + 1) continue;
        var off = offsetAt(bd, e);
        if (bytes >= off && bytes < off + bd.size) {
          var html = '<b>' + fmtBytes(bd.size) + '</b> <span class="muted">(' + bd.size + ' bytes)</span><br>' +
              'stream ' + bd.stream + ', id ' + bd.id + (bd.addr ? ', at ' + bd.addr : '') + '<br>' +
              'allocated at event ' + bd.a + (bd.ta !== null ? ' (t = ' + fmtTime(bd.ta) + ')' : '') + '<br>' +
              (bd.f < T.num_events ? 'freed at event ' + bd.f + (bd.tf !== null ? ' (t = ' + fmtTime(bd.tf) + ')' : '') +
               ', lived ' + (bd.f - bd.a) + ' events' : 'never freed');
          if (bd.ctx !== null && T.contexts[bd.ctx] !== undefined) html += '<pre>' + esc(T.contexts[bd.ctx]) + '</pre>';
          showTip(html + eventLine(e), ev);
          return;
        }
      }
      var bi = bucketAt(S.x, e);
      if (bi >= 0 && bytes <= S.requested[bi] && T.small_count > 0) {
        showTip('<b>smaller allocations</b> <span class="muted">(' + T.small_count + ' not drawn as bands)</span>' + eventLine(e), ev);
        return;
      }
      showTip(eventLine(e), ev);
    });
    canvas.addEventListener('mouseleave', function () { if (dragFrom === null) hideTip(); });
    canvas.addEventListener('mousedown', function (ev) {
      var r = canvas.getBoundingClientRect();
      dragFrom = ev.clientX - r.left;
      hideTip();
    });
    window.addEventListener('mouseup', function (ev) {
      if (dragFrom === null) return;
      var r = canvas.getBoundingClientRect(), px = ev.clientX - r.left;
      var a = eventAtPx(Math.max(L, Math.min(dragFrom, px))), b = eventAtPx(Math.min(R, Math.max(dragFrom, px)));
      dragFrom = null;
      sel.style.display = 'none';
      if (b - a >= 2) { x0 = Math.floor(a); x1 = Math.ceil(b); render(); }
    });
    canvas.addEventListener('dblclick', function () { x0 = 0; x1 = N; render(); });
  }

  // ---- the segment map --------------------------------------------------------------------
  var STATE_COLORS = ['#4c78a8', '#e4e4e4', '#f58518', '#b279a2', '#54a24b', '#9d9d9d'];
  function drawSegments(G) {
    var MAX_ROWS = 1200;
    var list = G.list.slice(0, MAX_ROWS);
    numSegments = list.length;
    var hint = document.getElementById('seg-hint');
    hint.textContent = 'Each bar is one segment, its length to scale (the largest is ' +
        fmtBytes(G.max_size) + '); blocks in address order, coloured by state; allocated blocks show ' +
        'their unused rounding lighter. Hover for details.' +
        (G.list.length > MAX_ROWS ? ' The first ' + MAX_ROWS + ' of ' + G.list.length + ' segments are shown.' : '');
    var legend = document.getElementById('seg-legend');
    G.states.forEach(function (s, i) {
      if (i === G.states.length - 1 && G.state_bytes[i] === 0) return;  // "other": only when present
      legendItem(legend, STATE_COLORS[i], s + ' (' + fmtBytes(G.state_bytes[i]) + ')');
    });
    var plot = document.getElementById('seg-plot'), canvas = document.getElementById('seg');
    var W = Math.max(plot.clientWidth || 0, 600);
    var LABEL = 230, ROW = 18, GAP = 5, TOP = 4;
    var barW = W - LABEL - 12, H = TOP + Math.max(list.length, 1) * (ROW + GAP) + 4;
    var ctx = setupCanvas(canvas, W, H);
    var scale = G.max_size > 0 ? barW / G.max_size : 0;
    ctx.font = '12px sans-serif';
    ctx.textBaseline = 'middle';
    if (list.length === 0) { ctx.fillStyle = '#888'; ctx.fillText('no segments', LABEL, TOP + ROW / 2); }
    list.forEach(function (s, r) {
      var y = TOP + r * (ROW + GAP), w = Math.max(2, s[1] * scale);
      ctx.fillStyle = '#333';
      ctx.textAlign = 'right';
      ctx.fillText((s[2] ? s[2] + ' \u00b7 ' : '') + fmtBytes(s[1]), LABEL - 8, y + ROW / 2);
      ctx.fillStyle = '#fbfbfb';
      ctx.fillRect(LABEL, y, w, ROW);
      s[4].forEach(function (b) {
        var bx = LABEL + b[0] * scale, bw = Math.max(b[1] * scale, 0.6);
        ctx.fillStyle = STATE_COLORS[b[3]];
        ctx.fillRect(bx, y + 1, bw, ROW - 2);
        if (b[3] === 0 && b[2] > 0 && b[2] < b[1]) {  // the rounding past the request: lighter
          ctx.fillStyle = 'rgba(255,255,255,0.45)';
          ctx.fillRect(bx + b[2] * scale, y + 1, bw - b[2] * scale, ROW - 2);
        }
        if (bw >= 4) { ctx.fillStyle = '#fff'; ctx.fillRect(bx, y + 1, 1, ROW - 2); }
      });
      if (s[3] !== null && s[3] < s[1]) {  // partly mapped (virtual memory): the unmapped tail
        ctx.strokeStyle = '#bbb';
        ctx.setLineDash([3, 3]);
        ctx.strokeRect(LABEL + s[3] * scale + 0.5, y + 0.5, (s[1] - s[3]) * scale - 1, ROW - 1);
        ctx.setLineDash([]);
      }
      ctx.strokeStyle = '#777';
      ctx.lineWidth = 1;
      ctx.strokeRect(LABEL + 0.5, y + 0.5, w - 1, ROW - 1);
    });
    canvas.addEventListener('mousemove', function (ev) {
      var rc = canvas.getBoundingClientRect(), px = ev.clientX - rc.left, py = ev.clientY - rc.top;
      var r = Math.floor((py - TOP) / (ROW + GAP));
      if (r < 0 || r >= list.length || py - TOP - r * (ROW + GAP) > ROW) { hideTip(); return; }
      var s = list[r];
      var head = '<div class="muted">segment ' + s[0] + ', ' + fmtBytes(s[1]) + (s[2] ? ', pool ' + esc(s[2]) : '') +
          (s[3] !== null ? ', mapped ' + fmtBytes(s[3]) : '') + ', ' + s[4].length + ' block(s)</div>';
      var off = (px - LABEL) / scale;
      if (px >= LABEL && off < s[1]) {
        for (var i = 0; i < s[4].length; i++) {
          var b = s[4][i];
          if (off >= b[0] && off < b[0] + b[1] || (b[1] * scale < 3 && Math.abs(LABEL + b[0] * scale - px) < 2)) {
            showTip('<b>' + G.states[b[3]] + '</b> ' + fmtBytes(b[1]) + ' <span class="muted">(' + b[1] + ' bytes)</span>' +
                (b[3] === 0 ? '<br>requested ' + fmtBytes(b[2]) : '') +
                '<br>at ' + hexPlus(s[0], b[0]) + (b[4] !== null ? ', stream ' + b[4] : '') + head, ev);
            return;
          }
        }
      }
      showTip(head, ev);
    });
    canvas.addEventListener('mouseleave', hideTip);
  }

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
    function xAxis(p) {
      var ctx = p.ctx;
      ctx.strokeStyle = '#333';
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(L + 0.5, TOP); ctx.lineTo(L + 0.5, p.B + 0.5); ctx.lineTo(R, p.B + 0.5); ctx.stroke();
      var xstep = Math.max(1, niceStep(x1 - x0, 10));
      ctx.fillStyle = '#444';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      for (var e = Math.ceil(x0 / xstep) * xstep; e <= x1; e += xstep) {
        var x = Math.round(X(e)) + 0.5;
        ctx.beginPath(); ctx.moveTo(x, p.B); ctx.lineTo(x, p.B + 5); ctx.stroke();
        ctx.fillText(String(e), x, p.B + 7);
        var t = timeAt(S, e);
        if (t !== null) { ctx.fillStyle = '#888'; ctx.fillText(fmtTime(t), x, p.B + 21); ctx.fillStyle = '#444'; }
      }
      ctx.fillText(S.time ? 'event (time since recording started)' : 'event', (L + R) / 2, p.H - 14);
    }
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

  if (D.comparison) {
    document.getElementById('compare-section').style.display = '';
    document.getElementById('timeline-section').style.display = 'none';
    drawComparison(D.comparison);
  } else if (D.timeline) {
    drawTimeline(D.timeline);
  } else {
    document.getElementById('timeline-section').style.display = 'none';
  }
  if (D.segments) drawSegments(D.segments);
  else document.getElementById('segments-section').style.display = 'none';
  if (failed) return;
  if (D.comparison) {
    // Only once both recordings' reserved lines were drawn: the headless check relies on it.
    var drawn = sidesDrawn.filter(function (x) { return x; }).length;
    if (drawn !== 2) fail('drew ' + drawn + ' of the 2 recordings');
    else statusEl.textContent = 'rendered: 2 recordings compared, ' + D.comparison.num_events + ' events, ' +
        D.comparison.moments.length + ' moments where they diverge';
  } else {
    statusEl.textContent = 'rendered: ' + numBands + ' bands, ' + numSegments + ' segments';
  }
})();
)JS";
}

}  // namespace strata::tools
