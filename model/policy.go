package model

import "slices"

// The decisions a store must apply inside its own transactions, made here
// once, so that no store decides them in its SQL and both decide alike.

// receiptRanks ranks a receipt's status by what it says of its
// notification: a notification takes the status of its highest-ranked
// receipt, so its status is a function of the set of its receipts, not of
// their order. Receipt statuses not listed (sent, anything unknown) say
// nothing new.
var receiptRanks = []struct {
	receipt string
	rank    int
	outcome string
}{
	{"bounced", 2, StatusBounced},
	{"failed", 2, StatusBounced},
	{"delivered", 1, StatusDelivered},
	{"complained", 1, StatusDelivered}, // it arrived: the complaint suppresses the address
}

// ReceiptOutcome is the status a notification's receipts add up to: bounced
// (bounced, failed) outranks delivered (delivered, complained), which
// outranks saying nothing (ok false).
func ReceiptOutcome(receipts []string) (status string, ok bool) {
	best := 0
	for _, r := range receipts {
		for _, rr := range receiptRanks {
			if rr.receipt == r && rr.rank > best {
				best, status = rr.rank, rr.outcome
			}
		}
	}
	return status, best > 0
}

// ReceiptMovesFrom is the statuses a receipt's outcome may move a
// notification from: a sent one to either, a delivered one only to
// bounced (a bounce can follow a delivery receipt; a delivery never undoes
// a bounce). Any other status (pending again after a retry, failed, dead)
// is the sender's own and stays.
func ReceiptMovesFrom(outcome string) []string {
	if outcome == StatusBounced {
		return []string{StatusSent, StatusDelivered}
	}
	return []string{StatusSent}
}

// retryable is the statuses an operator's retry may put back to pending:
// the ones that ended without the message known to be sent. A sent one
// cannot be: that would be a second message, not a retry.
var retryable = []string{StatusFailed, StatusDead, StatusUnknown, StatusSuppressed}

// Retryable reports whether a notification in status may be retried.
func Retryable(status string) bool { return slices.Contains(retryable, status) }

// RetryableStatuses lists them, for an error saying what was wanted.
func RetryableStatuses() []string { return slices.Clone(retryable) }

// prunable is the statuses whose notifications a prune deletes once they
// are older than its cutoff: those that ended. Pending and sending ones
// are still at work; suppressed ones are not listed, so a prune keeps them
// (an operator may lift the entry and retry them).
var prunable = []string{StatusSent, StatusDelivered, StatusBounced, StatusFailed, StatusDead, StatusUnknown, StatusSkipped}

// Prunable reports whether a prune may delete a notification in status.
func Prunable(status string) bool { return slices.Contains(prunable, status) }

// PrunableStatuses lists them, for the stores' prune statements.
func PrunableStatuses() []string { return slices.Clone(prunable) }
