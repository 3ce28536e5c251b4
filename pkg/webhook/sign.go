package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex>[,v1=<hex>]".
	SignatureHeader = "Plumb-Signature"
	// DeliveryHeader is the delivery id (Payload.ID).
	DeliveryHeader = "Plumb-Delivery"
	// EventHeader is the event type (Payload.Type).
	EventHeader = "Plumb-Event"
)

// KeyPrefix starts every webhook signing key.
const KeyPrefix = "whsec_"

// NewKey returns a new signing key: KeyPrefix and 32 random bytes in
// unpadded base64url. The HMAC key is the whole string's bytes, so that a
// receiver can use it as it is (openssl -hmac "$KEY").
func NewKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook key: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// mac is hex(HMAC-SHA256(key, "<t>.<body>")).
func mac(key string, t int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Sign returns the Plumb-Signature value of body sent at t: one v1 value
// per key (during a rotation both the new and the old key sign, so a
// receiver that knows either verifies).
func Sign(body []byte, t time.Time, keys ...string) string {
	ts := t.Unix()
	var b strings.Builder
	b.WriteString("t=" + strconv.FormatInt(ts, 10))
	for _, k := range keys {
		b.WriteString(",v1=" + mac(k, ts, body))
	}
	return b.String()
}

// Errors of Verify.
var (
	// ErrBadHeader: the header is not "t=<unix>,v1=<hex>...".
	ErrBadHeader = errors.New("malformed Plumb-Signature header")
	// ErrTooOld: the timestamp is further from now than the tolerance (a
	// replay, or a clock far off).
	ErrTooOld = errors.New("Plumb-Signature timestamp outside the tolerance")
	// ErrNoMatch: no v1 value is the HMAC of the body under any key.
	ErrNoMatch = errors.New("no Plumb-Signature value matches")
)

// Verify checks a delivery as a receiver does: header is its
// Plumb-Signature, body the raw request body (before any JSON parsing),
// keys the signing keys the receiver accepts (the current one, and the
// previous one while a rotation settles). It succeeds when the timestamp
// is within tolerance of now and some v1 value is the HMAC-SHA256 of
// "<t>.<body>" under some key. Compare in constant time, as here.
func Verify(header string, body []byte, keys []string, tolerance time.Duration, now time.Time) error {
	var (
		ts   int64
		seen bool
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrBadHeader
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || seen {
				return ErrBadHeader
			}
			ts, seen = n, true
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return ErrBadHeader
			}
			sigs = append(sigs, b)
		}
	}
	if !seen || len(sigs) == 0 {
		return ErrBadHeader
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrTooOld
	}
	for _, k := range keys {
		want, _ := hex.DecodeString(mac(k, ts, body))
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				return nil
			}
		}
	}
	return ErrNoMatch
}
