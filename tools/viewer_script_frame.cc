// The frame of the viewer page's script (tools/viewer_script.h): the prelude that opens it and
// the driver that closes it.
#include "tools/viewer_script.h"

namespace strata::tools {

std::string_view ViewerScriptPrelude() {
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
  // A plot's frame (its left and bottom edges, from L and TOP to R and B) and its x axis over
  // events x0..x1 (X: an event's x): ticks labelled with the event index, and with the time
  // below when series S has times; the caption near the foot of the canvas (height H).
  function eventAxis(ctx, L, R, TOP, B, H, x0, x1, X, S) {
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
    ctx.fillText(S.time ? 'event (time since recording started)' : 'event', (L + R) / 2, H - 14);
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
)JS";
}

std::string_view ViewerScriptDriver() {
  return R"JS(
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
