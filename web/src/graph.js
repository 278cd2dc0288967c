// The topology as SVG: a line per directed link coloured by its state, a node per agent
// coloured by its distance to the selected destination, and the routes toward it as arrows.
// Each element carries data-* attributes naming what it shows (the browser test reads them).
import { select } from 'd3-selection';
import { forceSimulation, forceLink, forceManyBody, forceCenter } from 'd3-force';
import { scaleSequential } from 'd3-scale';
import { interpolateBlues, interpolateGnBu } from 'd3-scale-chromatic';
import { num } from './api.js';

const WIDTH = 800;
const HEIGHT = 560;
const PAD = 50;
const RADIUS = 20;
const LANE = 4; // the two directions of a link, side by side
const BOW = 26; // how far a route arrow bends away from its link

export function linkState(link) {
  if (!link.up) return 'down';
  if (link.drained) return 'drained';
  if (link.slow) return 'slow';
  return 'up';
}

export const linkKey = (link) => `${link.src_name}>${link.dst_name}`;

const pct = (x) => `${Math.round(100 * x)}%`;
const fmt = (x) => (Number.isFinite(x) ? x.toPrecision(3) : '∞');

// Node positions from a force layout, run to rest at once (no animation) and fitted to the
// view box; deterministic for the same nodes and links.
function layout(names, links) {
  const nodes = names.map((name) => ({ name }));
  const pairs = new Map();
  for (const l of links) {
    const [a, b] = [l.src_name, l.dst_name].sort();
    pairs.set(`${a}>${b}`, { source: a, target: b });
  }
  const simulation = forceSimulation(nodes)
    .force('link', forceLink([...pairs.values()]).id((d) => d.name).distance(120))
    .force('charge', forceManyBody().strength(-500))
    .force('center', forceCenter(0, 0))
    .stop();
  simulation.tick(300);
  const xs = nodes.map((n) => n.x);
  const ys = nodes.map((n) => n.y);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const scale = Math.min((WIDTH - 2 * PAD) / (x1 - x0 || 1), (HEIGHT - 2 * PAD) / (y1 - y0 || 1), 3);
  return new Map(
    nodes.map((n) => [
      n.name,
      { x: WIDTH / 2 + (n.x - (x0 + x1) / 2) * scale, y: HEIGHT / 2 + (n.y - (y0 + y1) / 2) * scale },
    ]),
  );
}

// From p to q: the unit direction and its normal (to the right of travel in SVG coordinates).
function frame(p, q) {
  const len = Math.hypot(q.x - p.x, q.y - p.y) || 1;
  const d = { x: (q.x - p.x) / len, y: (q.y - p.y) / len };
  return { d, n: { x: -d.y, y: d.x } };
}

export class Graph {
  // `onNode(name)` when a node is clicked, `onLink(link)` when a link is.
  constructor(svg, { onNode, onLink }) {
    this.onNode = onNode;
    this.onLink = onLink;
    this.positions = new Map();
    this.layoutKey = '';
    this.svg = select(svg).attr('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
    this.svg
      .append('defs')
      .append('marker')
      .attr('id', 'arrow')
      .attr('viewBox', '0 0 10 10')
      .attr('refX', 8)
      .attr('refY', 5)
      .attr('markerWidth', 5)
      .attr('markerHeight', 5)
      .attr('orient', 'auto')
      .append('path')
      .attr('d', 'M0,0L10,5L0,10z');
    this.linkLayer = this.svg.append('g').attr('class', 'links');
    this.routeLayer = this.svg.append('g').attr('class', 'routes');
    this.nodeLayer = this.svg.append('g').attr('class', 'nodes');
  }

  // Draws `topology` (api/topology), `routes` (api/routes toward `dest`; [] for none) and
  // marks the link whose key is `selected`.
  render(topology, routes, dest, selected) {
    const names = topology.nodes.map((n) => n.name).sort();
    const key = names.join(',') + '|' + topology.links.map(linkKey).sort().join(',');
    if (key !== this.layoutKey) {
      this.positions = layout(names, topology.links);
      this.layoutKey = key;
    }
    this.renderLinks(topology.links, selected);
    this.renderRoutes(routes);
    this.renderNodes(topology.nodes, routes, dest);
  }

  renderLinks(links, selected) {
    const at = this.positions;
    const load = (l) => interpolateBlues(0.45 + 0.55 * Math.min(1, num(l.utilisation)));
    this.linkLayer
      .selectAll('line')
      .data(links, linkKey)
      .join((enter) => enter.append('line').on('click', (_, l) => this.onLink(l)))
      .each(function (l) {
        const p = at.get(l.src_name);
        const q = at.get(l.dst_name);
        const { d, n } = frame(p, q);
        const state = linkState(l);
        select(this)
          .attr('class', `link ${state}${linkKey(l) === selected ? ' selected' : ''}`)
          .attr('data-src', l.src_name)
          .attr('data-dst', l.dst_name)
          .attr('data-state', state)
          .attr('x1', p.x + d.x * RADIUS + n.x * LANE)
          .attr('y1', p.y + d.y * RADIUS + n.y * LANE)
          .attr('x2', q.x - d.x * RADIUS + n.x * LANE)
          .attr('y2', q.y - d.y * RADIUS + n.y * LANE)
          .style('stroke', state === 'up' ? load(l) : null)
          .style('stroke-width', 3 + 5 * Math.min(1, num(l.utilisation)))
          .selectAll('title')
          .data([l])
          .join('title')
          .text(
            `${l.src_name} → ${l.dst_name}: ${state}, ${pct(num(l.utilisation))} used` +
              `${l.why ? `\n${l.why}` : ''}`,
          );
      });
  }

  renderRoutes(routes) {
    const at = this.positions;
    const hops = routes.flatMap((r) =>
      r.next_hops
        .filter((h) => num(h.weight) > 0 && at.has(r.node) && at.has(h.neighbour))
        .map((h) => ({ from: r.node, to: h.neighbour, weight: num(h.weight) })),
    );
    const curve = (h) => {
      const p = at.get(h.from);
      const q = at.get(h.to);
      const { d, n } = frame(p, q);
      const s = { x: p.x + d.x * (RADIUS + 2), y: p.y + d.y * (RADIUS + 2) };
      const e = { x: q.x - d.x * (RADIUS + 4), y: q.y - d.y * (RADIUS + 4) };
      const c = { x: (s.x + e.x) / 2 + n.x * BOW, y: (s.y + e.y) / 2 + n.y * BOW };
      // The label sits on the curve's midpoint (a quadratic Bézier at t = 1/2), outside it.
      const m = { x: (s.x + 2 * c.x + e.x) / 4 + n.x * 10, y: (s.y + 2 * c.y + e.y) / 4 + n.y * 10 };
      return { path: `M${s.x},${s.y}Q${c.x},${c.y} ${e.x},${e.y}`, label: m };
    };
    const key = (h) => `${h.from}>${h.to}`;
    this.routeLayer
      .selectAll('path.route')
      .data(hops, key)
      .join('path')
      .attr('class', 'route')
      .attr('data-from', (h) => h.from)
      .attr('data-to', (h) => h.to)
      .attr('data-weight', (h) => h.weight)
      .attr('marker-end', 'url(#arrow)')
      .attr('d', (h) => curve(h).path)
      .style('stroke-width', (h) => 1 + 3 * h.weight);
    this.routeLayer
      .selectAll('text.route-weight')
      .data(hops, key)
      .join('text')
      .attr('class', 'route-weight')
      .attr('data-from', (h) => h.from)
      .attr('data-to', (h) => h.to)
      .attr('x', (h) => curve(h).label.x)
      .attr('y', (h) => curve(h).label.y)
      .text((h) => pct(h.weight));
  }

  renderNodes(nodes, routes, dest) {
    const at = this.positions;
    // The destination has no row of its own toward itself: it is at distance 0.
    const distance = new Map(routes.map((r) => [r.node, num(r.potential)]));
    if (routes.length > 0 && !distance.has(dest)) distance.set(dest, 0);
    const finite = [...distance.values()].filter(Number.isFinite);
    const colour = scaleSequential(interpolateGnBu).domain([Math.max(...finite, 1e-9) * 1.25, 0]);
    const fill = (name) => {
      const v = distance.get(name);
      if (v === undefined) return '#f4f4f4';
      return Number.isFinite(v) ? colour(v) : '#bbbbbb';
    };
    const dark = (name) => Number.isFinite(distance.get(name)) && colour.domain()[0] * 0.45 > distance.get(name);
    const groups = this.nodeLayer
      .selectAll('g.node')
      .data(nodes, (n) => n.name)
      .join((enter) => {
        const g = enter.append('g').on('click', (_, n) => this.onNode(n.name));
        g.append('circle').attr('r', RADIUS);
        g.append('text').attr('class', 'name').attr('dy', '0.35em');
        g.append('text').attr('class', 'potential').attr('dy', RADIUS + 14);
        g.append('title');
        return g;
      })
      .attr('class', (n) => `node${n.connected ? '' : ' disconnected'}${n.name === dest ? ' dest' : ''}`)
      .attr('data-node', (n) => n.name)
      .attr('data-potential', (n) => distance.get(n.name) ?? '')
      .attr('transform', (n) => `translate(${at.get(n.name).x},${at.get(n.name).y})`);
    groups.select('circle').style('fill', (n) => fill(n.name));
    groups
      .select('text.name')
      .classed('light', (n) => dark(n.name))
      .text((n) => n.name);
    groups.select('text.potential').text((n) => (distance.has(n.name) ? fmt(distance.get(n.name)) : ''));
    groups
      .select('title')
      .text(
        (n) =>
          `${n.name} (node ${n.node_id}): ${n.connected ? 'connected' : 'not connected'}, ` +
          `table ${n.acked_version}${n.static_table ? ' (static)' : ''}, ${n.fallbacks} fallbacks`,
      );
  }
}
