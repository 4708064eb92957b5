// Package longtest gates the suite's long drills: the SIGKILL and cluster
// drills, the stamped second build, the conformance suite's second
// PostgreSQL protocol mode and the PostgreSQL benchmark table run small.
// `go test ./...` skips them so that it stays a quicker loop (about 155 s
// on two cores, from 238 s); `EDGERELAY_LONG_TESTS=1 go test ./...` runs them, and
// .ci/run sets it, so nothing lands without them.
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
