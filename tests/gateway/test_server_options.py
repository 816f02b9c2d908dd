"""Start-up options of the gateway process: TLS for LAN use, and refusing to expose itself without a token."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tools.stack import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_gateway_serves_https_with_a_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    port = free_port()
    env = {**os.environ, "SOTTO_GATEWAY_PORT": str(port), "SOTTO_GATEWAY_TLS_CERT": str(cert),
           "SOTTO_GATEWAY_TLS_KEY": str(key)}
    proc = subprocess.Popen([sys.executable, "-m", "services.gateway.server"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False

    def page() -> bytes | None:
        try:
            return urllib.request.urlopen(f"https://127.0.0.1:{port}/", context=context, timeout=2).read()
        except (urllib.error.URLError, ConnectionError):
            return None

    try:
        body = wait_until(page, 30, "the gateway to answer over https")
        assert b"<html" in body.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_binding_beyond_loopback_without_a_token_is_refused() -> None:
    env = {**os.environ, "SOTTO_HOST": "0.0.0.0", "SOTTO_GATEWAY_PORT": str(free_port())}
    env.pop("SOTTO_GATEWAY_TOKEN", None)
    proc = subprocess.run([sys.executable, "-m", "services.gateway.server"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "SOTTO_GATEWAY_TOKEN" in proc.stderr and "not a loopback address" in proc.stderr


def test_tls_needs_both_certificate_and_key(tmp_path: Path) -> None:
    env = {**os.environ, "SOTTO_GATEWAY_TLS_CERT": str(tmp_path / "c.pem"), "SOTTO_GATEWAY_PORT": str(free_port())}
    proc = subprocess.run([sys.executable, "-m", "services.gateway.server"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "must be set together" in proc.stderr
