package relay

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Crash points for the crash drills. With EDGERELAY_CRASH_AT=phase:n in its
// environment, the process kills itself with SIGKILL the n-th time it
// reaches phase, so a drill can land a kill exactly where the guarantees are
// hardest to keep, not only where a timer happens to fire:
//
//	accept    an accept is about to be written (nothing committed yet)
//	accepted  an accept is committed, the caller not yet answered
//	claimed   a notification is claimed, its provider not yet called
//	called    the provider answered, the attempt not yet recorded
//
// Without the variable a crash point is one load of a nil pointer.
var crashAt = parseCrashAt(os.Getenv("EDGERELAY_CRASH_AT"))

type crashSpec struct {
	phase string
	n     int64
	seen  atomic.Int64
}

func parseCrashAt(s string) *crashSpec {
	if s == "" {
		return nil
	}
	phase, count, _ := strings.Cut(s, ":")
	n, err := strconv.ParseInt(count, 10, 64)
	switch phase {
	case "accept", "accepted", "claimed", "called":
	default:
		err = fmt.Errorf("unknown phase %q", phase)
	}
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "edgerelay: ignoring EDGERELAY_CRASH_AT=%q: want accept|accepted|claimed|called:N with N >= 1\n", s)
		return nil
	}
	return &crashSpec{phase: phase, n: n}
}

// crashPoint kills the process if the drill asked for a kill here.
func crashPoint(phase string) {
	c := crashAt
	if c == nil || c.phase != phase || c.seen.Add(1) != c.n {
		return
	}
	fmt.Fprintf(os.Stderr, "edgerelay: crash point %s:%d reached, killing this process (SIGKILL)\n", phase, c.n)
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		p.Kill() // SIGKILL on Unix: no deferred function, no flush runs
	}
	select {} // the signal is on its way
}
