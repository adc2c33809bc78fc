// The viewer page's script: the active-memory timeline's drawer (tools/viewer_script.h).
#include "tools/viewer_script.h"

namespace strata::tools {

std::string_view ViewerScriptTimeline() {
  return R"JS(
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
      eventAxis(ctx, L, R, TOP, B, Hc, x0, x1, X, S);
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
)JS";
}

}  // namespace strata::tools
