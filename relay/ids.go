package relay

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// The ids the API shows. Row ids come from one sequence shared by every
// tenant, so a tenant that saw ids 1000 and 1700 a minute apart would know
// that 699 notifications went through for others. The API shows instead a
// keyed permutation of the row id: random to look at, stable (the key is
// made once per database and kept in it, so every node and every restart
// gives the same id), unique (a permutation), and turned back into the row
// id by computation alone (ten AES blocks), without looking anything up.
//
// The permutation is a Feistel network on 63 bits (every positive int64),
// the shape of NIST's FF1 format-preserving encryption: the value is split
// into halves of 31 and 32 bits, and each of 10 rounds XORs one half with
// AES-128 of the other (and of the round's number), truncated. Each round
// is undone by repeating it, so decoding runs the rounds backwards; with
// AES as the round function, seeing any number of ids tells nothing about
// their rows or about each other's order. Each kind of id has its own AES
// key, derived from the database's key with HKDF, so n_X and ev_X are
// unrelated.
//
// An id is its kind's prefix and 13 characters of Crockford's base32 in
// lower case (5 bits each; the first carries 3): fixed length, so the
// length says nothing either, and one spelling per id.

// Prefixes of the opaque ids, by kind.
const (
	NotificationIDPrefix = "n_"
	EventIDPrefix        = "ev_"
	RunIDPrefix          = "run_"
)

// IDKeyName is the name the ids' key is kept under in the store.
const IDKeyName = "opaque-id-key"

const (
	idRounds   = 10
	idDigits   = 13 // 63 bits = 12×5 + 3
	idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	idMask31   = 1<<31 - 1
	idMask32   = 1<<32 - 1
)

// IDs turns row ids into the opaque ids the API shows and back. It is safe
// for concurrent use.
type IDs struct {
	notification, event, run idPerm
}

// NewIDs makes the codec of a database from its key (at least 16 bytes).
func NewIDs(key []byte) (*IDs, error) {
	if len(key) < 16 {
		return nil, errors.New("opaque ids: the key is shorter than 16 bytes")
	}
	n, err := newIDPerm(key, "notification")
	if err != nil {
		return nil, err
	}
	e, err := newIDPerm(key, "event")
	if err != nil {
		return nil, err
	}
	r, err := newIDPerm(key, "workflow run")
	if err != nil {
		return nil, err
	}
	return &IDs{notification: n, event: e, run: r}, nil
}

// Notification is the id the API shows for a notification's row.
func (x *IDs) Notification(row int64) string {
	return NotificationIDPrefix + idString(x.notification.forward(uint64(row)))
}

// Event is the id the API shows for an event's row.
func (x *IDs) Event(row int64) string { return EventIDPrefix + idString(x.event.forward(uint64(row))) }

// NotificationRow is the row of an id Notification gave; false if s is not
// spelled as one (any string that is yields a row: whether the row exists,
// and is the caller's, is the store's to say).
func (x *IDs) NotificationRow(s string) (int64, bool) {
	v, ok := idValue(s, NotificationIDPrefix)
	if !ok {
		return 0, false
	}
	return int64(x.notification.backward(v)), true
}

// EventRow is the row of an id Event gave, as NotificationRow.
func (x *IDs) EventRow(s string) (int64, bool) {
	v, ok := idValue(s, EventIDPrefix)
	if !ok {
		return 0, false
	}
	return int64(x.event.backward(v)), true
}

// Run is the id the API shows for a workflow run's row.
func (x *IDs) Run(row int64) string { return RunIDPrefix + idString(x.run.forward(uint64(row))) }

// RunRow is the row of an id Run gave, as NotificationRow.
func (x *IDs) RunRow(s string) (int64, bool) {
	v, ok := idValue(s, RunIDPrefix)
	if !ok {
		return 0, false
	}
	return int64(x.run.backward(v)), true
}

// idPerm is one keyed permutation of [0, 2^63).
type idPerm struct{ block cipher.Block }

func newIDPerm(key []byte, kind string) (idPerm, error) {
	k, err := hkdf.Key(sha256.New, key, nil, "edgerelay opaque ids v1: "+kind, 16)
	if err != nil {
		return idPerm{}, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return idPerm{}, err
	}
	return idPerm{block: b}, nil
}

// round is the round function: AES of the round's number and one half.
// buf is the block in and out (one buffer per permutation: a block passed
// to the cipher escapes to the heap).
func (p idPerm) round(buf *[2 * aes.BlockSize]byte, i int, half uint64) uint64 {
	in, out := buf[:aes.BlockSize], buf[aes.BlockSize:]
	clear(in)
	in[0] = byte(i)
	binary.BigEndian.PutUint64(in[8:], half)
	p.block.Encrypt(out, in)
	return binary.BigEndian.Uint64(out[:8])
}

// forward permutes v (below 2^63): even rounds change the high 31 bits,
// odd rounds the low 32.
func (p idPerm) forward(v uint64) uint64 {
	buf := new([2 * aes.BlockSize]byte)
	hi, lo := v>>32&idMask31, v&idMask32
	for i := range idRounds {
		if i%2 == 0 {
			hi ^= p.round(buf, i, lo) & idMask31
		} else {
			lo ^= p.round(buf, i, hi) & idMask32
		}
	}
	return hi<<32 | lo
}

// backward undoes forward: the same rounds, last first.
func (p idPerm) backward(v uint64) uint64 {
	buf := new([2 * aes.BlockSize]byte)
	hi, lo := v>>32&idMask31, v&idMask32
	for i := idRounds - 1; i >= 0; i-- {
		if i%2 == 0 {
			hi ^= p.round(buf, i, lo) & idMask31
		} else {
			lo ^= p.round(buf, i, hi) & idMask32
		}
	}
	return hi<<32 | lo
}

// idString spells v (below 2^63) in 13 base32 digits, the most significant
// first.
func idString(v uint64) string {
	var b [idDigits]byte
	for i := idDigits - 1; i >= 0; i-- {
		b[i] = idAlphabet[v&31]
		v >>= 5
	}
	return string(b[:])
}

// idValue reads what idString spelled after prefix: exactly 13 digits of
// the alphabet, the first at most 7 (below 2^63).
func idValue(s, prefix string) (uint64, bool) {
	digits, ok := strings.CutPrefix(s, prefix)
	if !ok || len(digits) != idDigits {
		return 0, false
	}
	var v uint64
	for i := range idDigits {
		d := strings.IndexByte(idAlphabet, digits[i])
		if d < 0 || (i == 0 && d > 7) {
			return 0, false
		}
		v = v<<5 | uint64(d)
	}
	return v, true
}

// ParseRow reads a positive row id as the CLI prints it.
func ParseRow(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}
