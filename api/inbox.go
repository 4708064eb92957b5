package api

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
)

// The inbox element and its demo, embedded (api/inbox/): GET /inbox.js
// defines <edgerelay-inbox>, a plain script an app's page loads from this
// server; GET /inbox/demo is a page showing it against this server's
// feeds. Neither holds nor makes a token: the element gets one from the
// app's page (its backend mints it), the demo from its address's
// fragment, which a browser never sends.

//go:embed inbox/inbox.js inbox/demo.html inbox/demo.js
var inboxFiles embed.FS

// inboxAsset is one embedded file as served, with its ETag.
type inboxAsset struct {
	body, etag []byte
	ctype      string
}

func loadInboxAsset(name, ctype string) inboxAsset {
	b, err := inboxFiles.ReadFile(name)
	if err != nil {
		panic("api: embedded " + name + ": " + err.Error()) // the embed directive names it: cannot happen
	}
	sum := sha256.Sum256(b)
	return inboxAsset{body: b, ctype: ctype, etag: []byte(`"` + hex.EncodeToString(sum[:8]) + `"`)}
}

// demoPolicy lets the demo page run only this server's scripts and reach
// only this server: an item's text could never run even if it were HTML.
const demoPolicy = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (s *Server) inboxRoutes() {
	js := loadInboxAsset("inbox/inbox.js", "text/javascript; charset=utf-8")
	demo := loadInboxAsset("inbox/demo.html", "text/html; charset=utf-8")
	demoJS := loadInboxAsset("inbox/demo.js", "text/javascript; charset=utf-8")
	s.handle("GET /inbox.js", serveAsset(js, func(h http.Header) {
		// Any app's page loads it, cross-origin (and under COEP); a public
		// file without credentials, so * lets <script crossorigin
		// integrity=…> pin it.
		h.Set("Cross-Origin-Resource-Policy", "cross-origin")
		h.Set("Access-Control-Allow-Origin", "*")
	}))
	s.handle("GET /inbox/demo", serveAsset(demo, func(h http.Header) {
		h.Set("Content-Security-Policy", demoPolicy)
		h.Set("Referrer-Policy", "no-referrer")
	}))
	s.handle("GET /inbox/demo.js", serveAsset(demoJS, nil))
}

// serveAsset answers a GET of a with a short cache life and its ETag
// (If-None-Match: 304); more sets headers of its own.
func serveAsset(a inboxAsset, more func(http.Header)) handler {
	etag := string(a.etag)
	return func(w http.ResponseWriter, r *http.Request) response {
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=300")
		h.Set("ETag", etag)
		h.Set("X-Content-Type-Options", "nosniff")
		if more != nil {
			more(h)
		}
		if r.Header.Get("If-None-Match") == etag {
			return response{status: http.StatusNotModified}
		}
		return response{status: http.StatusOK, ctype: a.ctype, body: a.body}
	}
}
