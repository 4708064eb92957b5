package sqlstore

import (
	"slices"
	"time"
)

// NullStr is s as a nullable column: NULL for "".
func NullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// NullInt is n as a nullable column: NULL for 0.
func NullInt(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

// NullInt64 is n as a nullable column: NULL for 0.
func NullInt64(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

// NullTime is t as a nullable column of Unix milliseconds: NULL for nil.
func NullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return MS(*t)
}

// OrNow is t, or now if t is zero.
func OrNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// Distinct is ss without repeats, in first-seen order.
func Distinct(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
