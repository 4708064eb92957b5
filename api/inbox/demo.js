// The demo page: the token comes from the address's fragment (never sent to
// the server), is kept for this tab only, and leaves the address bar.
(() => {
  'use strict';
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get('token')) {
    sessionStorage.setItem('edgerelay-demo', JSON.stringify({ token: frag.get('token'), user: frag.get('user') || '' }));
    history.replaceState(null, '', location.pathname + location.search);
  }
  let saved = {};
  try { saved = JSON.parse(sessionStorage.getItem('edgerelay-demo') || '{}'); } catch (e) { saved = {}; }
  const log = (text) => {
    const li = document.createElement('li');
    li.textContent = new Date().toLocaleTimeString() + ' ' + text;
    document.getElementById('events').prepend(li);
  };
  document.getElementById('dark').addEventListener('change', (e) => document.body.classList.toggle('dark', e.target.checked));
  if (!saved.token) return;
  const inbox = document.createElement('edgerelay-inbox');
  inbox.setAttribute('server', location.origin);
  if (saved.user) inbox.setAttribute('user', saved.user);
  inbox.setAttribute('token', saved.token);
  for (const name of ['connected', 'disconnected', 'item', 'unread', 'error', 'token-expired']) {
    inbox.addEventListener('edgerelay-inbox:' + name, (e) => log(name + ' ' + JSON.stringify(e.detail)));
  }
  document.getElementById('slot').append(inbox);
  document.getElementById('help').hidden = true;
  document.getElementById('who').textContent = 'Showing the feed of ' + (inbox.user || 'the token\'s user') + '.';
})();
