package sqlstore

import (
	"encoding/json"
	"github.com/edgerelay/edgerelay/model"
	"sync/atomic"
)

// Routes encodes the routes a claim passes to its statement, as JSON:
// {"d": {CHANNEL: [names]}, "t": {TENANT: {CHANNEL: [names]}}}, each
// tenant and channel spelt by Key (as the dialect's JSON path can name
// it). The dispatcher passes the same ClaimRoutes until its routes change,
// so they are encoded once per change, not once per claim.
type Routes struct {
	Key  func(string) string
	last atomic.Pointer[encodedRoutes]
}

type encodedRoutes struct {
	src *model.ClaimRoutes
	enc any
}

// Encode is JSON(routes), remembered for the same pointer (a ClaimRoutes
// is not changed once passed to a claim); nil (NULL) for none.
func (r *Routes) Encode(routes *model.ClaimRoutes) any {
	if routes == nil {
		return nil
	}
	if c := r.last.Load(); c != nil && c.src == routes {
		return c.enc
	}
	enc := r.JSON(routes)
	r.last.Store(&encodedRoutes{routes, enc})
	return enc
}

// JSON encodes routes, nil (NULL) for none.
func (r *Routes) JSON(routes *model.ClaimRoutes) any {
	if routes == nil {
		return nil
	}
	byKey := func(rs map[string][]string) map[string][]string {
		out := make(map[string][]string, len(rs))
		for ch, names := range rs {
			out[r.Key(ch)] = append([]string{}, names...) // an empty route is [], not null
		}
		return out
	}
	doc := struct {
		D map[string][]string            `json:"d"`
		T map[string]map[string][]string `json:"t"`
	}{D: byKey(routes.Default), T: make(map[string]map[string][]string, len(routes.Tenant))}
	for tenant, rs := range routes.Tenant {
		doc.T[r.Key(tenant)] = byKey(rs)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return string(b)
}
