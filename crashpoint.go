package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/edgerelay/edgerelay/relay"
)

// Crash points for the crash drills. With EDGERELAY_CRASH_AT=phase:n in its
// environment, the edgerelay process kills itself with SIGKILL the n-th
// time the relay reaches phase (relay.Phases: accept, accepted, claimed,
// called, settle, step), so a drill can land a kill exactly where the guarantees are
// hardest to keep, not only where a timer happens to fire. Only the binary
// reads the variable; a program that embeds the relay injects relay.Hooks.

// crashHooks returns the hooks EDGERELAY_CRASH_AT asks for (none when it
// is unset), warning on stderr about a value it cannot use.
func crashHooks() relay.Hooks {
	s := os.Getenv("EDGERELAY_CRASH_AT")
	if s == "" {
		return relay.Hooks{}
	}
	phase, count, _ := strings.Cut(s, ":")
	n, err := strconv.ParseInt(count, 10, 64)
	if !slices.Contains(relay.Phases, relay.Phase(phase)) {
		err = fmt.Errorf("unknown phase %q", phase)
	}
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "edgerelay: ignoring EDGERELAY_CRASH_AT=%q: want accept|accepted|claimed|called|settle|step:N with N >= 1\n", s)
		return relay.Hooks{}
	}
	var seen atomic.Int64
	return relay.Hooks{At: func(p relay.Phase) {
		if p != relay.Phase(phase) || seen.Add(1) != n {
			return
		}
		fmt.Fprintf(os.Stderr, "edgerelay: crash point %s:%d reached, killing this process (SIGKILL)\n", p, n)
		if proc, err := os.FindProcess(os.Getpid()); err == nil {
			proc.Kill() // SIGKILL on Unix: no deferred function, no flush runs
		}
		select {} // the signal is on its way
	}}
}
