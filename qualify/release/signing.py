"""Keys and signatures: the EC P-256 keys a run signs with and the gate verifies with, the DSSE signature
of a statement, and the OpenSSF model-signing bundle of a checkpoint folder.

Keys are read from PEM files (a private key for the run, the public key for the gate) and are
EC P-256 only; an error never quotes key material. A key's one identifier is securesystemslib's
default keyid (:func:`key_fingerprint`), the one the run, the card and the gate print. What is
signed, the statement, and how an envelope is read and verified are
:mod:`qualify.release.attestation`'s.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualify.checkpoint.files import EVIDENCE_PATHS, MODEL_CARD, is_never_loaded, list_checkpoint_files
from qualify.errors import AttestationError, HarnessError, JsonProblem, SigningKeyError
from qualify.util.jsonio import parse_strict

PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: CI's secret store hands the key over as a file; this variable names it.
SIGN_KEY_ENV = "QUALIFY_SIGN_KEY"
#: The passphrase of an encrypted signing key, when it is one (never logged).
SIGN_KEY_PASSWORD_ENV = "QUALIFY_SIGN_KEY_PASSWORD"


# ---------------------------------------------------------------- keys

def key_fingerprint(public_key: Any) -> str:
    """The key's one identifier: securesystemslib's default keyid (the hex sha256 of the key's canonical JSON).

    The DSSE signature names its signer by it, and the run, the card and the gate print it, so an
    envelope verified by any securesystemslib-based tool names the key as qualify does.
    """
    from securesystemslib.signer import SSlibKey

    return str(SSlibKey.from_crypto(public_key).keyid)


def _require_one_pem_block(data: bytes, path: Path, what: str) -> None:
    # cryptography loads the first PEM block and ignores the rest: a file holding two keys would be checked
    # with one of them while a reader of the file may take it for the other.
    blocks = data.count(b"-----BEGIN ")
    if blocks > 1:
        raise SigningKeyError(f"{path}: {blocks} PEM blocks; the {what} file must hold exactly one key")


def _require_p256(key: Any, path: Path, what: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        raise SigningKeyError(f"{path}: not an elliptic-curve {what} (an EC P-256 key in PEM is required)")
    if not isinstance(key.curve, ec.SECP256R1):
        raise SigningKeyError(f"{path}: an EC key on curve {key.curve.name}; EC P-256 (secp256r1) is required")


@dataclass(frozen=True)
class SigningKey:
    """A loaded EC P-256 private key and where it came from (the path model-signing reads again)."""

    private_key: Any = field(repr=False)
    path: Path
    password: str | None = field(default=None, repr=False)

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.private_key.public_key())


def load_signing_key(path: Path, password: str | None = None) -> SigningKey:
    """An EC P-256 private key from a PEM file (PKCS#8 or SEC1).

    Raises:
        SigningKeyError: the file is missing or unreadable, not a PEM private key, encrypted
            without the right passphrase, or not EC P-256. The message never holds key material.
    """
    from cryptography.hazmat.primitives import serialization

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read the signing key: {exc.strerror or exc}") from None
    _require_one_pem_block(data, path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=password.encode() if password else None)
    except TypeError:
        raise SigningKeyError(f"{path}: the signing key is encrypted; give its passphrase in "
                              f"${SIGN_KEY_PASSWORD_ENV}") from None
    except ValueError:
        # cryptography's message may quote the PEM; ours never does.
        raise SigningKeyError(f"{path}: not a PEM private key (or the passphrase is wrong); an EC P-256 private "
                              "key in PEM is required") from None
    _require_p256(key, path, "private key")
    return SigningKey(key, path, password)


def load_verify_key(path: Path) -> Any:
    """An EC P-256 public key from a PEM file (SubjectPublicKeyInfo).

    Raises:
        SigningKeyError: missing or unreadable, not a PEM public key, or not EC P-256.
    """
    from cryptography.hazmat.primitives import serialization

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read the verify key: {exc.strerror or exc}") from None
    if b"PRIVATE KEY" in data:
        raise SigningKeyError(f"{path}: a private key; the gate takes the public key only (openssl ec -pubout)")
    _require_one_pem_block(data, path, "verify key")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise SigningKeyError(f"{path}: not a PEM public key; an EC P-256 public key in PEM is required") from None
    _require_p256(key, path, "public key")
    return key


def signing_key_from_env(environ: Mapping[str, str] | None = None) -> Path | None:
    """The key file ``$QUALIFY_SIGN_KEY`` names, if it names one."""
    value = (os.environ if environ is None else environ).get(SIGN_KEY_ENV, "").strip()
    return Path(value) if value else None


def sslib_key(public_key: Any) -> Any:
    from securesystemslib.signer import SSlibKey

    # securesystemslib's default keyid: the one identifier the card, the gate and any verifier share.
    return SSlibKey.from_crypto(public_key)


# ---------------------------------------------------------------- signing

def sign_statement(statement: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """The DSSE envelope (as a dict) of ``statement``, signed with ``key``."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(key.private_key, sslib_key(key.private_key.public_key())))
    return envelope.to_dict()


def sign_model(checkpoint: Path, key: SigningKey, out: Path) -> dict[str, Any]:
    """Sign the checkpoint folder in the OpenSSF model-signing format (offline, the same EC key).

    Returns ``{"file", "sha256", "root_digest"}``: the bundle's name, its sha256 and the root
    digest its statement names the model by.

    Raises:
        HarnessError: model-signing is not installed, or it could not sign.
    """
    try:
        from model_signing import signing
    except ImportError as exc:
        raise HarnessError(f"--sign-model needs the model-signing package ({exc}); install qualify[sign]") from None
    try:
        from model_signing import hashing

        # A hub snapshot's files are symlinks into the cache's blobs; the bytes signed are the targets'.
        # The files no runtime loads (the model card, images, licences) are left out, as the gate leaves
        # them out: the card's validation section is written into README.md after qualification.
        # The card and the evidence a release publishes beside the weights are named whether they are here
        # or not: the bundle's signed list of ignored paths lets the standard tool verify the published repo.
        ignored = sorted({*(rel for rel in list_checkpoint_files(checkpoint) if is_never_loaded(rel)),
                          MODEL_CARD, *EVIDENCE_PATHS})
        config = signing.Config().set_hashing_config(
            hashing.Config().set_allow_symlinks(True).set_ignored_paths(paths=ignored))
        tmp = out.with_name(f".{out.name}.tmp")
        config.use_elliptic_key_signer(private_key=key.path, password=key.password).sign(checkpoint, tmp)
        os.replace(tmp, out)
        data = out.read_bytes()
        bundle = parse_strict(data.decode("utf-8"), 0)
        statement = parse_strict(base64.b64decode(bundle["dsseEnvelope"]["payload"]).decode("utf-8"), 0)
        root = statement["subject"][0]["digest"]["sha256"]
    except (OSError, ValueError, KeyError, IndexError, TypeError, JsonProblem) as exc:
        raise HarnessError(f"model-signing could not sign {checkpoint}: {type(exc).__name__}: {exc}") from None
    return {"file": out.name, "sha256": hashlib.sha256(data).hexdigest(), "root_digest": root}


def verify_model_signature(checkpoint: Path, bundle: Path, public_key: Path) -> None:
    """Verify an OpenSSF model-signing bundle against the checkpoint folder with the release key.

    The attestation's subjects are the files the manifest lists; the model signature covers
    every file of the folder, so a file added after signing (one the manifest need not list,
    a README say) is caught here and nowhere else.

    Raises:
        AttestationError: the bundle is not signed by ``public_key`` or the folder's files are
            not the ones it names (the files that differ are named).
    """
    try:
        from model_signing import hashing, verifying
    except ImportError as exc:
        raise AttestationError(f"verifying {bundle} needs the model-signing package ({exc}); "
                               "install qualify[sign]") from None
    # Files the signature does not name are left to the attestation's subjects (a file a runtime loads
    # that no one signed is refused there); the ones it names must be byte for byte the signed ones.
    # A downloaded release is a hub cache snapshot, its files links into the blobs (where the gate has
    # checked they stay): followed as signing followed them. model-signing's configuration guessed from
    # the bundle would refuse every link, whatever the bundle says.
    config = (verifying.Config().use_elliptic_key_verifier(public_key=public_key)
              .set_hashing_config(hashing.Config().set_allow_symlinks(True)).set_ignore_unsigned_files(True))
    try:
        config.verify(checkpoint, bundle)
    except Exception as exc:  # model-signing raises ValueError, its protobuf and crypto layers their own
        # Its mismatch message quotes raw digests; the files it names are what a reader acts on.
        # (The list in its message is a repr: a quote inside may come escaped.)
        changed = re.findall(r"Hash mismatch for \\?'([^'\\]*)\\?'", str(exc))
        missing = re.findall(r"Missing files in model \\?'[^']*\\?': ([^\"'\]\\]*)", str(exc))
        parts = ([f"changed after signing: {', '.join(changed)}"] if changed else []) + (
            [f"missing: {', '.join(missing)}"] if missing else [])
        detail = "; ".join(parts) if parts else f"{type(exc).__name__}: {exc}"
        raise AttestationError(f"the model signature {bundle} does not verify against {checkpoint} with this key "
                               f"({detail[:500]})") from None
