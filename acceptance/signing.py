"""The controller's Ed25519 key, and the signature it puts on each evidence manifest.

A manifest that lists every file's sha256 proves only that a bundle agrees with itself:
whoever rewrites a file can re-hash the manifest too. A signature by a key that only the
controller holds anchors the bundle outside itself: an auditor given the public key
(``racklife evidence key``) can check a bundle anywhere, without the store. The key
lives in the controller's state directory as PKCS#8 PEM, mode 0600, created on first use;
a key file that others can read is refused rather than used, because a signature by a key
anyone may have copied proves nothing.

The signature covers the manifest's canonical body, the same bytes its digest is taken
of, and is kept beside it in ``manifest.sig`` (JSON: algorithm, key id, digest,
signature), which the manifest does not list.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_FILE = "evidence-signing-key.pem"
SIGNATURE = "manifest.sig"
SCHEMA = "racklife.evidence.signature"
ALGORITHM = "ed25519"


class SigningError(ValueError):
    """A key that cannot be created, read or trusted; a public key or signature file that does not parse."""


def key_id(public: Ed25519PublicKey) -> str:
    """A short name for a key: sha256 of its raw 32 bytes, first 16 hex digits."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(serialization.Encoding.PEM,
                               serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A public key as ``racklife evidence key`` prints it (PEM SubjectPublicKeyInfo)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningError(f"cannot read public key {path}: {exc.strerror}") from exc
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise SigningError(f"{path} is not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


@dataclass(frozen=True)
class ControllerKey:
    """The private key file in the controller's state directory."""

    state_dir: Path

    @property
    def path(self) -> Path:
        return self.state_dir / KEY_FILE

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self, *, create: bool = False) -> Ed25519PrivateKey:
        """The key; with ``create``, a new one when there is none (written 0600, never overwritten)."""
        if not self.path.exists() and create:
            self._create()
        try:
            st = self.path.lstat()
        except OSError as exc:
            raise SigningError(f"no evidence signing key at {self.path}: {exc.strerror}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise SigningError(f"{self.path} is not a regular file")
        if st.st_mode & 0o077:
            raise SigningError(f"{self.path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                               "a shared key proves nothing: chmod 600 it or remove it")
        try:
            key = serialization.load_pem_private_key(self.path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise SigningError(f"{self.path} is not a readable PEM private key: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(f"{self.path} holds a {type(key).__name__}, not an Ed25519 key")
        return key

    def _create(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return  # another process created it first: use theirs
        except OSError as exc:
            raise SigningError(f"cannot create {self.path}: {exc.strerror}") from exc
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)


def sign(private: Ed25519PrivateKey, body: bytes, digest: str) -> dict[str, str]:
    """The ``manifest.sig`` document for a manifest body (its canonical bytes) and digest."""
    public = private.public_key()
    return {"schema": SCHEMA, "algorithm": ALGORITHM, "key_id": key_id(public), "manifest_sha256": digest,
            "signature": base64.b64encode(private.sign(body)).decode("ascii")}


def write_signature(root: Path, doc: dict[str, str]) -> None:
    (root / SIGNATURE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def check_signature(root: Path, body: bytes, public: Ed25519PublicKey) -> str | None:
    """None when ``manifest.sig`` is a valid signature of ``body`` by ``public``; else why not."""
    path = root / SIGNATURE
    if path.is_symlink() or not path.is_file():
        return f"{SIGNATURE} is missing: the bundle is not signed"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{SIGNATURE} is not JSON: {exc}"
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("algorithm") != ALGORITHM:
        return f"{SIGNATURE} is not a {SCHEMA} ({ALGORITHM}) document"
    want = key_id(public)
    if doc.get("key_id") != want:
        return f"signed by key {doc.get('key_id')!r}, not by the trusted key {want}"
    try:
        signature = base64.b64decode(str(doc.get("signature", "")), validate=True)
    except (binascii.Error, ValueError):
        return f"{SIGNATURE}: the signature is not base64"
    try:
        public.verify(signature, body)
    except InvalidSignature:
        return f"the signature by key {want} does not match the manifest: the manifest was changed after signing"
    return None
