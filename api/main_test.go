package api_test

import (
	"os"
	"testing"

	"github.com/edgerelay/edgerelay/internal/testpar"
)

func TestMain(m *testing.M) {
	testpar.Raise()
	os.Exit(m.Run())
}
