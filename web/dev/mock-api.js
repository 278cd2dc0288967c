// A stand-in for the controller's web API for `npm run dev` (development only; never built
// into the view): the diamond lab A-{B,C}-D, hop-count routes split evenly downhill, made-up
// series, and events. `POST /mock/link?a=B&b=D&state=down|up|drained|slow` changes a link
// (both directions), as `dar-lab link down B D` would.
const NODES = ['A', 'B', 'C', 'D'];
const PAIRS = [['A', 'B'], ['A', 'C'], ['B', 'D'], ['C', 'D']];

function createState() {
  const links = PAIRS.flatMap(([a, b]) => [[a, b], [b, a]]).map(([src, dst]) => ({
    src_name: src, dst_name: dst, up: true, drained: false, slow: false,
    capacity_bps: 100e6, delivery_capacity_bps: 100e6,
  }));
  return { version: 1, links, events: [], clients: new Set() };
}

function record(state, kind, node, detail) {
  const event = { time_unix_ns: Date.now() * 1e6, kind, node, detail };
  state.events.push(event);
  for (const res of state.clients) res.write(`event: event\ndata: ${JSON.stringify(event)}\n\n`);
}

const wave = (t, phase) => 0.35 + 0.25 * Math.sin(t / 20 + phase);

function linkView(link, t) {
  const usable = link.up && !link.drained;
  const u = usable ? wave(t, link.src_name.charCodeAt(0) + link.dst_name.charCodeAt(0)) : 0;
  return {
    ...link,
    utilisation: u, planned_utilisation: u * 1.05, forecast_utilisation: u * 1.1,
    queueing_ms: 2 * u, loss: 0, rtt_ms: 1 + 2 * u,
    cost_latency: usable ? 1 + u : 'Infinity', cost_bulk: usable ? 1 + 2 * u : 'Infinity',
    share_latency: 0.5, share_bulk: 0.5,
    why: link.up ? (link.drained ? 'drained' : `load ${u.toFixed(2)}`) : 'down',
  };
}

// Hop counts toward dest over usable links; next hops: the neighbours one hop closer.
function routes(state, dest, trafficClass) {
  const usable = state.links.filter((l) => l.up && !l.drained);
  const distance = new Map([[dest, 0]]);
  for (let frontier = [dest]; frontier.length;) {
    const next = [];
    for (const l of usable) {
      if (frontier.includes(l.dst_name) && !distance.has(l.src_name)) {
        distance.set(l.src_name, distance.get(l.dst_name) + 1);
        next.push(l.src_name);
      }
    }
    frontier = next;
  }
  return NODES.map((node) => {
    const d = distance.get(node) ?? Infinity;
    const down = usable.filter((l) => l.src_name === node && distance.get(l.dst_name) === d - 1);
    return {
      node, destination: dest, traffic_class: trafficClass === 'bulk' ? 1 : 0,
      potential: Number.isFinite(d) ? d : 'Infinity',
      next_hops: node === dest ? [] : down.map((l) => ({ neighbour: l.dst_name, weight: 1 / down.length })),
    };
  });
}

function series(src, dst, now) {
  const t = Array.from({ length: 300 }, (_, i) => now - 299 + i);
  const u = t.map((s) => wave(s, src.charCodeAt(0) + dst.charCodeAt(0)));
  return {
    src, dst, horizon_s: 1, t, utilisation: u,
    forecast: u.map((x) => x * 1.1), planned: u.map((x) => x * 1.05),
    rtt_ms: u.map((x) => 1 + 2 * x), queueing_ms: u.map((x) => 2 * x),
  };
}

function handler(state) {
  return (req, res, next) => {
    const url = new URL(req.url, 'http://mock');
    const q = Object.fromEntries(url.searchParams);
    const now = Date.now() / 1000;
    const json = (body, status = 200) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    switch (url.pathname) {
      case '/api/topology':
        return json({
          version: state.version, decision: 'marginal',
          nodes: NODES.map((name, i) => ({
            name, node_id: i + 1, connected: true, acked_version: state.version, static_table: false, fallbacks: 0,
          })),
          links: state.links.map((l) => linkView(l, now)),
        });
      case '/api/routes':
        if (!NODES.includes(q.dest)) return json({ error: `no node ${q.dest}` }, 404);
        return json({ version: state.version, routes: routes(state, q.dest, q.class) });
      case '/api/series':
        return json(series(q.src, q.dst, Math.floor(now)));
      case '/api/events':
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        for (const e of state.events.slice(-50)) res.write(`event: event\ndata: ${JSON.stringify(e)}\n\n`);
        state.clients.add(res);
        req.on('close', () => state.clients.delete(res));
        return undefined;
      case '/mock/link': {
        for (const l of state.links) {
          if ([l.src_name, l.dst_name].sort().join() !== [q.a, q.b].sort().join()) continue;
          l.up = q.state !== 'down';
          l.drained = q.state === 'drained';
          l.slow = q.state === 'slow';
        }
        record(state, `link_${q.state}`, q.a, `${q.a}-${q.b}`);
        return json({ ok: true });
      }
      default:
        return next();
    }
  };
}

export function mockApi() {
  return {
    name: 'dar-mock-api',
    configureServer(server) {
      const state = createState();
      NODES.forEach((n) => record(state, 'agent_connected', n, ''));
      const timer = setInterval(() => {
        state.version += 1;
        const cycle = JSON.stringify({ version: state.version, time_unix_ns: Date.now() * 1e6 });
        for (const res of state.clients) res.write(`event: cycle\ndata: ${cycle}\n\n`);
      }, 1000);
      server.httpServer?.on('close', () => clearInterval(timer));
      server.middlewares.use(handler(state));
    },
  };
}
