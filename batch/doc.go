// Package batch reads batch files of events (JSON Lines, CSV) one line at
// a time and accepts them through the relay, in groups, each group one
// call of relay.AcceptAll and so one commit: `edgerelay batch send` and
// scheduled batch jobs.
//
// Memory stays bounded whatever the size of the file (three groups of
// lines at most); every bad line is reported with its number and the
// rest go on. Each line's event keeps the keys it would have if sent
// alone (tenant, id, purpose), never the line number or the time of the
// run: re-running a file after a crash, a kill or a partial run creates
// nothing twice and finishes what was left.
//
// It never holds a store or writes SQL, and never decides what an event
// means (the relay validates, dedupes and fans out); it never delivers.
package batch
