// The controller's live view: wires the API to the graph, the link charts and the events.
// The topology, the routes and the selected link's series are fetched again on the stream's
// `cycle` messages, at most once a second, and at once when the user changes what is shown.
import './style.css';
import { getJson, num, subscribe } from './api.js';
import { Graph, linkKey, linkState } from './graph.js';
import { LinkCharts } from './charts.js';
import { EventList } from './events.js';

const REFRESH_MS = 1000;
const $ = (id) => document.getElementById(id);

const view = {
  topology: null,
  routes: [],
  dest: '',
  trafficClass: 'latency',
  link: null, // key of the selected link, "A>B"
};

const graph = new Graph($('graph'), {
  onNode: (name) => {
    view.dest = name;
    $('dest').value = name;
    choose();
  },
  onLink: (link) => {
    view.link = linkKey(link);
    charts.clear();
    choose();
  },
});
const charts = new LinkCharts($('chart-util'), $('chart-rtt'));
const events = new EventList($('events'));

function showError(error) {
  $('error').textContent = error ? String(error.message || error) : '';
}

function updateDestinations(names) {
  const select = $('dest');
  if ([...select.options].map((o) => o.value).join() !== names.join()) {
    select.replaceChildren(...names.map((n) => new Option(n, n)));
  }
  if (!names.includes(view.dest)) view.dest = names[names.length - 1] ?? '';
  select.value = view.dest;
}

const cost = (value) => (Number.isFinite(num(value)) ? num(value).toPrecision(3) : '∞');

function showLinkFacts(link) {
  const facts = [
    ['state', linkState(link)],
    ['capacity', `${(num(link.capacity_bps) / 1e6).toFixed(1)} Mb/s` +
      (link.slow ? `, delivers ${(num(link.delivery_capacity_bps) / 1e6).toFixed(1)}` : '')],
    ['utilisation', `${num(link.utilisation).toFixed(3)} (planned ${num(link.planned_utilisation).toFixed(3)}, ` +
      `forecast ${num(link.forecast_utilisation).toFixed(3)})`],
    ['RTT', `${num(link.rtt_ms).toFixed(2)} ms, queueing ${num(link.queueing_ms).toFixed(2)} ms`],
    ['loss', num(link.loss).toFixed(4)],
    ['cost', `latency ${cost(link.cost_latency)}, bulk ${cost(link.cost_bulk)}`],
    ['share', `latency ${num(link.share_latency).toFixed(2)}, bulk ${num(link.share_bulk).toFixed(2)}`],
    ['why', link.why || ''],
  ];
  $('link-facts').replaceChildren(
    ...facts.flatMap(([term, value]) => {
      const dt = document.createElement('dt');
      const dd = document.createElement('dd');
      dt.textContent = term;
      dd.textContent = value;
      return [dt, dd];
    }),
  );
}

// What is shown changes with each user choice: a fetch begun before one is not drawn.
let generation = 0;

async function refresh() {
  const started = generation;
  try {
    const topology = await getJson('topology');
    view.topology = topology;
    $('version').textContent = topology.version;
    $('decision').textContent = topology.decision;
    $('field-name').textContent = topology.decision === 'diffusion' ? 'potential' : 'marginal distance';
    $('agents').textContent =
      `${topology.nodes.filter((n) => n.connected).length}/${topology.nodes.length}`;
    updateDestinations(topology.nodes.map((n) => n.name).sort());
    const link = topology.links.find((l) => linkKey(l) === view.link);
    const [routes, series] = await Promise.all([
      view.dest ? getJson('routes', { dest: view.dest, class: view.trafficClass }) : { routes: [] },
      link ? getJson('series', { src: link.src_name, dst: link.dst_name }) : null,
    ]);
    if (started !== generation) return;
    view.routes = routes.routes;
    graph.render(topology, view.routes, view.dest, view.link);
    if (link) {
      $('link-title').textContent = `${link.src_name} → ${link.dst_name}`;
      showLinkFacts(link);
      charts.show(series);
    }
    showError(null);
  } catch (error) {
    showError(error);
  }
}

// The user chose something else to show: fetch it now.
function choose() {
  generation += 1;
  refresh();
}

// Runs refresh() for the newest cycle, never two at once and at most once per REFRESH_MS.
let running = false;
let pending = false;
let last = 0;
function scheduleRefresh() {
  if (running) {
    pending = true;
    return;
  }
  running = true;
  setTimeout(async () => {
    last = Date.now();
    await refresh();
    running = false;
    if (pending) {
      pending = false;
      scheduleRefresh();
    }
  }, Math.max(0, last + REFRESH_MS - Date.now()));
}

$('dest').addEventListener('change', (e) => {
  view.dest = e.target.value;
  choose();
});
$('class').addEventListener('change', (e) => {
  view.trafficClass = e.target.value;
  choose();
});
window.addEventListener('resize', () => charts.resize());

subscribe({
  onEvent: (event) => events.add(event),
  onCycle: (cycle) => {
    $('version').textContent = cycle.version;
    scheduleRefresh();
  },
  onState: (state) => {
    $('stream').dataset.state = state;
    $('stream').textContent = `stream ${state}`;
  },
});
scheduleRefresh();
