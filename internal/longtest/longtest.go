// Package longtest gates the suite's long drills: the processes SIGKILLed
// mid-run (serve, dispatch, batch send, tail), the full-disk and
// corrupt-page drills, migrate-store end to end, the three-node cluster
// drill, the PostgreSQL tail and cron runs, the stamped second build, the
// conformance suite's second PostgreSQL protocol mode and the PostgreSQL
// benchmark table run small. `go test ./...` skips them so that it stays a
// quick loop (docs/PROOF.md section 10 has its figures);
// `EDGERELAY_LONG_TESTS=1 go test ./...` runs them, and .ci/run sets it on
// lines that name each one (TestCIRunsEveryLongDrill checks that none is
// left out), so nothing lands without them.
package longtest

import (
	"os"
	"testing"
)

// Env is the variable that turns the long drills on.
const Env = "EDGERELAY_LONG_TESTS"

// Enabled reports whether the long drills run.
func Enabled() bool { return os.Getenv(Env) == "1" }

// Require skips t unless the long drills run.
func Require(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skipf("a long drill: %s=1 runs it (.ci/run sets it)", Env)
	}
}
