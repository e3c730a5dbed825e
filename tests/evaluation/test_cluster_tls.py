"""The dask option authenticates its clients: mutual TLS on a real local cluster (issue 34, 3).

Any client that reaches a plain dask scheduler runs code on it and its workers and reads what
other clients scattered (the benchmark frame, with its labels). The cluster here requires TLS
with certificates of its own CA (dask's `Security`); the fit engine, given the client
certificate through settings, fits on it, while clients without a certificate, with one of
another CA, or speaking plain TCP are refused. In production a plain `tcp://` scheduler off this
host is refused when the settings are read.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from distributed import LocalCluster
from distributed.comm import connect
from distributed.security import Security

from pipeline.core.config import ConfigError, load_settings
from pipeline.evaluation.fit_engine import ClusterTls, FitEngine, close_clients
from tests.evaluation.test_fit_engine import REST, _scorer
from tests.support.certificates import CertificateAuthority

# A real scheduler and worker (threads of a worker in this process: its TLS is the same).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fit-engine")]


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("cluster-ca"), "cluster")


@pytest.fixture(scope="module")
def cluster(authority: CertificateAuthority) -> Iterator[LocalCluster]:
    node = authority.issue("node")
    security = Security(  # type: ignore[no-untyped-call]
        require_encryption=True,
        tls_ca_file=str(authority.ca_file),
        tls_scheduler_cert=str(node.cert),
        tls_scheduler_key=str(node.key),
        tls_worker_cert=str(node.cert),
        tls_worker_key=str(node.key),
        tls_client_cert=str(node.cert),
        tls_client_key=str(node.key),
    )
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=security,
        dashboard_address=None,
    ) as local:
        yield local
    close_clients()


def _refused(address: str, security: Security | None = None) -> None:
    """A dask connection to `address` (with `security`) fails: dask's own handshake included."""
    args = security.get_connection_args("client") if security is not None else {}

    async def attempt() -> None:
        comm = await connect(address, timeout="5s", **args)
        await comm.close()

    with pytest.raises((OSError, TimeoutError)):
        asyncio.run(attempt())


def _without_certificate(address: str, ca_file: Path) -> None:
    """A TLS client that trusts the cluster's CA but has no certificate of its own is cut off."""
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        pytest.raises(ssl.SSLError, match=r"(?i)certificate.required"),
        context.wrap_socket(raw) as tls,
    ):
        # TLS 1.3 finishes the client's side of the handshake; the scheduler's refusal (the
        # alert "certificate required") arrives with the first read. Had it accepted the
        # client, the read would wait for dask's handshake and time out instead.
        tls.recv(1)


def test_the_engine_fits_on_the_tls_cluster_with_its_client_certificate(
    cluster: LocalCluster, authority: CertificateAuthority
) -> None:
    assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
    client = authority.issue("marketplace")
    settings = load_settings(
        valuation_cluster_address=cluster.scheduler_address,
        valuation_cluster_tls_ca_file=authority.ca_file,
        valuation_cluster_tls_cert_file=client.cert,
        valuation_cluster_tls_key_file=client.key,
    )
    engine = FitEngine.from_settings(settings)
    assert engine.tls == ClusterTls(str(authority.ca_file), str(client.cert), str(client.key))
    frames = [REST.iloc[:100], REST.iloc[:200]]
    remote = engine.predict_many(_scorer(), frames)
    local = FitEngine(workers=1).predict_many(_scorer(), frames)
    for mine, theirs in zip(local, remote, strict=True):
        np.testing.assert_array_equal(mine.outputs, theirs.outputs)


def test_a_client_without_a_certificate_of_the_cluster_ca_is_refused(
    cluster: LocalCluster, authority: CertificateAuthority, tmp_path: Path
) -> None:
    address = cluster.scheduler_address
    # No certificate at all (TLS, trusting the cluster's CA).
    _without_certificate(address, authority.ca_file)
    # A certificate of another CA.
    rogue = CertificateAuthority(tmp_path, "rogue")
    stranger = rogue.issue("stranger")
    stranger_security = Security(  # type: ignore[no-untyped-call]
        require_encryption=True,
        tls_ca_file=str(authority.ca_file),
        tls_client_cert=str(stranger.cert),
        tls_client_key=str(stranger.key),
    )
    _refused(address, security=stranger_security)
    # Plain TCP to the scheduler's port.
    _refused(address.replace("tls://", "tcp://"))


def test_a_plain_scheduler_off_this_host_is_refused_in_production() -> None:
    with pytest.raises(ConfigError, match=r"VALUATION_CLUSTER_ADDRESS tcp://10\.0\.0\.5:8786"):
        load_settings(valuation_cluster_address="tcp://10.0.0.5:8786")
    with pytest.raises(ConfigError, match=r"VALUATION_CLUSTER_ADDRESS dask-scheduler:8786 is"):
        load_settings(valuation_cluster_address="dask-scheduler:8786")  # tcp by default
    with pytest.raises(ConfigError, match="VALUATION_CLUSTER_TLS_CA_FILE"):
        load_settings(valuation_cluster_address="tls://dask-scheduler:8786")
    with pytest.raises(ConfigError, match="is not tls://"):
        load_settings(
            valuation_cluster_address="tcp://127.0.0.1:8786",
            valuation_cluster_tls_ca_file="/run/secrets/dask/ca.crt",
            valuation_cluster_tls_cert_file="/run/secrets/dask/client.crt",
        )
    # On this host, or for `marketplace dev`, a plain scheduler is allowed.
    assert load_settings(valuation_cluster_address="tcp://127.0.0.1:8786")
    development = load_settings(
        valuation_cluster_address="tcp://10.0.0.5:8786", marketplace_mode="development"
    )
    assert FitEngine.from_settings(development).address == "tcp://10.0.0.5:8786"
