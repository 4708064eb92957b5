package sim

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pushSub is a browser's side of a Web Push subscription the simulator
// made: the keys it decrypts with.
type pushSub struct {
	priv *ecdh.PrivateKey
	auth []byte
}

// handleSubscribe makes a subscription, as a browser's PushManager would:
// its JSON (endpoint, keys.p256dh, keys.auth) is the address to send to,
// and pushes to its endpoint are decrypted with its private key.
func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody(err.Error()))
		return
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	s.mu.Lock()
	if s.subs == nil {
		s.subs = map[string]*pushSub{}
	}
	id := "sub-" + strconv.Itoa(len(s.subs)+1)
	s.subs[id] = &pushSub{priv: priv, auth: auth}
	s.mu.Unlock()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	enc := base64.RawURLEncoding
	writeJSON(w, http.StatusCreated, jsonBody(map[string]any{"endpoint": scheme + "://" + r.Host + "/push/v1/" + id,
		"keys": map[string]string{"p256dh": enc.EncodeToString(priv.PublicKey().Bytes()), "auth": enc.EncodeToString(auth)}}))
}

// decodeWebPush checks a push as a push service does (RFC 8030's TTL, a
// VAPID Authorization, aes128gcm) and decrypts it as the browser would
// (RFC 8291), reading the payload's title and body.
func decodeWebPush(s *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	id := r.PathValue("id")
	s.mu.Lock()
	sub := s.subs[id]
	s.mu.Unlock()
	auth := r.Header.Get("Authorization")
	switch {
	case sub == nil:
		return sendRequest{}, http.StatusGone, errors.New("no such subscription: it expired or was never made (POST /push-subscriptions makes one)")
	case !strings.HasPrefix(auth, "vapid t=") || !strings.Contains(auth, ", k="):
		return sendRequest{}, http.StatusUnauthorized, errors.New("missing VAPID Authorization (vapid t=JWT, k=KEY)")
	case r.Header.Get("TTL") == "":
		return sendRequest{}, http.StatusBadRequest, errors.New("missing TTL header")
	case r.Header.Get("Content-Encoding") != "aes128gcm":
		return sendRequest{}, http.StatusUnsupportedMediaType, errors.New("Content-Encoding must be aes128gcm")
	}
	plain, err := openWebPush(sub, body)
	if err != nil {
		return sendRequest{}, http.StatusBadRequest, fmt.Errorf("cannot decrypt the payload: %w", err)
	}
	var p struct{ Title, Body string }
	if err := json.Unmarshal(plain, &p); err != nil {
		// A push service never reads the payload; a JSON one is what the
		// relay sends, so anything else is worth a refusal here.
		return sendRequest{}, http.StatusBadRequest, errors.New("the decrypted payload is not JSON")
	}
	return sendRequest{To: recipients{"webpush:" + id}, Subject: p.Title, Text: p.Body}, 0, nil
}

// openWebPush decrypts an aes128gcm body (RFC 8188) with the
// subscription's keys, deriving the key and nonce as RFC 8291 §3.4 says:
// the header is salt (16), record size (4), key id length (1) and the key
// id, the sender's public key.
func openWebPush(sub *pushSub, body []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("shorter than the aes128gcm header")
	}
	salt, rs, idLen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if len(body) < 21+idLen || rs < 18 {
		return nil, errors.New("bad aes128gcm header")
	}
	asPub, err := ecdh.P256().NewPublicKey(body[21 : 21+idLen])
	if err != nil {
		return nil, fmt.Errorf("the key id is not a P-256 public key: %w", err)
	}
	shared, err := sub.priv.ECDH(asPub)
	if err != nil {
		return nil, err
	}
	info := "WebPush: info\x00" + string(sub.priv.PublicKey().Bytes()) + string(asPub.Bytes())
	ikm, err := hkdf.Key(sha256.New, shared, sub.auth, info, 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	record := body[21+idLen:]
	if uint32(len(record)) > rs {
		return nil, errors.New("more than one record: the relay sends one")
	}
	out, err := gcm.Open(nil, nonce, record, nil)
	if err != nil {
		return nil, errors.New("authentication failed (wrong keys, or tampered)")
	}
	// The last record ends with the delimiter 2, then zero padding.
	i := len(out) - 1
	for i >= 0 && out[i] == 0 {
		i--
	}
	if i < 0 || out[i] != 2 {
		return nil, errors.New("no last-record delimiter")
	}
	return out[:i], nil
}

func webPushOK(seq int, _ *sendRequest, _ time.Time) (int, http.Header, []byte) {
	return http.StatusCreated, header("Location", "/push/messages/sim_"+strconv.Itoa(seq)), nil
}

// webPushProblem is the error body Mozilla's autopush gives.
func webPushProblem(status int, msg string, _ int) (http.Header, []byte) {
	errno := map[int]int{400: 101, 401: 109, 404: 102, 410: 106, 413: 104, 429: 115}[status]
	if errno == 0 {
		errno = 999
	}
	return nil, jsonBody(map[string]any{"code": status, "errno": errno, "error": http.StatusText(status), "message": msg})
}
