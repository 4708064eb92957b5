#!/usr/bin/env python3
"""Decrypt a Web Push message as a browser does and verify its VAPID JWT.

An implementation independent of the Go provider, on Python's
cryptography (Debian's python3-cryptography), written from RFC 8291 (the
message encryption), RFC 8188 (the aes128gcm content coding) and RFC 8292
(VAPID). It reads one JSON object on stdin:

  {"ua_private": "<the browser's P-256 scalar, base64url>",
   "auth": "<the subscription's 16-byte auth secret, base64url>",
   "body": "<the request body, base64url>",
   "authorization": "<the request's Authorization header>"}

and prints {"plaintext": "...", "jwt_header": {...}, "claims": {...}, "k": "..."}
(without authorization, the plaintext alone), or
exits non-zero with the reason on stderr.
"""

import base64
import json
import struct
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def hkdf(salt, ikm, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def decrypt(ua_private, auth, body):
    # RFC 8188 §2.1: salt (16), rs (uint32), idlen (1), keyid (idlen).
    if len(body) < 21:
        fail("body shorter than the aes128gcm header")
    salt, rs, idlen = body[:16], struct.unpack(">I", body[16:20])[0], body[20]
    keyid = body[21:21 + idlen]
    records = body[21 + idlen:]
    if idlen != 65:
        fail("keyid is %d bytes, want the 65-byte sender public key (RFC 8291 §4)" % idlen)
    if rs < 18:
        fail("record size %d" % rs)
    as_public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), keyid)
    ua_public = ua_private.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    shared = ua_private.exchange(ec.ECDH(), as_public)
    # RFC 8291 §3.4.
    ikm = hkdf(auth, shared, b"WebPush: info\x00" + ua_public + keyid, 32)
    cek = hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
    nonce = hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
    out = b""
    seq = 0
    for i in range(0, len(records), rs):
        rec = records[i:i + rs]
        n = (int.from_bytes(nonce, "big") ^ seq).to_bytes(12, "big")
        try:
            plain = AESGCM(cek).decrypt(n, rec, None)
        except Exception as e:  # InvalidTag: not what a browser would accept
            fail("record %d does not decrypt: %r" % (seq, e))
        last = i + rs >= len(records)
        plain = plain.rstrip(b"\x00")
        if not plain:
            fail("record %d has no padding delimiter" % seq)
        delim = plain[-1]
        if delim != (2 if last else 1):
            fail("record %d ends with delimiter %d, want %d" % (seq, delim, 2 if last else 1))
        out += plain[:-1]
        seq += 1
    return out


def verify_vapid(authorization):
    # RFC 8292 §3: Authorization: vapid t=<JWT>, k=<public key>.
    scheme, _, params = authorization.partition(" ")
    if scheme.lower() != "vapid":
        fail("authorization scheme %r, want vapid" % scheme)
    fields = {}
    for p in params.split(","):
        k, _, v = p.strip().partition("=")
        fields[k] = v
    if "t" not in fields or "k" not in fields:
        fail("authorization lacks t= or k=")
    pub = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(fields["k"]))
    h, c, s = fields["t"].split(".")
    header = json.loads(b64d(h))
    if header.get("alg") != "ES256":
        fail("JWT alg %r, want ES256" % header.get("alg"))
    sig = b64d(s)
    if len(sig) != 64:
        fail("ES256 signature of %d bytes, want 64 (r || s)" % len(sig))
    der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
    try:
        pub.verify(der, (h + "." + c).encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        fail("the VAPID JWT's signature does not verify with k=")
    return header, json.loads(b64d(c)), fields["k"]


def main():
    req = json.load(sys.stdin)
    d = int.from_bytes(b64d(req["ua_private"]), "big")
    ua_private = ec.derive_private_key(d, ec.SECP256R1())
    plain = decrypt(ua_private, b64d(req["auth"]), b64d(req["body"]))
    out = {"plaintext": plain.decode("utf-8")}
    if "authorization" in req:
        out["jwt_header"], out["claims"], out["k"] = verify_vapid(req["authorization"])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
