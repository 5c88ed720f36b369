"""Tests for qualify.release.signing: the key's one identifier, keys that cannot be used named without
quoting them, and the key file named by the environment."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from qualify.errors import SigningKeyError
from qualify.release import signing as sig
from tests.helpers import write_key


def test_the_fingerprint_is_securesystemslibs_default_keyid(tmp_path):
    """One key identifier convention: the one securesystemslib computes by default (sha256 of the canonical JSON
    of keytype, scheme and public key), so any securesystemslib verifier names the signer as qualify does."""
    from securesystemslib.formats import encode_canonical

    priv, pub = write_key(tmp_path, "k")
    key = sig.load_verify_key(pub)
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    canonical = {"keytype": "ecdsa", "scheme": "ecdsa-sha2-nistp256", "keyval": {"public": pem}}
    assert sig.key_fingerprint(key) == hashlib.sha256(encode_canonical(canonical).encode()).hexdigest()
    assert sig.load_signing_key(priv).fingerprint == sig.key_fingerprint(key)


def test_keys_that_cannot_be_used_are_named(tmp_path):
    p384, p384_pub = write_key(tmp_path, "p384", ec.SECP384R1())
    locked, _ = write_key(tmp_path, "locked", password=b"s3cret-passphrase")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    cases = [
        (lambda: sig.load_signing_key(tmp_path / "missing.pem"), "cannot read the signing key"),
        (lambda: sig.load_signing_key(p384), "curve secp384r1; EC P-256 (secp256r1) is required"),
        (lambda: sig.load_verify_key(p384_pub), "curve secp384r1"),
        (lambda: sig.load_signing_key(locked), f"encrypted; give its passphrase in ${sig.SIGN_KEY_PASSWORD_ENV}"),
        (lambda: sig.load_signing_key(locked, "wrong"), "or the passphrase is wrong"),
        (lambda: sig.load_signing_key(garbage), "not a PEM private key"),
        (lambda: sig.load_verify_key(locked), "a private key; the gate takes the public key only"),
    ]
    for call, words in cases:
        with pytest.raises(SigningKeyError) as info:
            call()
        assert words in str(info.value)
        assert "s3cret" not in str(info.value)
    assert len(sig.load_signing_key(locked, "s3cret-passphrase").fingerprint) == 64


def test_a_key_file_holding_two_keys_is_refused(tmp_path):
    """cryptography loads a file's first PEM block and ignores the rest: a verify-key file of two public keys
    would verify with the first while its reader may believe the second. One key a file, or refused."""
    priv_a, pub_a = write_key(tmp_path, "a")
    priv_b, pub_b = write_key(tmp_path, "b")
    both_pub = tmp_path / "both.pub.pem"
    both_pub.write_bytes(pub_a.read_bytes() + pub_b.read_bytes())
    both_priv = tmp_path / "both.pem"
    both_priv.write_bytes(priv_b.read_bytes() + priv_a.read_bytes())
    with pytest.raises(SigningKeyError, match="2 PEM blocks; the verify key file must hold exactly one key"):
        sig.load_verify_key(both_pub)
    with pytest.raises(SigningKeyError, match="2 PEM blocks; the signing key file must hold exactly one key"):
        sig.load_signing_key(both_priv)
    assert sig.key_fingerprint(sig.load_verify_key(pub_a)) != sig.key_fingerprint(sig.load_verify_key(pub_b))


def test_the_key_file_may_come_from_the_environment():
    assert sig.signing_key_from_env({sig.SIGN_KEY_ENV: " /secrets/release.pem "}) == Path("/secrets/release.pem")
    assert sig.signing_key_from_env({sig.SIGN_KEY_ENV: ""}) is None
    assert sig.signing_key_from_env({}) is None


# ---------------------------------------------------------------- the envelope (fast)


def test_a_statement_is_signed_as_a_dsse_envelope_named_by_the_keys_fingerprint(tmp_path):
    """The payload is the statement's canonical JSON (sorted keys, no spaces), and the signature names its key."""
    priv, _ = write_key(tmp_path, "k")
    key = sig.load_signing_key(priv)
    statement = {"_type": "x", "b": 1, "a": [1.5]}
    envelope = sig.sign_statement(statement, key)
    assert envelope["payloadType"] == sig.PAYLOAD_TYPE == "application/vnd.in-toto+json"
    assert base64.b64decode(envelope["payload"]) == b'{"_type":"x","a":[1.5],"b":1}'
    assert [s["keyid"] for s in envelope["signatures"]] == [key.fingerprint]
