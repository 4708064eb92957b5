// Package testpar raises how many parallel tests a test binary runs at
// once. go test's default (-parallel = GOMAXPROCS, 2 on a two-core box)
// suits tests that compute; most of this suite's tests wait instead: on
// the processes they start, on real database servers, on a browser, on
// leases to pass. With two at a time a package's wall time was the sum of
// its waits. It must never be imported outside tests.
package testpar

import (
	"flag"
	"runtime"
	"strconv"
)

// PerCPU is how many parallel tests run at once per GOMAXPROCS.
const PerCPU = 4

// Raise sets -test.parallel to PerCPU x GOMAXPROCS unless the command line
// set it (go test -parallel N passes -test.parallel=N), or the race
// detector is on: it makes each test several times slower, and eight of
// them at once on two cores overran the budgets some tests keep (a
// template's 250 ms, a tail's minute). Call it from TestMain before m.Run.
func Raise() {
	if raceEnabled {
		return
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(PerCPU*runtime.GOMAXPROCS(0)))
	}
}
