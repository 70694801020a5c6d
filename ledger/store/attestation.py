"""Signed provenance: an in-toto Statement of a receipt wrapped in a DSSE envelope, and its verification.

Signing and envelope handling are securesystemslib's (the in-toto project's library): ``attest --sign KEY``
signs the Statement with a PEM private key (Ed25519, ECDSA or RSA); ``verify --attestation FILE --key PUB``
checks the signature with the matching PEM public key, then every subject's sha256 against the files under
the ledger. A bare Statement (unsigned) is accepted for the digest check only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.errors import BadInput, MissingExtra
from ledger.store.integrity import sha256_file
from ledger.store.layout import ID_RE, is_shard_dir
from ledger.store.receipts import Ledger

PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""The DSSE payload type of in-toto Statements."""


def _sslib() -> Any:
    try:
        import securesystemslib.dsse as dsse
        import securesystemslib.signer as signer
    except ImportError as exc:  # pragma: no cover - the extra is installed by `make test`
        raise MissingExtra("securesystemslib", "sign") from exc
    return dsse, signer


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def sign(statement: dict[str, Any], key_path: Path) -> dict[str, Any]:
    """The Statement as a signed DSSE envelope (``payload``, ``payloadType``, ``signatures``)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    dsse, signer = _sslib()
    try:
        private = load_pem_private_key(_read(key_path, "key"), password=None)
        crypto_signer = signer.CryptoSigner(private)
    except (ValueError, TypeError) as exc:
        raise BadInput(f"{key_path}: not an unencrypted PEM private key (Ed25519, ECDSA or RSA): {exc}") from exc
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = dsse.Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(crypto_signer)
    return dict(envelope.to_dict())


def verify(ledger: Ledger, attestation: Path, key_path: Path | None) -> tuple[list[str], list[str]]:
    """(problems, notes) of an attestation file: the envelope's signature (when ``key_path`` is given),
    then every subject digest against the ledger's files."""
    try:
        data = json.loads(_read(attestation, "attestation"))
    except ValueError as exc:
        raise BadInput(f"{attestation}: not JSON: {exc}") from exc
    problems: list[str] = []
    notes: list[str] = []
    if isinstance(data, dict) and "payload" in data and "signatures" in data:
        dsse, signer = _sslib()
        try:
            envelope = dsse.Envelope.from_dict(data)
        except Exception as exc:  # securesystemslib raises several types for malformed envelopes
            raise BadInput(f"{attestation}: not a DSSE envelope: {exc}") from exc
        if envelope.payload_type != PAYLOAD_TYPE:
            problems.append(f"payload type {envelope.payload_type!r}, expected {PAYLOAD_TYPE!r}")
        if key_path is None:
            notes.append("signature not checked: give the signer's public key with --key PUB")
        else:
            from cryptography.hazmat.primitives.serialization import load_pem_public_key

            try:
                key = signer.SSlibKey.from_crypto(load_pem_public_key(_read(key_path, "key")))
            except (ValueError, TypeError) as exc:
                raise BadInput(f"{key_path}: not a PEM public key: {exc}") from exc
            try:
                envelope.verify([key], 1)
                notes.append(f"signature verified with key {key.keyid[:16]}")
            except Exception as exc:  # VerificationError: no valid signature by this key
                problems.append(f"signature does not verify with {key_path}: {exc}")
        try:
            statement = json.loads(envelope.payload)
        except ValueError as exc:
            return problems + [f"payload is not JSON: {exc}"], notes
    else:
        statement = data
        notes.append("an unsigned Statement: digests checked, no signature")
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    if not isinstance(subjects, list) or not subjects:
        return problems + ["the Statement has no subjects"], notes
    for subject in subjects:
        name = str(subject.get("name", ""))
        want = (subject.get("digest") or {}).get("sha256")
        path = _subject_path(ledger, name)
        if ".." in Path(name).parts or Path(name).is_absolute():
            problems.append(f"{name}: subject outside the ledger")
        elif not path.is_file():
            problems.append(f"{name}: missing")
        elif sha256_file(path) != want:
            problems.append(f"{name}: sha256 does not match the attested digest")
    return problems, notes


def _subject_path(ledger: Ledger, name: str) -> Path:
    """A subject's file: ``<id>/<file>`` or ``<shard>/<id>/<file>`` under the ledger, found in either layout
    (a statement made before a receipt moved into its shard still checks)."""
    parts = Path(name).parts
    for i in (0, 1):
        if len(parts) > i + 1 and ID_RE.match(parts[i]) and (i == 0 or is_shard_dir(parts[0])):
            return ledger.path(parts[i]).joinpath(*parts[i + 1 :])
    return ledger.root / name
