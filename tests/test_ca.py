"""The offline CA (deaddrop.transport.ca) and its deaddrop-admin commands."""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from twisted.trial import unittest

from deaddrop.transport import ca
from deaddrop.admin import cli
from deaddrop.transport.ca import CAError


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _cert(path: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


class CATests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = os.path.abspath(self.mktemp())
        os.makedirs(self.tmp)
        self.ca_dir = os.path.join(self.tmp, "ca")

    def out(self, name: str) -> str:
        return os.path.join(self.tmp, name)

    def test_init_writes_a_private_ca(self) -> None:
        r = ca.init_ca(self.ca_dir)
        self.assertEqual(_mode(self.ca_dir), 0o700)
        self.assertEqual(_mode(os.path.join(self.ca_dir, ca.CA_KEY)), 0o600)
        cert = _cert(r["ca_cert"])
        self.assertTrue(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
        self.assertEqual(format(cert.serial_number, "x"), r["serial"])
        key = load_pem_private_key(Path(self.ca_dir, ca.CA_KEY).read_bytes(), None)
        self.assertIsInstance(key, ec.EllipticCurvePrivateKey)
        self.assertEqual(key.public_key(), cert.public_key())
        state = json.loads(Path(self.ca_dir, ca.STATE).read_text())
        self.assertEqual(state["certs"], [])
        crl = x509.load_pem_x509_crl(Path(r["crl"]).read_bytes())
        self.assertTrue(crl.is_signature_valid(cert.public_key()))
        self.assertEqual(len(crl), 0)

    def test_init_ed25519_and_unique_names(self) -> None:
        ca.init_ca(self.ca_dir, "ed25519")
        ca.init_ca(self.out("ca2"))
        key = load_pem_private_key(Path(self.ca_dir, ca.CA_KEY).read_bytes(), None)
        self.assertIsInstance(key, ed25519.Ed25519PrivateKey)
        subjects = {_cert(os.path.join(d, ca.CA_CERT)).subject for d in (self.ca_dir, self.out("ca2"))}
        self.assertEqual(len(subjects), 2)

    def test_init_refuses_to_overwrite(self) -> None:
        ca.init_ca(self.ca_dir)
        key_before = Path(self.ca_dir, ca.CA_KEY).read_bytes()
        e = self.assertRaises(CAError, ca.init_ca, self.ca_dir)
        self.assertIn("refusing to overwrite", str(e))
        self.assertEqual(Path(self.ca_dir, ca.CA_KEY).read_bytes(), key_before)

    def test_init_bad_paths_and_algorithm(self) -> None:
        Path(self.out("file")).write_text("x")
        self.assertIn("not a directory", str(self.assertRaises(CAError, ca.init_ca, self.out("file"))))
        self.assertIn("cannot create", str(self.assertRaises(CAError, ca.init_ca, self.out("file/ca"))))
        os.mkdir(self.out("shared"), 0o755)
        os.chmod(self.out("shared"), 0o755)
        self.assertIn("other users", str(self.assertRaises(CAError, ca.init_ca, self.out("shared"))))
        self.assertEqual(_mode(self.out("shared")), 0o755)  # left alone
        self.assertIn("unknown algorithm", str(self.assertRaises(CAError, ca.init_ca, self.ca_dir, "rsa")))

    def test_issue_with_password(self) -> None:
        ca.init_ca(self.ca_dir)
        r = ca.issue_client_cert(self.ca_dir, "alice", self.out("alice.p12"), b"correct horse")
        self.assertFalse(r["password_generated"])
        self.assertNotIn("password", r)
        self.assertRaises(ValueError, pkcs12.load_key_and_certificates, Path(r["p12"]).read_bytes(), b"wrong")
        key, cert, _ = pkcs12.load_key_and_certificates(Path(r["p12"]).read_bytes(), b"correct horse")
        ca_cert = _cert(os.path.join(self.ca_dir, ca.CA_CERT))
        cert.verify_directly_issued_by(ca_cert)
        self.assertEqual(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value, "alice")
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        self.assertEqual(list(eku), [ExtendedKeyUsageOID.CLIENT_AUTH])
        self.assertEqual(format(cert.serial_number, "x"), r["serial"])
        self.assertEqual(key.public_key(), cert.public_key())
        # Only the .p12 by default (issue 10): no unprotected key beside it.
        self.assertEqual(r["files"], [self.out("alice.p12")])
        self.assertNotIn("key_pem", r)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["alice.p12", "ca"])
        self.assertEqual(_mode(r["p12"]), 0o600)
        state = json.loads(Path(self.ca_dir, ca.STATE).read_text())
        self.assertEqual([(e["name"], e["serial"], e["revoked"]) for e in state["certs"]], [("alice", r["serial"], False)])

    def test_issue_p12_carries_the_ca(self) -> None:
        ca.init_ca(self.ca_dir)
        r = ca.issue_client_cert(self.ca_dir, "alice", self.out("alice.p12"), b"pw")
        _key, _cert_, extra = pkcs12.load_key_and_certificates(Path(r["p12"]).read_bytes(), b"pw")
        self.assertEqual(extra, [_cert(os.path.join(self.ca_dir, ca.CA_CERT))])

    def test_issue_pem_key_is_encrypted_with_the_same_password_and_named_after_out(self) -> None:
        ca.init_ca(self.ca_dir)
        r = ca.issue_client_cert(self.ca_dir, "alice", self.out("other.p12"), b"correct horse", pem=True)
        self.assertEqual(r["files"], [self.out("other.p12"), self.out("other.key.pem"), self.out("other.cert.pem")])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["ca", "other.cert.pem", "other.key.pem", "other.p12"])
        self.assertEqual(_mode(r["key_pem"]), 0o600)
        pem = Path(r["key_pem"]).read_bytes()
        self.assertIn(b"ENCRYPTED PRIVATE KEY", pem)
        self.assertRaises(TypeError, load_pem_private_key, pem, None)
        self.assertRaises(ValueError, load_pem_private_key, pem, b"wrong")
        key = load_pem_private_key(pem, b"correct horse")
        self.assertEqual(key.public_key(), _cert(r["cert_pem"]).public_key())

    def test_issue_generates_a_password_when_none_given(self) -> None:
        ca.init_ca(self.ca_dir)
        r = ca.issue_client_cert(self.ca_dir, "alice", self.out("alice.p12"), None)
        self.assertTrue(r["password_generated"])
        self.assertGreaterEqual(len(r["password"].split("-")), 4)
        key, cert, _ = pkcs12.load_key_and_certificates(Path(r["p12"]).read_bytes(), r["password"].encode())
        self.assertIsNotNone(key)
        r2 = ca.issue_client_cert(self.ca_dir, "bob", self.out("bob.p12"), None)
        self.assertNotEqual(r["password"], r2["password"])

    def test_issue_errors(self) -> None:
        e = self.assertRaises(CAError, ca.issue_client_cert, self.ca_dir, "alice", self.out("a.p12"), None)
        self.assertEqual(str(e), f"no CA in {self.ca_dir}: run deaddrop-admin ca init --ca-dir {self.ca_dir}")
        ca.init_ca(self.ca_dir)
        ca.issue_client_cert(self.ca_dir, "alice", self.out("alice.p12"), b"pw")
        e = self.assertRaises(CAError, ca.issue_client_cert, self.ca_dir, "alice", self.out("x/alice2.p12"), b"pw")
        self.assertIn("does not exist", str(e))
        e = self.assertRaises(CAError, ca.issue_client_cert, self.ca_dir, "alice", self.out("alice2.p12"), b"pw")
        self.assertIn("already has an active certificate", str(e))
        self.assertFalse(os.path.exists(self.out("alice2.p12")))
        for bad in ("../evil", "", "a b", "x" * 65):
            e = self.assertRaises(CAError, ca.issue_client_cert, self.ca_dir, bad, self.out("e.p12"), b"pw")
            self.assertIn("invalid name", str(e))
        # Existing output files are never overwritten.
        Path(self.out("carol.key.pem")).write_text("mine")
        e = self.assertRaises(CAError, ca.issue_client_cert, self.ca_dir, "carol", self.out("carol.p12"), b"pw",
                              pem=True)
        self.assertIn("refusing to overwrite", str(e))
        self.assertEqual(Path(self.out("carol.key.pem")).read_text(), "mine")
        state = json.loads(Path(self.ca_dir, ca.STATE).read_text())
        self.assertEqual([e["name"] for e in state["certs"]], ["alice"])

    def test_revoke_then_reissue_and_crl(self) -> None:
        ca.init_ca(self.ca_dir)
        first = ca.issue_client_cert(self.ca_dir, "alice", self.out("alice.p12"), b"pw")
        bob = ca.issue_client_cert(self.ca_dir, "bob", self.out("bob.p12"), b"pw")
        r = ca.revoke(self.ca_dir, "alice")
        self.assertEqual(r["serials"], [first["serial"]])
        self.assertIn("no unrevoked certificate", str(self.assertRaises(CAError, ca.revoke, self.ca_dir, "alice")))
        self.assertIn("no unrevoked certificate", str(self.assertRaises(CAError, ca.revoke, self.ca_dir, "nobody")))
        # A revoked name may be issued again; the old serial must stay on the CRL.
        os.mkdir(self.out("new"))
        second = ca.issue_client_cert(self.ca_dir, "alice", self.out("new/alice.p12"), b"pw")
        out = self.out("crl.pem")
        c1 = ca.write_crl(self.ca_dir, out)
        crl = x509.load_pem_x509_crl(Path(out).read_bytes())
        ca_cert = _cert(os.path.join(self.ca_dir, ca.CA_CERT))
        self.assertTrue(crl.is_signature_valid(ca_cert.public_key()))
        self.assertEqual(crl.issuer, ca_cert.subject)
        self.assertEqual({format(rc.serial_number, "x") for rc in crl}, {first["serial"]})
        self.assertIsNone(crl.get_revoked_certificate_by_serial_number(int(second["serial"], 16)))
        self.assertIsNone(crl.get_revoked_certificate_by_serial_number(int(bob["serial"], 16)))
        self.assertEqual(c1["count"], 1)
        c2 = ca.write_crl(self.ca_dir, out, next_update_days=7)
        self.assertGreater(c2["crl_number"], c1["crl_number"])
        self.assertEqual(x509.load_pem_x509_crl(Path(out).read_bytes()).extensions
                         .get_extension_for_class(x509.CRLNumber).value.crl_number, c2["crl_number"])
        # Atomic write: no temp files left next to it.
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(["ca", "alice.p12", "bob.p12", "new", "crl.pem"]))

    def test_crl_errors(self) -> None:
        self.assertIn("no CA in", str(self.assertRaises(CAError, ca.write_crl, self.ca_dir, self.out("c.pem"))))
        ca.init_ca(self.ca_dir)
        e = self.assertRaises(CAError, ca.write_crl, self.ca_dir, self.out("nope/crl.pem"))
        self.assertIn("does not exist", str(e))
        e = self.assertRaises(CAError, ca.write_crl, self.ca_dir, self.tmp)
        self.assertIn("is a directory", str(e))
        key_before = Path(self.ca_dir, ca.CA_KEY).read_bytes()
        for own in (ca.CA_KEY, ca.CA_CERT, ca.STATE):
            e = self.assertRaises(CAError, ca.write_crl, self.ca_dir, os.path.join(self.ca_dir, own))
            self.assertIn("refusing to write the CRL over", str(e))
        self.assertEqual(Path(self.ca_dir, ca.CA_KEY).read_bytes(), key_before)


class CLITests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = os.path.abspath(self.mktemp())
        os.makedirs(self.tmp)
        self.ca_dir = os.path.join(self.tmp, "ca")

    def initialised_data_dir(self) -> str:
        """A data dir holding the server's database, as after its first start."""
        from deaddrop.store.db import connect, migrate

        data = os.path.join(self.tmp, "data")
        os.makedirs(data, mode=0o700)
        conn = connect(os.path.join(data, "db.sqlite"))
        migrate(conn)
        conn.close()
        return data

    def run_cli(self, *argv: str) -> tuple[int, str, str]:
        stdout, stderr = io.StringIO(), io.StringIO()
        self.patch(sys, "stdout", stdout)
        self.patch(sys, "stderr", stderr)
        code = cli.main(list(argv))
        return code, stdout.getvalue(), stderr.getvalue()

    def run_json(self, *argv: str) -> tuple[int, dict[str, Any]]:
        code, stdout, _ = self.run_cli(*argv, "--json")
        lines = stdout.splitlines()
        self.assertEqual(len(lines), 1, stdout)
        return code, json.loads(lines[0])

    def test_full_flow_with_json(self) -> None:
        code, r = self.run_json("ca", "init", "--ca-dir", self.ca_dir, "--algorithm", "ed25519")
        self.assertEqual((code, r["algorithm"]), (0, "ed25519"))
        self.assertEqual(r["ca_cert"], os.path.join(self.ca_dir, ca.CA_CERT))
        p12 = os.path.join(self.tmp, "alice.p12")
        code, r = self.run_json("cert", "issue", "alice", "--ca-dir", self.ca_dir, "--out", p12)
        self.assertEqual(code, 0)
        pkcs12.load_key_and_certificates(Path(p12).read_bytes(), r["password"].encode())
        code, r = self.run_json("cert", "revoke", "alice", "--ca-dir", self.ca_dir)
        self.assertEqual((code, r["name"], len(r["serials"])), (0, "alice", 1))
        crl = os.path.join(self.tmp, "crl.pem")
        code, r = self.run_json("crl", "--ca-dir", self.ca_dir, "--out", crl)
        self.assertEqual((code, r["count"], r["path"]), (0, 1, crl))
        self.assertEqual(len(x509.load_pem_x509_crl(Path(crl).read_bytes())), 1)

    def test_password_file_and_human_output(self) -> None:
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        pw = os.path.join(self.tmp, "pw")
        Path(pw).write_bytes(b"s3cret words\n")
        p12 = os.path.join(self.tmp, "bob.p12")
        code, stdout, _ = self.run_cli("cert", "issue", "bob", "--ca-dir", self.ca_dir, "--out", p12,
                                       "--password-file", pw)
        self.assertEqual(code, 0)
        self.assertIn("issued bob", stdout)
        self.assertNotIn("s3cret", stdout)
        pkcs12.load_key_and_certificates(Path(p12).read_bytes(), b"s3cret words")  # newline stripped
        code, stdout, stderr = self.run_cli("cert", "issue", "carol", "--ca-dir", self.ca_dir, "--out",
                                            os.path.join(self.tmp, "c.p12"), "--password-file", pw + ".missing")
        self.assertEqual(code, 1)
        self.assertIn("cannot read password file", stderr)

    def test_generated_password_is_printed(self) -> None:
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        code, stdout, _ = self.run_cli("cert", "issue", "alice", "--ca-dir", self.ca_dir, "--out",
                                       os.path.join(self.tmp, "alice.p12"))
        self.assertEqual(code, 0)
        line = next(l for l in stdout.splitlines() if "import password" in l)
        password = line.rsplit(": ", 1)[1].strip()
        pkcs12.load_key_and_certificates(Path(self.tmp, "alice.p12").read_bytes(), password.encode())

    def test_issue_names_every_file_it_writes(self) -> None:
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        pw = os.path.join(self.tmp, "pw")
        Path(pw).write_bytes(b"pw\n")
        out = os.path.join(self.tmp, "other.p12")
        code, stdout, _ = self.run_cli("cert", "issue", "alice", "--ca-dir", self.ca_dir, "--out", out,
                                       "--password-file", pw, "--pem")
        self.assertEqual(code, 0)
        written = sorted(set(os.listdir(self.tmp)) - {"ca", "pw"})
        self.assertEqual(written, ["other.cert.pem", "other.key.pem", "other.p12"])
        for name in written:
            self.assertIn(f"wrote {os.path.join(self.tmp, name)}", stdout)

    def test_issue_warns_when_the_account_does_not_exist(self) -> None:
        data = self.initialised_data_dir()
        self.run_cli("ca", "init", "--data-dir", data)
        code, _, err = self.run_cli("journalist", "add", "alice", "--data-dir", data, "--kdf-cost", "insecure-fast")
        self.assertEqual(code, 0, err)
        code, stdout, _ = self.run_cli("cert", "issue", "alice", "--data-dir", data, "--out",
                                       os.path.join(self.tmp, "alice.p12"))
        self.assertEqual(code, 0)
        self.assertNotIn("warning", stdout)
        code, stdout, _ = self.run_cli("cert", "issue", "bob", "--data-dir", data, "--out",
                                       os.path.join(self.tmp, "bob.p12"))
        self.assertEqual(code, 0)
        self.assertIn("warning: there is no account named bob", stdout)
        code, r = self.run_json("cert", "issue", "carol", "--data-dir", data, "--out", os.path.join(self.tmp, "c.p12"))
        self.assertIs(r["account_exists"], False)
        # An offline CA machine has no database: the CLI says it did not check, and creates nothing.
        code, stdout, _ = self.run_cli("cert", "issue", "dave", "--ca-dir", os.path.join(data, "ca"),
                                       "--data-dir", os.path.join(self.tmp, "nowhere"),
                                       "--out", os.path.join(self.tmp, "d.p12"))
        self.assertEqual(code, 0)
        self.assertIn("was not checked", stdout)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "nowhere")))

    def test_cert_list(self) -> None:
        data = self.initialised_data_dir()
        self.run_cli("ca", "init", "--data-dir", data)
        code, _, err = self.run_cli("journalist", "add", "alice", "--data-dir", data, "--kdf-cost", "insecure-fast")
        self.assertEqual(code, 0, err)
        _, a = self.run_json("cert", "issue", "alice", "--data-dir", data, "--out", os.path.join(self.tmp, "a.p12"))
        _, b = self.run_json("cert", "issue", "bob", "--data-dir", data, "--out", os.path.join(self.tmp, "b.p12"))
        self.run_cli("cert", "revoke", "bob", "--data-dir", data)
        code, r = self.run_json("cert", "list", "--data-dir", data)
        self.assertEqual(code, 0)
        rows = {(c["name"], c["serial"], c["not_after"], c["revoked"], c["account_exists"]) for c in r["certificates"]}
        self.assertEqual(rows, {("alice", a["serial"], a["not_after"], False, True),
                                ("bob", b["serial"], b["not_after"], True, False)})
        code, stdout, _ = self.run_cli("cert", "list", "--data-dir", data)
        alice_row = next(l for l in stdout.splitlines() if a["serial"] in l).split()
        self.assertEqual(alice_row, [a["serial"], "client", "alice", a["not_after"], "no", "yes"])
        bob_row = next(l for l in stdout.splitlines() if b["serial"] in l).split()
        self.assertEqual(bob_row, [b["serial"], "client", "bob", b["not_after"], "yes", "NO"])

    def test_cert_server_is_signed_by_the_same_ca(self) -> None:
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        out = os.path.join(self.tmp, "server.pem")
        code, stdout, _ = self.run_cli("cert", "server", "--ca-dir", self.ca_dir, "--host", "10.8.0.1",
                                       "--host", "news.example", "--out", out)
        self.assertEqual(code, 0, stdout)
        self.assertEqual(sorted(set(os.listdir(self.tmp)) - {"ca"}), ["server.key", "server.pem"])
        self.assertIn(f"wrote {out}", stdout)
        self.assertIn(f"wrote {os.path.join(self.tmp, 'server.key')}", stdout)
        # Where the install guide puts the pair, and no option it does not use (issue 27).
        self.assertIn("on the server: DATA/tls/server.pem and DATA/tls/server.key", stdout)
        self.assertNotIn("--journalist-tls", stdout)
        self.assertEqual(_mode(os.path.join(self.tmp, "server.key")), 0o600)
        leaf, chained_ca = x509.load_pem_x509_certificates(Path(out).read_bytes())
        ca_cert = _cert(os.path.join(self.ca_dir, ca.CA_CERT))
        self.assertEqual(chained_ca, ca_cert)
        leaf.verify_directly_issued_by(ca_cert)
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual([str(v) for v in sans.get_values_for_type(x509.IPAddress)], ["10.8.0.1"])
        self.assertEqual(sans.get_values_for_type(x509.DNSName), ["news.example"])
        eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        self.assertEqual(list(eku), [ExtendedKeyUsageOID.SERVER_AUTH])
        key = load_pem_private_key(Path(self.tmp, "server.key").read_bytes(), None)
        self.assertEqual(key.public_key(), leaf.public_key())
        code, r = self.run_json("cert", "list", "--ca-dir", self.ca_dir)
        self.assertEqual([(c["kind"], c["name"]) for c in r["certificates"]], [("server", "10.8.0.1")])
        code, r = self.run_json("cert", "server", "--ca-dir", self.ca_dir, "--host", "x", "--out", out)
        self.assertIn("refusing to overwrite", r["error"])

    def test_cert_server_lives_90_days_by_default_and_never_more_than_397(self) -> None:
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        for days, lifetime in ((None, 90), ("397", 397)):
            out = os.path.join(self.tmp, f"server-{lifetime}.pem")
            code, r = self.run_json("cert", "server", "--ca-dir", self.ca_dir, "--host", "10.8.0.1", "--out", out,
                                    *(("--days", days) if days else ()))
            self.assertEqual(code, 0, r)
            leaf = x509.load_pem_x509_certificates(Path(out).read_bytes())[0]
            self.assertEqual((leaf.not_valid_after_utc - leaf.not_valid_before_utc).days, lifetime)
        code, r = self.run_json("cert", "server", "--ca-dir", self.ca_dir, "--host", "10.8.0.1", "--days", "398",
                                "--out", os.path.join(self.tmp, "long.pem"))
        self.assertNotEqual(code, 0)
        self.assertIn("between 1 and 397", r["error"])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "long.pem")))

    def test_revoke_prints_the_next_step_for_the_ca_in_use(self) -> None:
        data = os.path.join(self.tmp, "data")
        self.run_cli("ca", "init", "--data-dir", data)
        self.run_cli("cert", "issue", "alice", "--data-dir", data, "--out", os.path.join(self.tmp, "a.p12"))
        code, stdout, _ = self.run_cli("cert", "revoke", "alice", "--data-dir", data)
        self.assertEqual(code, 0)
        # The server watches DATA/ca/crl.pem: the next step rewrites exactly that file.
        self.assertIn(f"next: deaddrop-admin crl --data-dir {data} ", stdout)
        self.assertNotIn("--out", stdout)
        self.run_cli("cert", "issue", "bob", "--ca-dir", self.ca_dir, "--out", os.path.join(self.tmp, "b.p12"))
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        self.run_cli("cert", "issue", "bob", "--ca-dir", self.ca_dir, "--out", os.path.join(self.tmp, "b.p12"))
        code, stdout, _ = self.run_cli("cert", "revoke", "bob", "--ca-dir", self.ca_dir, "--data-dir", data)
        self.assertIn(f"next: deaddrop-admin crl --ca-dir {self.ca_dir} --out crl.pem, then copy crl.pem over "
                      "the server's --journalist-crl file", stdout)

    def test_errors_exit_non_zero_with_one_line(self) -> None:
        code, r = self.run_json("cert", "issue", "alice", "--ca-dir", self.ca_dir, "--out",
                                os.path.join(self.tmp, "a.p12"))
        self.assertEqual((code, r), (1, {"error": f"no CA in {self.ca_dir}: run deaddrop-admin ca init --ca-dir {self.ca_dir}"}))
        self.run_cli("ca", "init", "--ca-dir", self.ca_dir)
        code, r = self.run_json("ca", "init", "--ca-dir", self.ca_dir)
        self.assertEqual(code, 1)
        self.assertIn("refusing to overwrite", r["error"])
        self.run_cli("cert", "issue", "alice", "--ca-dir", self.ca_dir, "--out", os.path.join(self.tmp, "a.p12"))
        code, r = self.run_json("cert", "issue", "alice", "--ca-dir", self.ca_dir, "--out",
                                os.path.join(self.tmp, "a2.p12"))
        self.assertEqual(code, 1)
        self.assertIn("already has an active certificate", r["error"])
        code, stdout, stderr = self.run_cli("crl", "--ca-dir", self.ca_dir, "--out", "/nonexistent/dir/crl.pem")
        self.assertEqual((code, stdout), (1, ""))
        self.assertEqual(stderr.count("\n"), 1)
        self.assertIn("does not exist", stderr)

    def test_ca_dir_defaults_to_data_dir(self) -> None:
        data = os.path.join(self.tmp, "data")
        code, r = self.run_json("ca", "init", "--data-dir", data)
        self.assertEqual(code, 0)
        self.assertTrue(os.path.isfile(os.path.join(data, "ca", ca.CA_KEY)))
        code, r = self.run_json("crl", "--data-dir", data)
        self.assertEqual((code, r["path"]), (0, os.path.join(data, "ca", ca.CA_CRL)))

    def test_console_script(self) -> None:
        script = shutil.which("deaddrop-admin", path=os.path.dirname(sys.executable))
        if script is None:
            raise unittest.SkipTest("deaddrop-admin is not installed next to this python")
        proc = subprocess.run([script, "cert", "revoke", "alice", "--ca-dir", self.ca_dir, "--json"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("no CA in", json.loads(proc.stdout)["error"])
        self.assertTrue(proc.stderr.startswith("deaddrop-admin: error: no CA in"))
