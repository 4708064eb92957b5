package addrkey

import "sort"

// Entry is a suppression list row as a re-keying sees it (times in the
// stores' Unix milliseconds; ExpiresAt nil: never).
type Entry struct {
	Tenant, Channel, Address string
	CreatedAt                int64
	ExpiresAt                *int64
}

// Change is what a re-keying does to one stored entry: move it to Key, or
// (Delete) remove it, because another entry with the same key lasts longer.
type Change struct {
	Entry
	Key    string
	Delete bool
}

// Rekey plans moving entries to their keys under Key. Entries that meet at
// one key merge into the one that lasts longest (no expiry beats any
// expiry, a later expiry an earlier one), then the most recently made,
// then the one whose old address sorts first; that entry keeps its reason,
// source and detail, and the others are deleted. The plan does not depend
// on the order of entries. Applying the changes in order never puts two
// rows on one key: each group's losers are deleted before its winner moves.
func Rekey(entries []Entry) []Change {
	type group struct{ tenant, channel, key string }
	groups := map[group][]Entry{}
	var order []group
	for _, e := range entries {
		g := group{e.Tenant, e.Channel, Key(e.Channel, e.Address)}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], e)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.tenant != b.tenant {
			return a.tenant < b.tenant
		}
		if a.channel != b.channel {
			return a.channel < b.channel
		}
		return a.key < b.key
	})
	var out []Change
	for _, g := range order {
		es := groups[g]
		sort.Slice(es, func(i, j int) bool { return outlasts(es[i], es[j]) })
		for _, e := range es[1:] {
			out = append(out, Change{Entry: e, Key: g.key, Delete: true})
		}
		if w := es[0]; w.Address != g.key {
			out = append(out, Change{Entry: w, Key: g.key})
		}
	}
	return out
}

// outlasts says whether a is kept over b.
func outlasts(a, b Entry) bool {
	switch {
	case (a.ExpiresAt == nil) != (b.ExpiresAt == nil):
		return a.ExpiresAt == nil
	case a.ExpiresAt != nil && *a.ExpiresAt != *b.ExpiresAt:
		return *a.ExpiresAt > *b.ExpiresAt
	case a.CreatedAt != b.CreatedAt:
		return a.CreatedAt > b.CreatedAt
	}
	return a.Address < b.Address
}
