"""The simulated cluster's certificate authority: serving certs, client certs, CSR signing.

One ``Authority`` per ``State``: apiservers that share a state share the CA, so a
client certificate or a trust bundle valid for one is valid for the other, as
with two real apiservers of one cluster. Keys are ECDSA P-256 (fast to make,
accepted by Go's and Python's TLS stacks).

Dangers: the private keys are returned as PEM bytes and written to the sim's
workdir with mode 0600; never log them.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The names a real apiserver certificate carries, so in-cluster clients that
# dial "kubernetes.default.svc" or the service VIP also verify against the sim.
DEFAULT_SERVING_NAMES = (
    "localhost",
    "127.0.0.1",
    "::1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.96.0.1",
)

_ONE_DAY = datetime.timedelta(days=1)


class CertificateError(ValueError):
    """A CSR that cannot be signed (unparseable PEM, bad signature)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _subject(cn: str, orgs: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


@dataclasses.dataclass(frozen=True, slots=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, common_name: str = "simapiserver-ca") -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _subject(common_name)
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _ONE_DAY)
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(key=key, cert=cert)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> Authority:
        """The authority whose PEM certificate and key were written earlier (``key_pem``)."""
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateError("the CA key is not an ECDSA key")
        return cls(key=key, cert=x509.load_pem_x509_certificate(cert_pem))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA's private key (PKCS#8 PEM), for a signer that runs elsewhere (the real
        controller-manager's CSR signer). Never log it."""
        return _key_pem(self.key)

    def _sign(
        self,
        subject: x509.Name,
        public_key: ec.EllipticCurvePublicKey | object,
        *,
        usages: Sequence[x509.ObjectIdentifier],
        names: Iterable[str] = (),
        lifetime: datetime.timedelta = datetime.timedelta(days=365),
    ) -> x509.Certificate:
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(public_key)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + lifetime)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        names = list(names)
        if names:
            builder = builder.add_extension(_san(names), critical=False)
        return builder.sign(self.key, hashes.SHA256())

    def issue_serving(self, names: Iterable[str]) -> tuple[bytes, bytes]:
        """A serving certificate (PEM cert, PEM key) for ``names`` (DNS names or IPs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._sign(
            _subject("kube-apiserver"),
            key.public_key(),
            usages=[ExtendedKeyUsageOID.SERVER_AUTH],
            names=names,
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def issue_client(
        self,
        cn: str,
        orgs: Iterable[str] = (),
        *,
        lifetime: datetime.timedelta = datetime.timedelta(days=365),
    ) -> tuple[bytes, bytes]:
        """A client certificate (PEM cert, PEM key): CN is the user, each O a group. A negative
        ``lifetime`` gives an already expired certificate (rotation tests)."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._sign(
            _subject(cn, orgs),
            key.public_key(),
            usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
            lifetime=lifetime,
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def sign_request(
        self,
        csr_pem: bytes,
        *,
        usages: Iterable[str] = ("client auth",),
        lifetime: datetime.timedelta = datetime.timedelta(days=365),
    ) -> bytes:
        """Sign a PKCS#10 request as the CSR signer controller does; returns the PEM cert."""
        try:
            csr = x509.load_pem_x509_csr(csr_pem)
        except ValueError as e:
            raise CertificateError(f"cannot parse the certificate request: {e}") from e
        if not csr.is_signature_valid:
            raise CertificateError("the certificate request signature does not verify")
        ekus = []
        for usage in usages:
            if usage == "client auth":
                ekus.append(ExtendedKeyUsageOID.CLIENT_AUTH)
            elif usage == "server auth":
                ekus.append(ExtendedKeyUsageOID.SERVER_AUTH)
        names: list[str] = []
        try:
            san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = [str(v) for v in san.get_values_for_type(x509.DNSName)]
            names += [str(v) for v in san.get_values_for_type(x509.IPAddress)]
        except x509.ExtensionNotFound:
            pass
        cert = self._sign(
            csr.subject,
            csr.public_key(),
            usages=ekus or [ExtendedKeyUsageOID.CLIENT_AUTH],
            names=names,
            lifetime=lifetime,
        )
        return cert.public_bytes(serialization.Encoding.PEM)


def signing_key_pair() -> tuple[bytes, bytes]:
    """A fresh (private PKCS#8 PEM, public SubjectPublicKeyInfo PEM) ECDSA P-256 pair, e.g. for
    the ServiceAccount token signer of a real apiserver (ES256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


def subject_of(cert_pem: bytes) -> tuple[str, list[str]]:
    """(CN, [O...]) of a PEM certificate."""
    return _subject_parts(x509.load_pem_x509_certificate(cert_pem))


def subject_of_der(cert_der: bytes) -> tuple[str, list[str]]:
    """(CN, [O...]) of a DER certificate (what the TLS layer hands out)."""
    return _subject_parts(x509.load_der_x509_certificate(cert_der))


def _subject_parts(cert: x509.Certificate) -> tuple[str, list[str]]:
    cn = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return (cn[0] if cn else "", orgs)
