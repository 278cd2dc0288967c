// The controller's read-only web API (docs/web-view.md), by relative URLs so that the view
// works wherever it is served from (a tunnel, a proxy's sub-path).

// GET api/<path>?<params> as JSON; throws an Error with the server's message on failure.
export async function getJson(path, params = {}) {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(`api/${path}${query ? `?${query}` : ''}`);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${path}: ${body.error || response.statusText}`);
  return body;
}

// A JSON number that may be the string "Infinity" (an unreachable cost) as a number.
export function num(value) {
  if (value === 'Infinity') return Infinity;
  if (value === '-Infinity') return -Infinity;
  return Number(value ?? 0);
}

// Subscribes to api/events: `onEvent(event)` for each recorded event (those kept at connect
// first, oldest first), `onCycle({version})` at most once a second, `onState(text)` as the
// stream opens and drops. EventSource reconnects by itself.
export function subscribe({ onEvent, onCycle, onState }) {
  const source = new EventSource('api/events');
  source.addEventListener('event', (m) => onEvent(JSON.parse(m.data)));
  source.addEventListener('cycle', (m) => onCycle(JSON.parse(m.data)));
  source.onopen = () => onState('live');
  source.onerror = () => onState(source.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting');
  return source;
}
