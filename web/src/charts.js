// Two uPlot charts of one link over the controller's last minutes (api/series): measured
// utilisation against the forecast and the planned one, and RTT against queueing.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

const HEIGHT = 170;

function options(title, width, series, yRange) {
  return {
    title,
    width,
    height: HEIGHT,
    scales: { y: { range: yRange } },
    series: [{}, ...series.map(([label, stroke, dash]) => ({ label, stroke, width: 2, dash }))],
    axes: [{}, { size: 50 }],
  };
}

export class LinkCharts {
  constructor(utilisationEl, rttEl) {
    this.utilisationEl = utilisationEl;
    this.rttEl = rttEl;
    this.plots = [];
  }

  // Shows `series` (api/series); the charts are made on the first call after clear().
  show(series) {
    const t = series.t;
    const data = [
      [t, series.utilisation, series.forecast, series.planned],
      [t, series.rtt_ms, series.queueing_ms],
    ];
    if (this.plots.length === 0) {
      const width = this.utilisationEl.clientWidth || 400;
      // Utilisation from 0 to at least 1 (a full link), higher if it is measured above.
      const upToFull = (_, min, max) => [0, Math.max(1, max ?? 1)];
      this.plots = [
        new uPlot(
          options('utilisation', width,
            [['measured', '#1f77b4'], ['forecast', '#ff7f0e', [6, 4]], ['planned', '#2ca02c']],
            upToFull),
          data[0], this.utilisationEl),
        new uPlot(
          options('RTT and queueing (ms)', width, [['RTT', '#9467bd'], ['queueing', '#8c564b']],
            (_, min, max) => [0, Math.max(1, max ?? 1)]),
          data[1], this.rttEl),
      ];
    } else {
      this.plots.forEach((plot, i) => plot.setData(data[i]));
    }
  }

  clear() {
    this.plots.forEach((plot) => plot.destroy());
    this.plots = [];
  }

  resize() {
    const width = this.utilisationEl.clientWidth;
    if (width) this.plots.forEach((plot) => plot.setSize({ width, height: HEIGHT }));
  }
}
