package migrate

// table is how one table of schema.sql is moved.
type table struct {
	name string
	// key is the conflict target: the primary key, or the natural key a
	// row is known by. A row whose key is in the target already takes the
	// source's values when they differ (ON CONFLICT … DO UPDATE … WHERE
	// the rows are distinct): the source is where the installation lived
	// since that row was copied (a rollback serves it again after a run
	// that failed part-way), and a target that worked since is refused
	// before anything is written (checkTarget), so the source's row is the
	// newer. A second run of a finished move writes nothing. Any other
	// unique constraint the row violates is an error (the target holds
	// another installation's rows).
	key []string
	// fixed: a row is never changed once written (appended, then read or
	// pruned): a key already there is the same row, left as it is (DO
	// NOTHING); the source's new rows have new keys and are inserted.
	fixed bool
	// mirror: a row the source deleted after a run is deleted from the
	// target by the next (its id is not in the source's snapshot). Only
	// for a table with ids: checkTarget refused a target that gave one of
	// its own, so every row there came from the source.
	mirror bool
	// newer, when set, orders two states of one row ({r} is the row): the
	// source's replaces the target's only when it is larger on it, and a
	// target row larger on it was changed on the target since it was
	// copied, which is refused (ErrInService) whoever changed it later.
	newer string
	// id: the table has an identity column id, copied as it is; the
	// target's sequence is set past the source's so no id is given twice.
	id bool
	// same are the columns that make a row under an existing id the same
	// row (a previous run of this source), not another installation's.
	same []string
	// raise are watermarks: on a key already there the larger value is
	// kept, so none moves back (the rest of the row is left as it is).
	raise []string
	// filter limits the rows inserted (SQL over the batch, aliased i;
	// {schema} is the target's schema, which every other table it names
	// is qualified with).
	filter string
	// conflict, when set, is the ON CONFLICT action instead of the
	// source's row replacing the target's (or raise's, or fixed's).
	conflict string
	// skip, when set, is why the table is not moved.
	skip string
	why  string
}

// plan is every table of schema.sql, in an order that satisfies the
// foreign keys (events before what refers to them). TestPlanCoversSchema
// fails when a migration adds a table that is not here.
var plan = []table{
	{name: "events", key: []string{"id"}, id: true, same: []string{"tenant", "event_id", "purpose", "fingerprint"},
		why: "every accepted event with its payload, message, fan-out progress (expanded) and quarantine (quarantined_at, reason, dropped): ids kept so notifications, feed items and `show` still point at them. A rerun carries over what the source did to an event since (its fan-out finished, its quarantine set, released or dropped): no column orders an event's states, so the source's row replaces one that differs (the target is refused if it worked since)"},
	{name: "notifications", key: []string{"id"}, id: true, same: []string{"key", "event", "seq"},
		// claims only grow and every send is a claim; updated_at is set by
		// every change (claim, settle, retry, receipt).
		newer: "({r}.claims, {r}.updated_at)",
		why:   "each notification with its provider key, status, retry budget, next attempt, pinned provider (provider, route_pos, pinned), claim count and its own message if a template rendered one at accept (sent as stored); one still sending with an expired lease is moved as it is, with the provider its claim named (claimed_provider), and settled as unknown at that provider once by the target's lease recovery. A rerun carries over what the source did to it since (sent after a rollback, retried, a receipt's status): the later state, by claims then updated_at, wins, so a notification the source sent is not sent again from the nodes; one the target claimed or changed later is refused (the target is in service)"},
	{name: "attempts", key: []string{"id"}, id: true, same: []string{"notification", "n"}, fixed: true,
		why: "the audit of every provider call: `show` reads the same history on the target. Written once per call, never changed: a call the source made after a run is a new id, inserted by the next run"},
	{name: "notification_audit", key: []string{"id"}, id: true, same: []string{"notification", "at", "actor"}, fixed: true,
		why: "who retried each notification from the console, and when: the notification's page shows the same trail on the target (appended, never changed: new rows are new ids)"},
	{name: "receipts", key: []string{"id"}, id: true, same: []string{"provider", "dedupe"}, fixed: true,
		why: "provider receipts, including early ones not yet matched to a notification; (provider, dedupe) keeps a resent webhook a duplicate. Stored once, never changed (what a receipt did to its notification is in the notification's row): new ones are new ids"},
	{name: "tokens", key: []string{"id"}, id: true, same: []string{"hash"}, fixed: true, mirror: true,
		why: "API tokens (hashes only): clients keep working against the new nodes. Never changed once made; revoking deletes one, and a token the source revoked after a run is deleted from the target by the next (mirror), so it does not open the nodes"},
	{name: "user_token_keys", key: []string{"tenant", "kid"},
		why: "each tenant's keys for the user tokens its backend signs, retired ones included: tokens minted before the move keep opening their user's feed on the nodes, and a retired key's id is never given again. One the source retired after a run is retired on the target too (the source's row replaces one that differs)"},
	{name: "feed_origins", key: []string{"id"}, id: true, same: []string{"tenant", "origin"}, fixed: true, mirror: true,
		why: "the browser origins each tenant lets call its users' feeds: the inbox keeps working from the same pages. Never changed once added; one the source removed after a run is removed from the target by the next (mirror), so it does not open the nodes to that origin"},
	{name: "feed_counters", key: []string{"tenant"}, raise: []string{"seq", "legacy_seq"},
		why: "each tenant's last feed sequence: new items continue after the moved ones, never reusing a seq a reader has seen"},
	{name: "feed_items", key: []string{"tenant", "seq"},
		why: "feed items with their seq and per-feed pos, so read watermarks keep meaning the same items; a throttle's folded notification with its own message, so the next digest on the target carries it. The number of copies a shared item counts can grow on the source after a run: the source's row replaces one that differs"},
	{name: "feed_members", key: []string{"tenant", "user", "feed"},
		why: "who sees which feed, from which seq on (the source's row replaces one that differs)"},
	{name: "feed_marks", key: []string{"tenant", "user", "kind"}, raise: []string{"mark"},
		why: "read and dismissed watermarks: unread counts stay equal; on a second run the larger mark wins, so none moves back"},
	{name: "feed_item_marks", key: []string{"tenant", "user", "kind", "seq"}, fixed: true,
		why: "single items marked read or dismissed above the watermark (the key is the whole mark: never changed)"},
	{name: "audiences", key: []string{"tenant", "name"}, newer: "{r}.updated_at",
		why: "named recipient lists that events and digests fan out to; one the source replaced after a run is replaced on the target too (the later updated_at wins; one the target replaced later is refused), before its members, so they are topped up to its new size"},
	{name: "audience_members", key: []string{"tenant", "audience", "seq"},
		// An audience the target replaced since (audience set) is not
		// topped up with the source's older members past its new size.
		filter: "EXISTS (SELECT 1 FROM {schema}.audiences a WHERE a.tenant = i.tenant AND a.name = i.audience AND i.seq < a.members)",
		why:    "the members of each audience, in order (the source's member at a position replaces one that differs)"},
	{name: "job_runs", key: []string{"job", "scheduled_at"},
		why: "every scheduled run by job and time, with the feed seq a digest covered: a run done on the box is not run again on the nodes; one copied running and finished on the source since is carried over finished (the source's row replaces one that differs)"},
	{name: "source_positions", key: []string{"source"}, raise: []string{"position"},
		why: "how far each tailed outbox was relayed: the nodes resume there (the larger on a second run), not from the start"},
	{name: "source_gaps", key: []string{"source", "first"},
		why: "the ids below each tailed outbox's position still awaited (their transactions had not committed): the nodes read them again; one the nodes have since passed is read again and deduped. One the source narrowed since is replaced by the source's (one it closed since stays on the target: read again, deduped)"},
	{name: "source_rejects", key: []string{"source", "row_id"},
		why: "outbox rows whose event was rejected, with why and any retry asked for: still listed, retried and dropped on the nodes (the position has passed them); the source's row replaces one that differs (seen again, a retry asked for, gone)"},
	{name: "suppressions", key: []string{"tenant", "channel", "address"},
		why: "each tenant's suppression list (hard and soft bounces, complaints, an operator's entries, until they lapse): nothing is sent to them from the nodes either. One the source set again since is replaced by the source's; one it removed since stays on the target (a rerun does not carry deletions: remove it there too)"},
	{name: "request_keys", key: []string{"tenant", "key"},
		why: "Idempotency-Key claims and stored responses: a client retrying a request made before the move gets the same answer. One in flight would mean a live serve, which is refused; an abandoned one lapses by itself. One copied in flight and answered on the source since is carried over with its stored response (the source's row replaces one that differs)"},
	{name: "settings", key: []string{"name"},
		// Written once per database and never changed, except here: a
		// key the target made before any row was moved (a command such as
		// status or show run on it first) is replaced by the source's,
		// which the ids clients hold were made with. A target with rows
		// of its own is refused before this (checkTarget).
		conflict: "UPDATE SET value = excluded.value, created_at = excluded.created_at WHERE settings.value <> excluded.value",
		why:      "values made once per database: the key of the opaque ids the API shows (n_…, ev_…), so every id a client holds names the same notification or event on the nodes"},
	// What recipients decided, and what signs their links.
	{name: "pref_switches", key: []string{"tenant", "recipient", "category", "channel"}, newer: "{r}.set_at",
		why: "recipients' categories on or off, per channel, with when and through what: an opt-out holds on the nodes. One a recipient changed on the source after a run is carried over (the later set_at wins; one changed later on the target is refused); one the source cleared since stays on the target (a rerun does not carry deletions)"},
	{name: "pref_quiet_hours", key: []string{"tenant", "recipient", "category"}, newer: "{r}.set_at",
		why: "recipients' quiet hours (as pref_switches: the later set_at wins)"},
	{name: "pref_zones", key: []string{"tenant", "recipient"}, newer: "{r}.set_at",
		why: "recipients' time zones, in which quiet hours are read (as pref_switches: the later set_at wins)"},
	{name: "tenant_keys", key: []string{"tenant"},
		// As settings: links already in recipients' mailboxes were signed
		// with the source's key, so it replaces one the target made first.
		conflict: "UPDATE SET key = excluded.key, created_at = excluded.created_at WHERE tenant_keys.key <> excluded.key",
		why:      "each tenant's key for recipients' links (one-click unsubscribe, the preferences page): links already sent keep working on the nodes"},
	{name: "throttle_slots", key: []string{"holder"}, fixed: true,
		why: "the slots category throttles and throttle steps count in their window, each until the window ends: a throttle does not start over on the nodes (taken once per notification or run's step, never changed)"},
	{name: "provider_pauses", key: []string{"provider"}, raise: []string{"until"},
		why: "a provider's Retry-After still in force: the nodes do not call it before it ends (the later end kept on a second run)"},
	// Templates managed over the API.
	{name: "templates", key: []string{"tenant", "name", "channel", "locale", "version"},
		why: "every version of each stored template, retired ones included: old versions stay readable on the nodes, and the next PUT numbers after them; one the source retired after a run is retired on the target too (the source's row replaces one that differs)"},
	{name: "template_generation", key: []string{"id"}, raise: []string{"gen"},
		why: "the number every template change raises, which serve polls to reload its templates: moved so it never goes back (the larger kept)"},
	// Workflows managed over the API.
	{name: "workflows", key: []string{"tenant", "type", "version"},
		why: "every version of each tenant's workflow, retired ones included: runs keep the version they started with, and the next PUT numbers after them (the source's row replaces one that differs, as for templates)"},
	{name: "workflow_runs", key: []string{"id"}, id: true, same: []string{"event", "seq"},
		// updated_at is set by every change (a step decided, a delay's due
		// time, a cancel), and a run's states only move forward.
		newer: "{r}.updated_at",
		why:   "each recipient's run of a workflow with its version, next step, due time, cancel key and why it ended: a waiting run goes on on the nodes at the step it reached, and a delay ends when it would have. A rerun carries over the steps the source decided since (the later updated_at wins; one the target moved on since is refused)"},
	{name: "workflow_steps", key: []string{"run", "step", "attempt"}, fixed: true,
		why: "what was decided at each step of a run, and why, with the notification or in-app item it wrote: `show` and the API read the same trail on the target, and a later step's condition reads the same earlier steps (written once, never changed)"},
	{name: "workflow_batches", key: []string{"id"}, id: true, same: []string{"tenant", "type", "version", "recipient", "step", "opened_at"},
		why: "each batch of a batch step with its leader, window and size: an open one goes on gathering on the nodes and closes when it would have (the source's row replaces one that differs)"},
	{name: "workflow_batch_runs", key: []string{"batch", "run"}, raise: []string{"carried"},
		why: "which runs joined each batch and which it carried when it closed: the leader's next steps read the same events on the target (carried only goes from 0 to 1)"},
	{name: "link_clicks", key: []string{"notification", "url"}, raise: []string{"count", "last_at"},
		why: "the clicks on each notification's tracked links: `show` lists the same, and a waiting run's `clicked` condition reads the same. Counts only grow: a rerun keeps the larger count and the later last click"},
	{name: "console_sessions", skip: "not moved: console sign-ins are short-lived (12 h at most); people sign in again on the nodes"},
	{name: "leases", skip: "not moved: a lease names a process on the old box; a live one means a serve still runs there (refused), a lapsed one means nothing, and the nodes take their own"},
}

// notMoved are the tables of the source that are bookkeeping, not state.
var notMoved = map[string]string{
	"sqlite_sequence": "SQLite's record of the largest id each table gave: read to set the target's sequences past it, not copied",
}

// Tables names every table the plan knows, with why it is moved or not.
func Tables() map[string]string {
	out := map[string]string{}
	for _, t := range plan {
		out[t.name] = t.why + t.skip
	}
	for n, why := range notMoved {
		out[n] = why
	}
	return out
}
