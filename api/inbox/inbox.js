// <edgerelay-inbox>: a bell with the unread count and a panel of one user's
// in-app feed, live. Served by edgerelay at /inbox.js; plain JS, no build
// step, nothing fetched but the edgerelay server's own feed routes.
//
//   <script src="https://relay.example.com/inbox.js"></script>
//   <edgerelay-inbox token="USER_TOKEN"></edgerelay-inbox>
//
// Attributes: token (a user token the app's backend minted), server (the
// edgerelay base URL; default: where this script came from), user (default:
// the token's sub), page-size (items per page, default 20), label (the
// bell's accessible name, default "Notifications"), idle-timeout (seconds
// without a byte, heartbeats included, before the stream is made again;
// default 45).
//
// The stream is read with fetch() (EventSource cannot send Authorization):
// the token stays in a header, never in a URL a proxy or a log keeps.
// Everything shown is set with textContent: no item's text is ever HTML.
(() => {
  'use strict';
  if (customElements.get('edgerelay-inbox')) return;

  const scriptOrigin = document.currentScript && document.currentScript.src
    ? new URL(document.currentScript.src).origin : location.origin;

  const CSS = `
:host { display: inline-block; position: relative; font: var(--edgerelay-inbox-font, inherit);
  color: var(--edgerelay-inbox-fg, #1f2328); }
.bell { position: relative; display: inline-flex; align-items: center; justify-content: center;
  width: 2.5em; height: 2.5em; border: 1px solid var(--edgerelay-inbox-border, #d0d7de);
  border-radius: var(--edgerelay-inbox-radius, 8px); background: var(--edgerelay-inbox-bg, #fff);
  color: inherit; cursor: pointer; padding: 0; }
.bell svg { width: 1.3em; height: 1.3em; }
:focus-visible { outline: 2px solid var(--edgerelay-inbox-focus, var(--edgerelay-inbox-accent, #0969da)); outline-offset: 2px; }
.badge { position: absolute; top: -0.45em; right: -0.45em; min-width: 1.4em; height: 1.4em; padding: 0 0.3em;
  box-sizing: border-box; border-radius: 0.7em; font-size: 0.75em; line-height: 1.4em; font-weight: 600;
  background: var(--edgerelay-inbox-badge-bg, #cf222e); color: var(--edgerelay-inbox-badge-fg, #fff); text-align: center; }
.badge.zero .count { display: none; }
.badge.zero { background: transparent; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
.panel { position: absolute; z-index: var(--edgerelay-inbox-z, 1000); top: calc(100% + 0.4em);
  right: var(--edgerelay-inbox-panel-right, 0); left: var(--edgerelay-inbox-panel-left, auto);
  width: var(--edgerelay-inbox-width, 22em); max-height: var(--edgerelay-inbox-max-height, 28em); overflow: auto;
  background: var(--edgerelay-inbox-bg, #fff); border: 1px solid var(--edgerelay-inbox-border, #d0d7de);
  border-radius: var(--edgerelay-inbox-radius, 8px); box-shadow: var(--edgerelay-inbox-shadow, 0 8px 24px rgba(0,0,0,.15)); }
.panel.start { left: var(--edgerelay-inbox-panel-left, 0); right: auto; }
.panel[hidden] { display: none; }
.head { display: flex; align-items: center; justify-content: space-between; gap: 0.5em; padding: 0.6em 0.8em;
  border-bottom: 1px solid var(--edgerelay-inbox-border, #d0d7de); }
h2 { font-size: 1em; margin: 0; }
button.link { background: none; border: 0; padding: 0.2em; color: var(--edgerelay-inbox-accent, #0969da); cursor: pointer; font: inherit; }
button.link[hidden], .fresh[hidden], .more[hidden], .empty[hidden] { display: none; }
.fresh, .more { display: block; width: 100%; padding: 0.5em; border: 0; background: var(--edgerelay-inbox-unread-bg, #ddf4ff);
  color: var(--edgerelay-inbox-accent, #0969da); cursor: pointer; font: inherit; }
.more { background: none; }
ul { list-style: none; margin: 0; padding: 0; }
li { display: flex; align-items: flex-start; border-bottom: 1px solid var(--edgerelay-inbox-border, #d0d7de); }
li[data-read="false"] { background: var(--edgerelay-inbox-unread-bg, #ddf4ff); }
.open { flex: 1; display: grid; gap: 0.15em; text-align: left; border: 0; background: none; color: inherit;
  padding: 0.6em 0.8em; cursor: pointer; font: inherit; }
.title { font-weight: 600; overflow-wrap: anywhere; }
li[data-read="true"] .title { font-weight: 400; }
.body { overflow-wrap: anywhere; }
.when { font-size: 0.8em; color: var(--edgerelay-inbox-muted, #59636e); }
.dismiss { border: 0; background: none; color: var(--edgerelay-inbox-muted, #59636e); cursor: pointer;
  font-size: 1.1em; padding: 0.5em 0.7em; }
.empty, .status { margin: 0; padding: 0.8em; color: var(--edgerelay-inbox-muted, #59636e); }
.status:empty { display: none; }
`;

  let sheet = null; // one constructed stylesheet for every instance
  const styleInto = (root) => {
    if ('adoptedStyleSheets' in Document.prototype && 'replaceSync' in CSSStyleSheet.prototype) {
      if (!sheet) { sheet = new CSSStyleSheet(); sheet.replaceSync(CSS); }
      root.adoptedStyleSheets = [sheet];
    } else {
      const s = document.createElement('style');
      s.textContent = CSS;
      root.appendChild(s);
    }
  };

  // el builds an element: text is set with textContent only.
  const el = (tag, attrs = {}, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const bellIcon = () => {
    const svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('viewBox', '0 0 24 24');
    svg.setAttribute('aria-hidden', 'true');
    svg.setAttribute('focusable', 'false');
    const p = document.createElementNS(SVG_NS, 'path');
    p.setAttribute('fill', 'currentColor');
    p.setAttribute('d', 'M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22Zm7-6V11a7 7 0 0 0-5.5-6.84V3a1.5 1.5 0 0 0-3 0v1.16A7 7 0 0 0 5 11v5l-2 2v1h18v-1Z');
    svg.appendChild(p);
    return svg;
  };

  // tokenSub reads the user a token names (its sub), without verifying it:
  // the server verifies; this only builds the path.
  const tokenSub = (token) => {
    try {
      const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return JSON.parse(atob(part + '==='.slice((part.length + 3) % 4))).sub || '';
    } catch (e) { return ''; }
  };

  // sseEvents reads a text/event-stream body, calling onEvent({id, event,
  // data}) for each event, onRetry(ms) for each retry field and onChunk
  // for whatever arrives (a heartbeat too).
  async function sseEvents(body, onEvent, onRetry, onChunk) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '', ev = { id: null, event: '', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onChunk();
      buf += value;
      let i;
      while ((i = buf.search(/\r\n|\r|\n/)) >= 0) {
        if (i === buf.length - 1 && buf[i] === '\r') break; // a CR LF split between chunks
        const line = buf.slice(0, i);
        buf = buf.slice(i + (buf.startsWith('\r\n', i) ? 2 : 1));
        if (line === '') {
          if (ev.data.length || ev.event || ev.id !== null) onEvent({ id: ev.id, event: ev.event || 'message', data: ev.data.join('\n') });
          ev = { id: null, event: '', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue; // a heartbeat
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? '' : line.slice(c + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'id') ev.id = v;
        else if (field === 'event') ev.event = v;
        else if (field === 'data') ev.data.push(v);
        else if (field === 'retry' && /^\d+$/.test(v)) onRetry(Number(v));
      }
    }
  }

  class EdgerelayInbox extends HTMLElement {
    static get observedAttributes() { return ['token', 'server', 'user', 'page-size', 'label', 'idle-timeout']; }

    constructor() {
      super();
      const root = this.attachShadow({ mode: 'open' });
      styleInto(root);
      this._items = new Map();  // seq -> {item, li}, shown in the panel
      this._pending = [];       // items the stream brought while the panel was open, not shown yet
      this._unread = 0;
      this._lastId = 0;         // the newest seq received: Last-Event-ID on a reconnect
      this._next = '';          // the older page's path
      this._retry = 2000;
      this._run = null;         // the current connection's AbortController
      this._during = null;      // items the stream brought while _load read the page

      const label = 'Notifications'; // the attribute's, once connected
      this._bell = el('button', { class: 'bell', part: 'bell', type: 'button', 'aria-expanded': 'false', 'aria-controls': 'panel' });
      this._bellLabel = el('span', { class: 'sr' }, label);
      this._badge = el('span', { class: 'badge zero', part: 'badge', 'aria-live': 'polite', 'aria-atomic': 'true' });
      this._count = el('span', { class: 'count' }, '');
      this._badgeText = el('span', { class: 'sr' }, '');
      this._badge.append(this._count, this._badgeText);
      this._bell.append(bellIcon(), this._bellLabel, this._badge);

      this._panel = el('div', { class: 'panel', part: 'panel', id: 'panel', role: 'dialog', 'aria-labelledby': 'title', hidden: '' });
      const head = el('div', { class: 'head' });
      this._title = el('h2', { id: 'title', tabindex: '-1' }, label);
      this._readAll = el('button', { class: 'link read-all', type: 'button', part: 'read-all' }, 'Mark all read');
      head.append(this._title, this._readAll);
      this._fresh = el('button', { class: 'fresh', type: 'button', part: 'fresh', hidden: '' });
      this._list = el('ul', { role: 'list', part: 'list', 'aria-labelledby': 'title' });
      this._empty = el('p', { class: 'empty', part: 'empty' }, 'No notifications');
      this._more = el('button', { class: 'more', type: 'button', part: 'more', hidden: '' }, 'Show older');
      this._status = el('p', { class: 'status', role: 'status', part: 'status' });
      this._panel.append(head, this._fresh, this._list, this._empty, this._more, this._status);
      root.append(this._bell, this._panel);

      this._bell.addEventListener('click', () => this._panel.hidden ? this.open() : this.close());
      this._readAll.addEventListener('click', () => this.readAll());
      this._fresh.addEventListener('click', () => this._showPending());
      this._more.addEventListener('click', () => this._loadOlder());
      this._panel.addEventListener('keydown', (e) => this._onKey(e));
      this._bell.addEventListener('keydown', (e) => { if (e.key === 'Escape') this.close(); });
      this._outside = (e) => { if (!e.composedPath().includes(this)) this.close(false); };
    }

    connectedCallback() {
      document.addEventListener('click', this._outside);
      this._labelled();
      this._restart(true);
    }

    _labelled() {
      const label = this.getAttribute('label') || 'Notifications';
      this._bellLabel.textContent = label;
      this._title.textContent = label;
    }
    disconnectedCallback() {
      document.removeEventListener('click', this._outside);
      if (this._run) this._run.abort();
      this._run = null;
    }

    attributeChangedCallback(name, was, now) {
      if (was === now || !this.isConnected) return;
      if (name === 'idle-timeout') return; // read by the next connection
      if (name === 'label') { this._labelled(); return; }
      // A new token for the same user goes on from the last item received;
      // anything else starts over.
      this._restart(name !== 'token' || this._path() !== this._shownPath);
    }

    get server() { return (this.getAttribute('server') || scriptOrigin).replace(/\/+$/, ''); }
    get token() { return this.getAttribute('token') || ''; }
    set token(v) { this.setAttribute('token', v); }
    get user() { return this.getAttribute('user') || tokenSub(this.token); }
    get unread() { return this._unread; }
    get lastEventId() { return this._lastId; }

    _path() { return this.server + '/v1/users/' + encodeURIComponent(this.user) + '/feed'; }

    _emit(name, detail) { this.dispatchEvent(new CustomEvent('edgerelay-inbox:' + name, { detail, bubbles: true, composed: true })); }

    async _call(url, init = {}, signal) {
      const r = await fetch(url, { ...init, signal, cache: 'no-store', credentials: 'omit',
        headers: { Authorization: 'Bearer ' + this.token, ...(init.headers || {}) } });
      if (!r.ok) {
        let p = {};
        try { p = await r.json(); } catch (e) { /* not a problem body */ }
        const err = new Error(p.detail || ('HTTP ' + r.status));
        err.status = r.status; err.problem = p; err.retryAfter = Number(r.headers.get('Retry-After')) || 0;
        throw err;
      }
      return r;
    }

    _fail(err, what) {
      if (err.name === 'AbortError') return;
      if (err.status === 401) { this._emit('token-expired', { status: 401, detail: err.message }); }
      this._emit('error', { what, status: err.status || 0, type: (err.problem && err.problem.type) || '', detail: err.message });
      this._status.textContent = what + ' failed: ' + err.message;
    }

    // _restart stops the current connection and starts another: with
    // reload, the panel is read again first.
    _restart(reload) {
      if (this._run) this._run.abort();
      this._run = null;
      if (!this.token || !this.user) return;
      const run = new AbortController();
      this._run = run;
      (async () => {
        if (reload || !this._shownPath) {
          try { await this._load(run.signal); } catch (e) { this._fail(e, 'Loading the notifications'); return; }
        }
        this._stream(run.signal, !reload);
      })();
    }

    async _load(signal) {
      const size = Math.min(200, Math.max(1, parseInt(this.getAttribute('page-size'), 10) || 20));
      // On a reset the stream goes on while the page is read: what it brings
      // meanwhile may be newer than the page (committed after it was read).
      const during = [];
      this._during = during;
      let page, c;
      try {
        page = await (await this._call(this._path() + '?limit=' + size, {}, signal)).json();
        c = await (await this._call(this._path() + '/unread_count', {}, signal)).json();
      } finally {
        if (this._during === during) this._during = null;
      }
      this._items.clear(); this._pending = []; this._list.replaceChildren();
      for (const it of page.items) this._append(it);
      const newest = page.items.length ? page.items[0].seq : 0;
      for (const it of during) {
        if (it.seq <= newest || this._items.has(it.seq)) continue;
        if (this._panel.hidden) this._prepend(it); else this._pending.push(it);
      }
      this._next = page.next || '';
      this._lastId = Math.max(newest, ...during.map((it) => it.seq));
      this._shownPath = this._path();
      this._setUnread(c.unread);
      this._render();
    }

    // _stream reads the live stream until signal aborts, reconnecting with
    // Last-Event-ID after a drop (a restart, another node): the server sends
    // exactly the items after it.
    async _stream(signal, reconcile) {
      let failures = 0;
      let notBefore = 0; // ms: a refusal's Retry-After
      while (!signal.aborted) {
        let opened = false;
        // A connection that went quiet (not even a heartbeat within
        // idle-timeout: a half-open TCP connection after a sleep) is dropped
        // and made again.
        const conn = new AbortController();
        const stop = () => conn.abort();
        signal.addEventListener('abort', stop, { once: true });
        const idle = 1000 * (Number(this.getAttribute('idle-timeout')) || 45);
        let watchdog = setTimeout(stop, idle);
        const alive = () => { clearTimeout(watchdog); watchdog = setTimeout(stop, idle); };
        try {
          const r = await this._call(this._path() + '/stream', { headers: { 'Last-Event-ID': String(this._lastId), Accept: 'text/event-stream' } }, conn.signal);
          opened = true; failures = 0;
          this._status.textContent = '';
          this._emit('connected', { lastEventId: this._lastId });
          let first = reconcile;
          await sseEvents(r.body, (ev) => {
            this._onEvent(ev);
            // After a reconnect, once the stream has read the feed: what was
            // read or dismissed while it was down.
            if (first && ev.event === 'state') { first = false; this._reconcile(signal); }
          }, (ms) => { this._retry = ms; }, alive);
        } catch (e) {
          if (signal.aborted) return;
          if (e.status === 401 || e.status === 403 || e.status === 400) { this._fail(e, 'The live stream'); return; }
          if (e.status === 429) {
            // Too many streams (tabs): said once, then retried with the
            // backoff, never sooner than the server's Retry-After, so that
            // closing another tab makes this one live.
            if (failures === 0) this._fail(e, 'The live stream');
            failures = Math.max(failures, 1);
            notBefore = 1000 * e.retryAfter;
          }
        } finally {
          clearTimeout(watchdog);
          signal.removeEventListener('abort', stop);
          conn.abort(); // the body, if still open
        }
        if (signal.aborted) return;
        reconcile = true;
        if (opened) this._emit('disconnected', { lastEventId: this._lastId });
        // Backoff from the server's retry, doubled per failure up to 30 s,
        // with jitter so that a restarted server is not met all at once.
        const wait = Math.max(notBefore, Math.min(30000, this._retry * 2 ** Math.min(failures, 5)) * (0.5 + Math.random() / 2));
        notBefore = 0;
        failures++;
        await new Promise((ok) => { const t = setTimeout(ok, wait); signal.addEventListener('abort', () => { clearTimeout(t); ok(); }, { once: true }); });
      }
    }

    _onEvent(ev) {
      let d;
      try { d = JSON.parse(ev.data); } catch (e) { return; }
      switch (ev.event) {
        case 'item':
          if (ev.id !== null) this._lastId = Number(ev.id);
          this._emit('item', d);
          if (this._during) this._during.push(d);
          if (this._items.has(d.seq) || this._pending.some((p) => p.seq === d.seq)) return;
          if (this._panel.hidden) { this._prepend(d); } else { this._pending.push(d); }
          this._render();
          return;
        case 'state':
          this._setUnread(d.unread);
          for (const [seq, e] of this._items) if (seq <= d.read_up_to) this._setRead(e, true);
          for (const p of this._pending) if (p.seq <= d.read_up_to) p.read = true;
          return;
        case 'read': {
          const e = this._items.get(d.seq);
          if (e) this._setRead(e, d.read);
          return;
        }
        case 'dismissed':
          this._remove(d.seq, false);
          return;
        case 'reset':
          if (ev.id !== null) this._lastId = Number(ev.id);
          this._load(this._run && this._run.signal).catch((e) => this._fail(e, 'Loading the notifications'));
      }
    }

    // _reconcile reads the panel's page again: an item it had that the page
    // lacks, within the page's range, was dismissed; one the page says is
    // read was read. Only items received before the page was asked for are
    // judged: one the stream brought after may have been committed after the
    // page was read, and the stream itself says when it is read or dismissed.
    // Read and dismissed are for good, so nothing here undoes either.
    async _reconcile(signal) {
      try {
        const known = this._lastId;
        const size = Math.max(1, this._items.size);
        const page = await (await this._call(this._path() + '?limit=' + Math.min(200, size), {}, signal)).json();
        const byseq = new Map(page.items.map((it) => [it.seq, it]));
        const oldest = page.items.length ? page.items[page.items.length - 1].seq : Infinity;
        for (const [seq, e] of this._items) {
          const now = byseq.get(seq);
          if (now) { if (now.read) this._setRead(e, true); }
          else if (seq <= known && (seq > oldest || page.items.length === 0)) this._remove(seq, false);
        }
        this._render();
      } catch (e) { this._fail(e, 'Reloading the notifications'); }
    }

    _setUnread(n) {
      this._unread = n;
      this._count.textContent = n > 99 ? '99+' : String(n);
      this._badgeText.textContent = n === 1 ? ' 1 unread' : ' ' + n + ' unread';
      this._badge.classList.toggle('zero', n === 0);
      this._emit('unread', { unread: n });
    }

    _row(it) {
      const m = it.message && typeof it.message === 'object' ? it.message : {};
      const title = typeof m.subject === 'string' && m.subject ? m.subject : it.type;
      const li = el('li', { role: 'listitem', part: 'item', 'data-seq': String(it.seq), 'data-read': String(!!it.read) });
      const open = el('button', { class: 'open', type: 'button', part: 'item-button' });
      const state = el('span', { class: 'sr state' }, it.read ? '' : 'Unread: ');
      open.append(state, el('span', { class: 'title', part: 'item-title' }, title));
      if (typeof m.body === 'string' && m.body) open.append(el('span', { class: 'body', part: 'item-body' }, m.body));
      const when = new Date(it.created_at);
      if (!isNaN(when)) open.append(el('time', { class: 'when', datetime: when.toISOString() }, when.toLocaleString()));
      const dismiss = el('button', { class: 'dismiss', type: 'button', part: 'dismiss', 'aria-label': 'Dismiss: ' + title }, '×');
      li.append(open, dismiss);
      const e = { item: it, li, state };
      open.addEventListener('click', () => this._open(e));
      dismiss.addEventListener('click', () => this.dismiss(it.seq));
      return e;
    }

    _append(it) { const e = this._row(it); this._items.set(it.seq, e); this._list.append(e.li); }
    _prepend(it) {
      const e = this._row(it);
      this._items.set(it.seq, e);
      // Newest first, by seq (a pending item may be older than one shown).
      const after = [...this._list.children].find((li) => Number(li.dataset.seq) < it.seq);
      this._list.insertBefore(e.li, after || null);
    }

    _setRead(e, read) {
      e.item.read = read;
      e.li.dataset.read = String(read);
      e.state.textContent = read ? '' : 'Unread: ';
    }

    _remove(seq, focusNext) {
      const e = this._items.get(seq);
      this._pending = this._pending.filter((p) => p.seq !== seq);
      if (!e) return;
      const next = e.li.nextElementSibling || e.li.previousElementSibling;
      const hadFocus = this.shadowRoot.activeElement && e.li.contains(this.shadowRoot.activeElement);
      e.li.remove();
      this._items.delete(seq);
      if (focusNext || hadFocus) (next ? next.querySelector('.open') : this._title).focus();
      this._render();
    }

    _render() {
      const n = this._pending.length;
      this._fresh.hidden = n === 0;
      this._fresh.textContent = n === 1 ? 'Show 1 new notification' : 'Show ' + n + ' new notifications';
      this._empty.hidden = this._items.size > 0;
      this._more.hidden = !this._next;
      this._readAll.hidden = this._items.size === 0;
    }

    _showPending() {
      for (const it of this._pending) this._prepend(it);
      this._pending = [];
      this._render();
      const first = this._list.querySelector('.open');
      (first || this._title).focus();
    }

    async _loadOlder() {
      if (!this._next) return;
      try {
        const page = await (await this._call(this.server + this._next, {}, this._run && this._run.signal)).json();
        const first = page.items.find((it) => !this._items.has(it.seq));
        for (const it of page.items) if (!this._items.has(it.seq)) this._append(it);
        this._next = page.next || '';
        this._render();
        if (first) this._items.get(first.seq).li.querySelector('.open').focus();
      } catch (e) { this._fail(e, 'Loading older notifications'); }
    }

    open() {
      if (!this._panel.hidden) return;
      // What arrived while closed is in the list already; the panel shows it.
      this._panel.classList.remove('start');
      this._panel.hidden = false;
      // Aligned to the bell's right edge, unless that leaves the window.
      if (this._panel.getBoundingClientRect().left < 0) this._panel.classList.add('start');
      this._bell.setAttribute('aria-expanded', 'true');
      const first = this._list.querySelector('.open');
      (first || this._title).focus();
      this._emit('open', {});
    }

    close(refocus = true) {
      if (this._panel.hidden) return;
      this._panel.hidden = true;
      this._bell.setAttribute('aria-expanded', 'false');
      // Items that came while it was open join the list for the next time.
      for (const it of this._pending) this._prepend(it);
      this._pending = [];
      this._render();
      if (refocus) this._bell.focus();
      this._emit('close', {});
    }

    _onKey(e) {
      if (e.key === 'Escape') { e.preventDefault(); this.close(); return; }
      if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
      const buttons = [...this._list.querySelectorAll('.open')];
      const i = buttons.indexOf(this.shadowRoot.activeElement);
      if (i < 0 && buttons.length === 0) return;
      e.preventDefault();
      const j = i < 0 ? 0 : Math.max(0, Math.min(buttons.length - 1, i + (e.key === 'ArrowDown' ? 1 : -1)));
      buttons[j].focus();
    }

    async _open(e) {
      this._emit('item-open', e.item);
      if (!e.item.read) await this.markRead(e.item.seq);
    }

    // markRead marks one item read (with its event's other items).
    async markRead(seq) {
      const e = this._items.get(seq);
      if (e && !e.item.read) { this._setRead(e, true); this._setUnread(Math.max(0, this._unread - 1)); }
      try {
        await this._call(this._path() + '/' + seq + '/read', { method: 'POST' });
        this._emit('marked', { kind: 'read', seq });
      } catch (err) {
        if (e) { this._setRead(e, false); this._setUnread(this._unread + 1); }
        this._fail(err, 'Marking it read');
      }
    }

    async dismiss(seq) {
      const e = this._items.get(seq);
      this._remove(seq, true);
      try {
        await this._call(this._path() + '/' + seq + '/dismiss', { method: 'POST' });
        this._emit('marked', { kind: 'dismissed', seq });
      } catch (err) {
        if (e) { this._prepend(e.item); this._render(); }
        this._fail(err, 'Dismissing it');
      }
    }

    // readAll marks read up to the newest item shown: one that arrived
    // after (pending, or not here yet) stays unread.
    async readAll() {
      const shown = [...this._items.keys()];
      if (shown.length === 0) return;
      const upTo = Math.max(...shown);
      for (const [seq, e] of this._items) if (seq <= upTo) this._setRead(e, true);
      // Until the stream's count comes: what is left is what was not shown.
      this._setUnread(this._pending.filter((p) => !p.read).length);
      try {
        await this._call(this._path() + '/read-all', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ up_to: upTo }) });
        this._emit('marked', { kind: 'read-all', up_to: upTo });
      } catch (err) { this._fail(err, 'Marking all read'); }
    }

    // refresh reads the panel again and reconnects.
    refresh() { this._restart(true); }
  }

  customElements.define('edgerelay-inbox', EdgerelayInbox);
})();
