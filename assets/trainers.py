"""The evaluation step's trainer runner: each sandbox run started through Dagster Pipes.

`PipesTrainerRunner` is the `pipeline.sandbox.runner.TrainerRunner` of the evaluation asset.
Every run starts the same launcher command (`SandboxRun.command`: limits, empty environment,
wall clock, bubblewrap); the Pipes client only changes who starts it and where its log lines
go. With TRAINER_PIPES_CLIENT=subprocess (the default) a `PipesSubprocessClient` starts it on
the step's machine; the context goes in the environment (which the launcher passes on) and
messages come back through a file in the run's box, so the harness's progress lines appear
in the step's log. With TRAINER_PIPES_CLIENT=k8s a `PipesK8sClient` (dagster-k8s, not
installed by default) starts it in a pod of `trainer_pod_spec`: the pod is the sandbox there
(no bubblewrap inside), its run folder on a volume shared with the run worker.

Messages the trainer reports go through `GatedMessageReader`: only the harness's progress lines
reach the step's log, a run's messages are capped in count and bytes and not read past its wall
limit (`pipeline.sandbox.messages`); none becomes a materialization or a check result: the
scores come from `pipeline.evaluation`, outside the sandbox.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from threading import Event
from typing import Any

import dagster as dg

from pipeline.core.config import Settings
from pipeline.sandbox.messages import MAX_LINE_BYTES, MessageGate
from pipeline.sandbox.runner import RUNNER_GRACE_SECONDS
from pipeline.sandbox.runs import SandboxRun

TRAINER_LABEL = {"app.kubernetes.io/name": "marketplace-trainer"}
RUN_VOLUME = "trainer-runs"
TMP_VOLUME = "tmp"
# Memory the launcher and the interpreter need beside the trainer's own limit.
POD_MEMORY_HEADROOM_MB = 256
POD_DEADLINE_GRACE_SECONDS = 60


class PipesTrainerRunner:
    """Starts sandbox runs through a Pipes client of the step's `context`, one at a time."""

    def __init__(self, context: dg.AssetExecutionContext, settings: Settings) -> None:
        self.context = context
        self.settings = settings
        self.k8s = settings.trainer_pipes_client == "k8s"
        self.run_root: Path | None = settings.trainer_k8s_volume_mount if self.k8s else None
        self.isolation: str | None = "none" if self.k8s else None
        # Pipes sessions report into the step's context: never two at once.
        self._lock = threading.Lock()

    def start(self, run: SandboxRun) -> None:
        with self._lock:
            try:
                if self.k8s:
                    self._start_pod(run)
                else:
                    self._start_subprocess(run)
            except Exception as exc:  # the outcome, read from the run folder, says why
                self.context.log.info(f"trainer run ended with an error: {type(exc).__name__}")

    def _start_subprocess(self, run: SandboxRun) -> None:
        deadline = time.monotonic() + run.limits.wall_seconds + RUNNER_GRACE_SECONDS
        client = dg.PipesSubprocessClient(
            context_injector=dg.PipesEnvContextInjector(),
            message_reader=GatedMessageReader(str(run.messages_path), self.context.log, deadline),
        )
        client.run(context=self.context, command=run.command, env={"PATH": "/usr/bin:/bin"})

    def _start_pod(self, run: SandboxRun) -> None:
        client = k8s_client(self.settings)
        client.run(
            context=self.context,
            image=self.settings.trainer_k8s_image,
            command=run.command,
            namespace=self.settings.trainer_k8s_namespace,
            base_pod_meta={"labels": TRAINER_LABEL},
            base_pod_spec=trainer_pod_spec(
                self.settings, run.dir, owner_of(run.dir), env=run.job.env
            ),
        )


class GatedMessageReader(dg.PipesFileMessageReader):
    """Dagster's file message reader, reading through a `MessageGate`: what reaches the handler
    (and so the event log) is the harness's, capped, and read only until the run's deadline."""

    def __init__(self, path: str, log: Any, deadline: float) -> None:
        super().__init__(path)
        self._log = log
        self._deadline = deadline

    @property
    def expected_writer_count(self) -> int:
        """One writer, the harness (the base class's property warns that it is in preview)."""
        return 1

    def _reader_thread(self, handler: Any, is_resource_complete: Event) -> None:
        gate = MessageGate(self._deadline)
        # The box is the trainer's: never read through a link it may have put in the file's place.
        with os.fdopen(os.open(self._path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as stream:
            pending = b""
            while not gate.done:
                # Taken before the read: the session may write its last lines and close
                # between an empty read and the check, so only an empty read after it ends.
                complete = is_resource_complete.is_set()
                chunk = stream.readline(MAX_LINE_BYTES + 1 - len(pending))
                pending += chunk
                if pending.endswith(b"\n") or len(pending) > MAX_LINE_BYTES:
                    message = gate.take(pending)
                    pending = b""
                    if message is not None:
                        handler.handle_message(message)
                elif not chunk:
                    if complete:
                        break
                    time.sleep(0.05)
        summary = gate.summary()
        if summary is not None:
            self._log.warning(summary)


def k8s_client(settings: Settings) -> Any:
    """Dagster's Kubernetes Pipes client; a clear error where dagster-k8s is not installed."""
    try:
        from dagster_k8s import PipesK8sClient
    except ImportError:
        raise dg.Failure(
            "TRAINER_PIPES_CLIENT=k8s needs the dagster-k8s package in the code location's "
            "image (docs/sandbox.md, Production)"
        ) from None
    return PipesK8sClient()


def owner_of(run_dir: Path) -> tuple[int, int]:
    """The user and group that made a run folder (the run worker's)."""
    status = run_dir.stat()
    return status.st_uid, status.st_gid


def trainer_pod_spec(
    settings: Settings, run_dir: Path, owner: tuple[int, int], env: Path | None = None
) -> dict[str, Any]:
    """The trainer pod: limits from the settings, no service-account token, no capabilities,
    only its own run folder of the shared volume mounted, and an empty /tmp of its own; for a
    model with requirements, its environment too, read-only (`env_mounts`).

    It runs as `owner`, the run folder's maker: the folder is private to that user (mode
    0700), and the pod sees no other file of the share. A run worker running as root is
    refused: the trainer pod must not run as root.
    """
    user, group = owner
    if user == 0:
        raise dg.Failure(
            "TRAINER_PIPES_CLIENT=k8s: the run worker runs as root, and the trainer pod runs as "
            "the run folder's owner, never as root; run the code location as a non-root user "
            "(deploy/Dockerfile's 10001)"
        )
    memory = f"{settings.trainer_memory_mb + POD_MEMORY_HEADROOM_MB}Mi"
    mount = settings.trainer_k8s_volume_mount
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": settings.trainer_wall_seconds + POD_DEADLINE_GRACE_SECONDS,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": user,
            "runAsGroup": group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {
                "name": RUN_VOLUME,
                "persistentVolumeClaim": {"claimName": settings.trainer_k8s_volume_claim},
            },
            # The root filesystem is read-only; owner code's `tempfile` writes here.
            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": f"{settings.trainer_file_size_mb}Mi"}},
        ],
        "containers": [
            {
                "name": "trainer",
                "resources": {
                    "requests": {"cpu": "1", "memory": memory},
                    "limits": {
                        "cpu": "1",
                        "memory": memory,
                        "ephemeral-storage": f"{settings.trainer_file_size_mb}Mi",
                    },
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {
                        "name": RUN_VOLUME,
                        "mountPath": str(run_dir),
                        "subPath": str(run_dir.relative_to(mount)),
                    },
                    {"name": TMP_VOLUME, "mountPath": "/tmp"},
                    *env_mounts(settings, env),
                ],
            }
        ],
    }


def env_mounts(settings: Settings, env: Path | None) -> list[dict[str, Any]]:
    """The model's environment, unpacked once by the run worker from its archive into the
    shared volume (`envs/KEY`, pipeline.sandbox.env_archives), mounted read-only at the same
    path: the trainer runs that environment's interpreter, and cannot change it."""
    if env is None:
        return []
    return [
        {
            "name": RUN_VOLUME,
            "mountPath": str(env),
            "subPath": str(env.relative_to(settings.trainer_k8s_volume_mount)),
            "readOnly": True,
        }
    ]


def trainer_network_policy(namespace: str) -> dict[str, Any]:
    """Deny every egress (and ingress) of the trainer pods: the manifest docs/sandbox.md shows."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "marketplace-trainer-deny-all", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": TRAINER_LABEL},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    }
