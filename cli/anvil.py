"""anvil, the local EVM chain from npm `@foundry-rs/anvil` (in contracts/node_modules): where its
binary is, and a running one for `marketplace dev`, the end-to-end tests and the bench."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

CONTRACTS_DIR = Path(__file__).resolve().parents[1] / "contracts"
ANVIL_CHAIN_ID = 31337
# anvil's first funded account (its well-known test mnemonic): a local chain's owner only.
ANVIL_OWNER_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


def anvil_binary(contracts_dir: Path = CONTRACTS_DIR) -> Path | None:
    """The platform binary npm installed (the package's `bin.mjs` is a Node wrapper that would
    outlive a kill of its own process)."""
    found = sorted((contracts_dir / "node_modules" / "@foundry-rs").glob("anvil-*/bin/anvil"))
    return found[0] if found else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_rpc(url: str, process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"anvil exited with status {process.returncode}")
        try:
            if httpx.post(url, json=body, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"anvil did not answer at {url} within {timeout} s")


def start_anvil(binary: Path, port: int) -> subprocess.Popen[bytes]:
    """anvil on 127.0.0.1:`port`, blocks mined as transactions arrive, quiet."""
    return subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", str(port), "--silent"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextmanager
def running_anvil(binary: Path) -> Iterator[str]:
    """A fresh anvil for the block; its RPC URL."""
    port = free_port()
    process = start_anvil(binary, port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_rpc(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
