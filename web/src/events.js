// The controller's events, newest first, as the stream delivers them. An event seen before
// (the stream resends the newest ones when it reconnects) is not shown twice.
const KEEP = 200;

export class EventList {
  constructor(listEl) {
    this.listEl = listEl;
    this.seen = new Set();
  }

  add(event) {
    const key = `${event.time_unix_ns}|${event.kind}|${event.node}|${event.detail}`;
    if (this.seen.has(key)) return;
    this.seen.add(key);
    const item = document.createElement('li');
    item.dataset.kind = event.kind;
    const time = new Date(Number(event.time_unix_ns) / 1e6);
    const when = document.createElement('time');
    when.textContent = time.toLocaleTimeString([], { hour12: false }) +
      `.${String(time.getMilliseconds()).padStart(3, '0')}`;
    const kind = document.createElement('b');
    kind.textContent = event.kind;
    item.append(when, ' ', kind, ` ${event.node || ''} ${event.detail || ''}`);
    this.listEl.prepend(item);
    while (this.listEl.children.length > KEEP) {
      this.listEl.lastElementChild.remove();
    }
    if (this.seen.size > 4 * KEEP) this.seen = new Set([...this.seen].slice(-KEEP));
  }
}
