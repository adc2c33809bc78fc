// The viewer page's script: the segment map's drawer (tools/viewer_script.h).
#include "tools/viewer_script.h"

namespace strata::tools {

std::string_view ViewerScriptSegments() {
  return R"JS(
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
)JS";
}

}  // namespace strata::tools
