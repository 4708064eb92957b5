package console

import (
	"net/http"
	"net/netip"
	"strings"
)

// Behind a proxy. The console believes what a request's headers say about
// the browser's connection (X-Forwarded-Proto, X-Forwarded-For) only when
// the request came from an address in Options.TrustedProxies: anyone else
// could send those headers. The two decisions are functions of their
// inputs, below; the Console gathers them from the request.

// https reports whether the browser reached the console over HTTPS.
func (c *Console) https(r *http.Request) bool {
	return servedOverHTTPS(r.TLS != nil, peerAddr(r), r.Header.Values("X-Forwarded-Proto"), c.opts.TrustedProxies)
}

// clientAddr is the browser's address, as the login throttle counts it and
// the log names it.
func (c *Console) clientAddr(r *http.Request) string {
	a := clientAddress(peerAddr(r), r.Header.Values("X-Forwarded-For"), c.opts.TrustedProxies)
	if !a.IsValid() {
		return r.RemoteAddr
	}
	return a.String()
}

// peerAddr is the address the connection came from (invalid if
// RemoteAddr is not an address, as in some handler tests).
func peerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a.Unmap()
}

func trusted(a netip.Addr, proxies []netip.Prefix) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// servedOverHTTPS: TLS terminated here, or the connection is from a
// trusted proxy whose X-Forwarded-Proto says https. Of several values (a
// list, or the header repeated) the last is the nearest proxy's, the one
// trusted; a proxy that does not set the header leaves what the client
// sent, so a trusted proxy must set it (every common one can).
func servedOverHTTPS(tlsHere bool, peer netip.Addr, forwardedProto []string, proxies []netip.Prefix) bool {
	if tlsHere {
		return true
	}
	if !trusted(peer, proxies) || len(forwardedProto) == 0 {
		return false
	}
	vs := strings.Split(forwardedProto[len(forwardedProto)-1], ",")
	return strings.EqualFold(strings.TrimSpace(vs[len(vs)-1]), "https")
}

// clientAddress is the browser's address: the connection's, unless it is
// a trusted proxy's; then X-Forwarded-For is read from its end (each proxy
// appends the address it was reached from), skipping trusted proxies, and
// the first address that is not one is the client. What lies left of it
// was written by the client and is not believed. An entry that is not an
// address stops the walk at the last trusted hop.
func clientAddress(peer netip.Addr, forwardedFor []string, proxies []netip.Prefix) netip.Addr {
	if !trusted(peer, proxies) {
		return peer
	}
	var hops []string
	for _, h := range forwardedFor {
		hops = append(hops, strings.Split(h, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(strings.TrimSpace(hops[i]))
		if !ok {
			break
		}
		client = a
		if !trusted(client, proxies) {
			break
		}
	}
	return client
}

// parseHop reads one X-Forwarded-For entry: an address, or an address
// with a port (as some proxies write it).
func parseHop(h string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}
