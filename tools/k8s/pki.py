"""The test cluster's certificates (a throwaway CA, serving and client certs, the service
account key pair) and the kubeconfigs that use them."""

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

try:
    from . import node_config
except ImportError:  # run as a script from tools/k8s
    import node_config


def _key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _cert(subject_cn, key, issuer_cert=None, issuer_key=None, org=None, ca=False,
          server=False, client=False, sans=()):
    name_attrs = [x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)]
    if org:
        name_attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    subject = x509.Name(name_attrs)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    usages = []
    if server:
        usages.append(x509.ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(x509.ExtendedKeyUsageOID.CLIENT_AUTH)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    if sans:
        entries = []
        for san in sans:
            try:
                entries.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                entries.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(entries), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _write_key(path, key):
    with open(path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.TraditionalOpenSSL,
                                   serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _write_cert(path, cert):
    with open(path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))


NODE_CERTS = (  # (file name, _cert arguments) of the real node's certificates
    ("kubelet", dict(subject_cn=node_config.NODE_NAME, server=True, sans=(node_config.NODE_IP,))),
    ("kubelet-client", dict(subject_cn=f"system:node:{node_config.NODE_NAME}", org="system:nodes", client=True)),
    ("kube-proxy", dict(subject_cn="system:kube-proxy", client=True)),
    ("coredns", dict(subject_cn="system:coredns", client=True)),
)


def make_pki(pki_dir, real_node=False):
    """Write CA, apiserver/kwok serving certs, admin client cert and SA key pair
    (with real_node also the kubelet's serving and client certs, kube-proxy's and CoreDNS's).

    Returns a dict of file paths. Existing files are reused.
    """
    os.makedirs(pki_dir, exist_ok=True)
    names = ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key",
             "kwok.crt", "kwok.key", "sa.key", "sa.pub"]
    if real_node:
        names += [f"{name}.{ext}" for name, _ in NODE_CERTS for ext in ("crt", "key")]
    paths = {name: os.path.join(pki_dir, name) for name in names}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    ca_key = _key()
    ca = _cert("paddlecloud-test-ca", ca_key, ca=True)
    _write_key(paths["ca.key"], ca_key)
    _write_cert(paths["ca.crt"], ca)
    sans = ("127.0.0.1", "localhost", node_config.NODE_IP, node_config.KUBERNETES_SERVICE_IP, "kubernetes",
            "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
    certs = [("apiserver", dict(subject_cn="kube-apiserver", server=True, sans=sans)),
             ("kwok", dict(subject_cn="kwok", server=True, sans=("127.0.0.1", "localhost"))),
             ("admin", dict(subject_cn="admin", org="system:masters", client=True))]
    if real_node:
        certs += NODE_CERTS
    for name, kwargs in certs:
        key = _key()
        _write_key(paths[name + ".key"], key)
        _write_cert(paths[name + ".crt"], _cert(key=key, issuer_cert=ca, issuer_key=ca_key, **kwargs))
    sa_key = _key()
    _write_key(paths["sa.key"], sa_key)
    with open(paths["sa.pub"], "wb") as fh:
        fh.write(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return paths


def client_cert(paths, name, subject_cn, org=None):
    """Issue a client certificate from the cluster's CA (`paths`: make_pki's dict) next to its
    other files as <name>.crt/.key, for a component started later (tools/k8s/netpol.py);
    returns (cert path, key path). An existing pair is reused."""
    pki_dir = os.path.dirname(paths["ca.crt"])
    cert_path, key_path = os.path.join(pki_dir, f"{name}.crt"), os.path.join(pki_dir, f"{name}.key")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        return cert_path, key_path
    with open(paths["ca.crt"], "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    with open(paths["ca.key"], "rb") as fh:
        ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    key = _key()
    _write_key(key_path, key)
    _write_cert(cert_path, _cert(subject_cn, key, issuer_cert=ca, issuer_key=ca_key, org=org, client=True))
    return cert_path, key_path


def kubeconfig_dict(server, ca_path, cert_path, key_path, name="paddlecloud-test"):
    """An admin kubeconfig with absolute file references."""
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": ca_path}}],
        "users": [{"name": "admin", "user": {"client-certificate": cert_path, "client-key": key_path}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin", "namespace": "default"}}],
    }


def serving_pki(ca_cn, cn, sans):
    """A fresh CA and a serving certificate it signs, for a component outside make_pki's
    set (Kueue's webhook and metrics servers): returns PEM bytes (ca_crt, tls_crt, tls_key)."""
    ca_key = _key()
    ca = _cert(ca_cn, ca_key, ca=True)
    key = _key()
    cert = _cert(cn, key, issuer_cert=ca, issuer_key=ca_key, server=True, sans=sans)
    return (ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()))
