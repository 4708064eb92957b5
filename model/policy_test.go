package model

import (
	"slices"
	"testing"
)

func TestReceiptOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		receipts []string
		want     string // "" for no move
	}{
		{nil, ""},
		{[]string{"sent"}, ""},
		{[]string{"something new"}, ""},
		{[]string{"delivered"}, StatusDelivered},
		{[]string{"complained"}, StatusDelivered},
		{[]string{"bounced"}, StatusBounced},
		{[]string{"failed"}, StatusBounced},
		// Bounced outranks delivered, in either order.
		{[]string{"delivered", "bounced"}, StatusBounced},
		{[]string{"bounced", "delivered"}, StatusBounced},
		{[]string{"sent", "complained", "failed"}, StatusBounced},
		{[]string{"sent", "delivered"}, StatusDelivered},
	} {
		got, ok := ReceiptOutcome(c.receipts)
		if ok != (c.want != "") || got != c.want {
			t.Errorf("ReceiptOutcome(%q) = %q, %v; want %q", c.receipts, got, ok, c.want)
		}
	}
}

func TestReceiptMovesFrom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		outcome string
		from    []string
	}{
		{StatusDelivered, []string{StatusSent}},
		{StatusBounced, []string{StatusSent, StatusDelivered}},
	} {
		if got := ReceiptMovesFrom(c.outcome); !slices.Equal(got, c.from) {
			t.Errorf("ReceiptMovesFrom(%q) = %q, want %q", c.outcome, got, c.from)
		}
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status string
		want   bool
	}{
		{StatusFailed, true},
		{StatusDead, true},
		{StatusUnknown, true},
		{StatusSuppressed, true},
		{StatusPending, false},
		{StatusSending, false},
		{StatusSent, false}, // a second message, not a retry
		{StatusDelivered, false},
		{StatusBounced, false},
		{StatusSkipped, false},
	} {
		if got := Retryable(c.status); got != c.want {
			t.Errorf("Retryable(%q) = %v, want %v", c.status, got, c.want)
		}
	}
}

func TestPrunable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status string
		want   bool
	}{
		{StatusPending, false}, // still at work
		{StatusSending, false},
		{StatusSuppressed, false}, // kept for a lift and a retry
		{StatusSent, true},
		{StatusDelivered, true},
		{StatusBounced, true},
		{StatusFailed, true},
		{StatusDead, true},
		{StatusUnknown, true},
		{StatusSkipped, true},
	} {
		if got := Prunable(c.status); got != c.want {
			t.Errorf("Prunable(%q) = %v, want %v", c.status, got, c.want)
		}
	}
}
