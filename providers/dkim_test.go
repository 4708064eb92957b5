package providers

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
)

// dkimKey is a signing key made for the test run (none is committed) and
// the TXT record that would publish it.
type dkimKey struct {
	name   string
	pkcs8  []byte // PEM, "PRIVATE KEY"
	record string // v=DKIM1; k=…; p=…
}

var dkimKeysOnce = sync.OnceValues(func() ([]dkimKey, error) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	var keys []dkimKey
	for _, k := range []struct {
		name string
		key  crypto.Signer
	}{{"rsa", rsaKey}, {"ed25519", edKey}} {
		der, err := x509.MarshalPKCS8PrivateKey(k.key)
		if err != nil {
			return nil, err
		}
		var p string
		switch pub := k.key.Public().(type) {
		case *rsa.PublicKey:
			b, err := x509.MarshalPKIXPublicKey(pub)
			if err != nil {
				return nil, err
			}
			p = base64.StdEncoding.EncodeToString(b)
		case ed25519.PublicKey:
			p = base64.StdEncoding.EncodeToString(pub) // RFC 8463: the raw 32 bytes
		}
		keys = append(keys, dkimKey{
			name:   k.name,
			pkcs8:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
			record: fmt.Sprintf("v=DKIM1; k=%s; p=%s", k.name, p),
		})
	}
	return keys, nil
})

func dkimKeys(t *testing.T) []dkimKey {
	t.Helper()
	keys, err := dkimKeysOnce()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// keyFile writes a key's PEM to a file of the test's own.
func keyFile(t *testing.T, pemText []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dkim.pem")
	if err := os.WriteFile(path, pemText, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// msgauthVerify checks data's one DKIM signature with go-msgauth, the key
// looked up as sel._domainkey.example.com.
func msgauthVerify(data []byte, record string) error {
	vs, err := dkim.VerifyWithOptions(bytes.NewReader(data), &dkim.VerifyOptions{
		LookupTXT: func(domain string) ([]string, error) {
			if domain != "sel._domainkey.example.com" {
				return nil, fmt.Errorf("no TXT record for %s", domain)
			}
			return []string{record}, nil
		},
	})
	switch {
	case err != nil:
		return err
	case len(vs) != 1:
		return fmt.Errorf("%d signatures, want 1", len(vs))
	}
	return vs[0].Err
}

// dkimpyScript verifies each message of a JSON list of [TXT record,
// message in base64] pairs with dkimpy, the library behind Debian's
// dkimverify, and prints a JSON list of booleans. dkimverify itself asks
// DNS for the key and the tests reach nothing beyond loopback, so the
// script hands dkimpy the record instead (its dnsfunc hook); the
// verification is dkimpy's own. One process for many messages: the
// interpreter's start is most of the cost.
const dkimpyScript = `
import base64, json, sys, dkim
def verify(record, msg):
    def dns(name, timeout=5):
        return record.encode() if name.rstrip(b".") == b"sel._domainkey.example.com" else None
    return bool(dkim.verify(base64.b64decode(msg), dnsfunc=dns))
print(json.dumps([verify(r, m) for r, m in json.load(sys.stdin)]))
`

// dkimpyCase is one message for dkimpy and the key record it is checked
// against.
type dkimpyCase struct {
	record string
	msg    []byte
}

// dkimpyVerify runs each message through dkimpy; it skips the test when
// Debian's python3-dkim (dkimverify) is not installed.
func dkimpyVerify(t *testing.T, cases []dkimpyCase) []bool {
	t.Helper()
	bin, err := exec.LookPath("dkimverify")
	if err != nil {
		t.Skip("dkimverify not found: apt-get install python3-dkim to verify with dkimpy")
	}
	// The interpreter dkimverify runs on is the one that has the module.
	python := "python3"
	if f, err := os.Open(bin); err == nil {
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if interp, ok := strings.CutPrefix(strings.TrimSpace(line), "#!"); ok && !strings.Contains(interp, " ") {
			python = interp
		}
	}
	in := make([][2]string, len(cases))
	for i, c := range cases {
		in[i] = [2]string{c.record, base64.StdEncoding.EncodeToString(c.msg)}
	}
	stdin, _ := json.Marshal(in)
	cmd := exec.CommandContext(t.Context(), python, "-c", dkimpyScript)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("dkimpy: %v\n%s", err, stderr)
	}
	var ok []bool
	if err := json.Unmarshal(out, &ok); err != nil || len(ok) != len(cases) {
		t.Fatalf("dkimpy printed %q (%v)", out, err)
	}
	return ok
}

// tamper returns data with one byte of the named header's value changed.
func tamper(t *testing.T, data []byte, header string) []byte {
	t.Helper()
	i := bytes.Index(append([]byte("\r\n"), data...), []byte("\r\n"+header+": "))
	if i < 0 {
		t.Fatalf("no %s header in\n%s", header, data)
	}
	i += len(header + ": ")
	out := bytes.Clone(data)
	if out[i] == 'x' {
		out[i] = 'y'
	} else {
		out[i] = 'x'
	}
	return out
}

// The smtp provider's signature verifies with two independent verifiers,
// go-msgauth and dkimpy, for RSA and Ed25519 keys, from a file and as PEM
// text; changing one byte of any signed header, or of the body, breaks it.
func TestSMTPDKIM(t *testing.T) {
	t.Parallel()
	// What dkimpy checks, gathered from the subtests and run in one go.
	type check struct {
		name string
		want bool
		dkimpyCase
	}
	var (
		mu     sync.Mutex
		checks []check
	)
	t.Run("send", func(t *testing.T) {
		for _, k := range dkimKeys(t) {
			for _, how := range []string{"file", "pem"} {
				t.Run(k.name+"/"+how, func(t *testing.T) {
					t.Parallel()
					s := startSMTP(t, smtpServerOpts{})
					key := keyFile(t, k.pkcs8)
					if how == "pem" {
						key = string(k.pkcs8) // as options: {dkim_key: ${VAR}} hands it over
					}
					p := newSMTP(t, smtpURL("smtp", "", s.addr, "starttls=none&dkim_selector=sel&dkim_key="+url.QueryEscape(key)+
						"&list_unsubscribe="+url.QueryEscape("https://relay.example.com/u/{key}")), nil)
					p.SetCommercial([]string{"newsletter"})
					m := testMessage("er1_dkim_" + k.name + "_" + how)
					m.Type, m.Subject = "newsletter", "Spring offers: €12"
					m.Body, m.HTML = "", "<p>Hello <b>Ada</b>,</p><p>offers.</p>"
					m.Created = time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
					if res := send(p, m); res.Outcome != Sent {
						t.Fatalf("Send = %+v", res)
					}
					data := s.one(t).data
					if err := msgauthVerify(data, k.record); err != nil {
						t.Fatalf("go-msgauth: %v\n%s", err, data)
					}
					vs, _ := dkim.VerifyWithOptions(bytes.NewReader(data), &dkim.VerifyOptions{
						LookupTXT: func(string) ([]string, error) { return []string{k.record}, nil }})
					if v := vs[0]; v.Domain != "example.com" || !v.Time.Equal(m.Created) {
						t.Errorf("signature d=%s t=%v, want example.com and the Date, %v", v.Domain, v.Time, m.Created)
					}
					mine := []check{{t.Name(), true, dkimpyCase{k.record, data}}}
					for _, h := range []string{"From", "To", "Subject", "Date", "Message-ID", "Auto-Submitted", "List-Unsubscribe",
						"List-Unsubscribe-Post", "X-Edgerelay-Key", "Content-Type", "MIME-Version"} {
						bad := tamper(t, data, h)
						if err := msgauthVerify(bad, k.record); err == nil {
							t.Errorf("go-msgauth verifies the message with one byte of %s changed", h)
						}
						mine = append(mine, check{t.Name() + " with one byte of " + h + " changed", false, dkimpyCase{k.record, bad}})
					}
					body := bytes.Clone(data)
					body[bytes.LastIndex(body, []byte("offers."))] = 'O'
					if err := msgauthVerify(body, k.record); err == nil {
						t.Error("go-msgauth verifies the message with one byte of the body changed")
					}
					mine = append(mine, check{t.Name() + " with one byte of the body changed", false, dkimpyCase{k.record, body}})
					mu.Lock()
					checks = append(checks, mine...)
					mu.Unlock()
				})
			}
		}
	})
	if t.Failed() {
		return
	}
	// A subtest of its own, so that without dkimverify only it skips.
	t.Run("dkimpy", func(t *testing.T) {
		cases := make([]dkimpyCase, len(checks))
		for i, c := range checks {
			cases[i] = c.dkimpyCase
		}
		for i, ok := range dkimpyVerify(t, cases) {
			if c := checks[i]; ok != c.want {
				t.Errorf("%s: verifies %v, want %v\n%s", c.name, ok, c.want, c.msg)
			}
		}
	})
}

// A key that no verifier would take, or that is not a key, is refused when
// the provider is built, without quoting the value (it may be the key).
func TestSMTPDKIMURL(t *testing.T) {
	t.Parallel()
	keys := dkimKeys(t)
	good := keyFile(t, keys[0].pkcs8)
	pkcs1 := func() string {
		k, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		return keyFile(t, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
	}()
	base := "smtp://mail.example.com?from=Relay+%3Crelay%40example.com%3E"
	for _, c := range []struct{ extra, want string }{
		{"dkim_key=" + url.QueryEscape(good) + "&dkim_selector=sel", ""},
		{"dkim_key=" + url.QueryEscape(pkcs1) + "&dkim_selector=s1.2026&dkim_domain=mail.example.com", ""},
		{"dkim_key=" + url.QueryEscape(string(keys[1].pkcs8)) + "&dkim_selector=sel", ""},
		{"dkim_key=" + url.QueryEscape(good), `parameter "dkim_key" needs "dkim_selector"`},
		{"dkim_selector=sel", `parameter "dkim_selector" needs "dkim_key"`},
		{"dkim_domain=example.com", `parameter "dkim_domain" needs "dkim_key"`},
		{"dkim_key=" + url.QueryEscape(good) + "&dkim_selector=se+l", `parameter "dkim_selector": "se l" is not a DNS label`},
		{"dkim_key=" + url.QueryEscape(good) + "&dkim_selector=sel&dkim_domain=localhost", `parameter "dkim_domain": "localhost" is not a domain name`},
		{"dkim_key=/nonexistent/dkim.pem&dkim_selector=sel", `parameter "dkim_key": open /nonexistent/dkim.pem: no such file`},
		{"dkim_key=&dkim_selector=sel", `parameter "dkim_key": empty`},
		{"dkim_key=" + url.QueryEscape("-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n") + "&dkim_selector=sel",
			`parameter "dkim_key": not an RSA or Ed25519 private key in PEM`},
		{"dkim_key=" + url.QueryEscape(testRSA512) + "&dkim_selector=sel", `parameter "dkim_key": `},
	} {
		_, err := New(base + "&" + c.extra)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.extra, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %s", c.extra, err, c.want)
		case err != nil && (strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "MIIB")):
			t.Errorf("the error quotes the key: %v", err)
		}
	}
	// From an international domain, the signing domain must be given.
	_, err := New("smtp://mail.example.com?from=relay%40b%C3%BCcher.example&dkim_key=" + url.QueryEscape(good) + "&dkim_selector=sel")
	if err == nil || !strings.Contains(err.Error(), `the domain of "from" (set dkim_domain)`) {
		t.Errorf("international from without dkim_domain: %v", err)
	}
}

// testRSA512 is a TEST-ONLY RSA key of 512 bits, worthless by design: it
// stands for a key too short for DKIM (RFC 8301), which crypto/rsa no
// longer generates.
const testRSA512 = `-----BEGIN PRIVATE KEY-----
MIIBVAIBADANBgkqhkiG9w0BAQEFAASCAT4wggE6AgEAAkEAsPIyUPPw6CTiPknm
r+wParzoqFaf1y591RmM35hmn87Hv0RWB2zqg9OYUE0tQmh4DRgaC4yd/3m/WpiE
ULVLjwIDAQABAkAGdrJz1pVkRYSmNdjhcEQX6BKvo4pvN9mM4UQOHukQyVNgVRvx
CVeAmeyZw1m0XEdqT5ZZ1neAScI25rIjQVohAiEA2wUGpIHwJ3SmT0uTE4nmfiPn
EqRPfTcXzGoy/Nrb/zkCIQDO0pHtmk8mg5UYt71djD0ie5V54lbc5+Z+T3hzyirZ
BwIgHd3klwBlKGw+1adfqhVvChqJQ0CG2nNt2mFNDLAnufkCIQCXa0jVaQ0byGgn
IZZtX9f+X/ZutswbjViOD0bDlzbJjwIgVIO2bv40mynF+eA4h6nyrMDv7xNdBGdT
CSEtc1LvwFc=
-----END PRIVATE KEY-----
`
