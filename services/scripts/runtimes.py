"""Per-runtime command lines: one :class:`Runtime` interface, container engines as rows of one flag table.

apptainer, singularity and podman build the same command line (environment, GPUs, binds, working directory,
image, command) with different flags and in a slightly different order; the table below says which. Runtime
``none`` runs the command on the host instead, with the pod's mounts as symlinks (docs/pod-support.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.kernel.layout import LayoutDir, LayoutLink

from .errors import PodRejected
from .launch import (
    ContainerCommands,
    HostLink,
    Image,
    Launch,
    PodOptions,
    SetupEntry,
    StopCommands,
    passthrough_word,
)
from .pod_model import NotAString
from .quoting import quote, quote_field

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

BASH_OWN_VARIABLES = frozenset(
    {
        # readonly in bash: `export` fails
        *("EUID", "PPID", "SHELLOPTS", "UID"),
        # dynamic: bash computes or resets them, or an assignment changes bash itself
        *("RANDOM", "SRANDOM", "SECONDS", "LINENO", "HISTCMD", "FUNCNAME", "FUNCNEST", "GROUPS", "DIRSTACK"),
        *("EPOCHSECONDS", "EPOCHREALTIME", "PIPESTATUS", "POSIXLY_CORRECT", "EXECIGNORE", "OPTIND", "OPTERR"),
        # bash's `exec` decrements SHLVL; bash sets `_` to the program's path in the program's environment
        *("SHLVL", "_"),
        # bash calls setlocale() on assignment and warns into the container's log when the host lacks the locale
        "LANG",
    }
)
"""Variables bash treats as its own (bash(1), "Shell Variables"), besides every ``BASH*``, ``COMP_*`` and
``LC_*`` name: a container's environment that names one goes through env(1), which passes any name as it is."""


def bash_can_export(name: str) -> bool:
    """Whether ``export NAME=value`` in the script gives the container exactly ``NAME=value``."""
    return (
        _IDENTIFIER.fullmatch(name) is not None
        and name not in BASH_OWN_VARIABLES
        and not name.startswith(("BASH", "COMP_", "LC_"))
    )


class Runtime(Protocol):
    """How a pool runs containers."""

    @property
    def name(self) -> str:
        """The runtime's name, and its default executable."""

    @property
    def binds(self) -> bool:
        """Mounts become bind flags, whose syntax cannot express ',' or ':' in a path."""

    @property
    def gpu_flags(self) -> tuple[str, ...]:
        """What gives a container the pool's GPUs; empty when the runtime has no such flag."""

    @property
    def cache_env(self) -> str | None:
        """Environment variable naming the image cache (``BuildConfig.cache_dir``), if the runtime has one."""

    @property
    def singularity_annotations(self) -> bool:
        """Whether the ``slurm-job.vk.io/singularity-*`` annotations apply."""

    def image(
        self, raw: str | NotAString | None, where: str, image_root: Callable[[], str | None], bc: pb.BuildConfig
    ) -> Image | None:
        """The image a container runs (``image_root`` reads the pod's image-root annotation when needed)."""

    def commands(self, launch: Launch, pod: PodOptions) -> ContainerCommands:
        """The shell lines that start ``launch``."""

    def stop_commands(self, pod: PodOptions) -> StopCommands:
        """What a cancel or deadline must do beyond signalling the containers' process groups."""

    def exec_in(self, launch: Launch, pod: PodOptions, command: list[str]) -> tuple[str, ...]:
        """The shell lines that run ``command`` in the container's environment (a hook's or probe's exec handler);
        they exec the command, so that a probe's time limit kills the command itself."""

    def still_running(self, launch: Launch, pod: PodOptions) -> str | None:
        """A shell test that holds while the container runs, where its process group outlives it (podman's
        client cleans up after its container ended); None: the process group ends with the container. The script
        asks it when a postStart hook or a liveness or startup probe failed (``__ended``)."""


@dataclass(frozen=True, slots=True)
class ContainerEngine:
    """A runtime that runs images (apptainer, singularity, podman): one row of the flag table."""

    name: str
    verb_with_command: str  # the subcommand when the pod gives a command ...
    verb_without_command: str  # ... and when the image's entrypoint runs
    after_verb: tuple[str, ...]
    gpu_flags: tuple[str, ...]
    env_flag: str | None  # `--env NAME=value` per variable; None: `env -- PREFIX+NAME=value ...` before the runtime
    env_prefix: str
    bind_flag: str
    workdir_flag: str
    entrypoint_flag: str | None  # the command as JSON before the image; None: the command follows the image
    cache_env: str | None
    default_image_prefix: str  # for bare image names when neither the pod nor the pool gives one
    local_images: bool  # BuildConfig.image_dir holds image files tried first
    singularity_annotations: bool
    binds: bool = True
    label_flag: str | None = None  # labels with the pod UID, container name and job dir (found again by podman)
    memory_flag: str | None = None  # the container's memory in bytes
    cpus_flag: str | None = None  # the container's CPUs as a decimal count
    image_check: str | None = None  # subcommand that says whether an image is present: explains a failure
    failure_code: int = 125  # the engine's exit code for its own errors
    exec_verb: str | None = None  # runs a command in the running container (by ``--name``); None: a new one

    def exec_in(self, launch: Launch, pod: PodOptions, command: list[str]) -> tuple[str, ...]:
        words = [quote(w) for w in command]
        if self.exec_verb is None:  # apptainer: the same image, binds, environment and directory (no PID
            # or network namespace of its own by default, so it is the container's environment)
            beside = replace(launch, command=command, command_words=words, args_words=[], mpi=(), engine_name="")
            return self.commands(beside, pod).body
        # podman: into the running container (it may not be running yet right after its client started)
        running = self._running(launch, pod)
        wait_running = f"until {running}; do sleep 0.1; done"
        exe = " ".join([pod.executable, *pod.global_options])
        run = f"{exe} {self.exec_verb} {launch.engine_name} " + " ".join(words)
        # `exec`: a probe's time limit kills the command itself. A try that fails because the container ended
        # ("container has already been removed") is told apart by the script (``__ended``, ``still_running``).
        return (wait_running, "exec " + run)

    def _running(self, launch: Launch, pod: PodOptions) -> str:
        """The test that holds while the named container runs (``podman container inspect``)."""
        exe = " ".join([pod.executable, *pod.global_options])
        state = f"{exe} container inspect --format '{{{{.State.Running}}}}' {launch.engine_name} 2>/dev/null"
        return f'[ "$({state})" = true ]'

    def still_running(self, launch: Launch, pod: PodOptions) -> str | None:
        return None if self.exec_verb is None else self._running(launch, pod)

    def image(
        self, raw: str | NotAString | None, where: str, image_root: Callable[[], str | None], bc: pb.BuildConfig
    ) -> Image:
        if not isinstance(raw, str) or not raw.strip():
            raise PodRejected(where + ".image", "an image is required for this runtime")
        if raw.startswith("/") or _SCHEME.match(raw):
            remote = raw
        else:
            prefix = image_root()
            if prefix is None:
                prefix = bc.image_prefix or self.default_image_prefix
            remote = prefix + raw
        local = None
        if bc.image_dir and self.local_images and not raw.startswith("/"):
            bare = _SCHEME.sub("", raw)
            local = bc.image_dir.rstrip("/") + "/" + bare.replace(":", "_").replace("/", "_")
        return Image(remote, local)

    def commands(self, launch: Launch, pod: PodOptions) -> ContainerCommands:
        where = launch.where
        assert launch.image is not None, "a container engine's launch has an image"
        body: list[str] = []
        image = quote_field(launch.image.remote, where + ".image")
        if launch.image.local is not None:
            local = quote_field(launch.image.local, where + ".image")
            body.append(f"if [ -e {local} ]; then __img={local}; else __img={image}; fi")
            image = '"$__img"'
        words = [quote(w) for w in launch.mpi]
        if self.env_flag is None and (launch.env or launch.passthrough):
            words += ["env", "--"]
            words += [passthrough_word(name, self.env_prefix) for name in launch.passthrough]
            for var in launch.env:
                if not _IDENTIFIER.fullmatch(var.name):
                    name = var.source or f"{var.field(where)}.name"
                    raise PodRejected(name, f"{self.name} needs identifier names: {var.name!r}")
                words.append(var.word(self.env_prefix, where, launch.mask))
        verb = self.verb_with_command if launch.command else self.verb_without_command
        words += [pod.executable, *pod.global_options, verb, *self.after_verb, *pod.runtime_flags]
        if launch.engine_name and self.exec_verb is not None:
            words += ["--name", launch.engine_name]
        if self.label_flag is not None:
            words += [self.label_flag, pod.pod_label, self.label_flag, quote(f"{layout.LABEL_CONTAINER}={launch.name}")]
            words += [self.label_flag, f'"{layout.LABEL_JOB_DIR}=$__job_dir"']
        if self.memory_flag is not None and launch.resources.memory_bytes:
            words += [self.memory_flag, str(launch.resources.memory_bytes)]
        if self.cpus_flag is not None and launch.resources.cpu_millis:
            words += [self.cpus_flag, _cpus(launch.resources.cpu_millis)]
        if launch.resources.gpus:
            words += self.gpu_flags
        words += pod.options
        if self.env_flag is not None:
            for name in launch.passthrough:  # `--env NAME`: the engine copies NAME from its own environment if set
                words += [self.env_flag, name]
            for var in launch.env:
                words += [self.env_flag, var.word(self.env_prefix, where, launch.mask)]
        for bind in pod.binds:
            words += [self.bind_flag, bind]
        for mount in launch.mounts:
            words += [self.bind_flag, mount.bind_word(where)]
        if launch.workdir:
            words += [self.workdir_flag, quote_field(launch.workdir, where + ".workingDir")]
        if self.entrypoint_flag is not None and launch.command:
            words += [self.entrypoint_flag, quote(json.dumps(launch.command, ensure_ascii=False))]
        words.append(image)
        if self.entrypoint_flag is None:
            words += launch.command_words
        words += launch.args_words
        if self.image_check is None:
            body.append("exec " + " ".join(words))
            return ContainerCommands(setup=(), body=tuple(body))
        # Not exec'd, to say why when the image is missing (the engine's exit code covers all its own errors).
        # The trap keeps this shell alive while the engine's client passes a TERM on to the container.
        missing = f"interlink-nats: image {launch.image.remote} is not on this host and {self.name} could not pull it"
        check = f"{pod.executable} {self.image_check}"
        body += [
            "trap : TERM INT",
            " ".join(words),
            "__status=$?",
            f'if [ "$__status" = {self.failure_code} ] && ! {check} {image} >/dev/null 2>&1; then',
            f"  printf '%s\\n' {quote_field(missing, where + '.image')}",
            "fi",
            'return "$__status"',
        ]
        return ContainerCommands(setup=(), body=tuple(body))

    def stop_commands(self, pod: PodOptions) -> StopCommands:
        if self.label_flag is None:
            return StopCommands()
        # Killing a client does not stop its container, and a PID 1 without a TERM handler ignores the TERM the
        # client passes on: after the grace period the pod's containers are removed through the engine. setsid:
        # the clean-up kills its timers, and an engine command interrupted half-way can leave a container running
        # that the engine no longer lists (seen with podman 4.3 when `stop` is interrupted).
        by_pod = f"--filter label={pod.pod_label}"
        return StopCommands(
            after_grace=(f"setsid -w {pod.executable} rm -f -t 0 {by_pod} >/dev/null 2>&1",),
            at_exit_if_cancelled=(f"{pod.executable} rm -f -t 0 {by_pod} >/dev/null 2>&1",),
        )


def _cpus(millis: int) -> str:
    """A decimal CPU count, as podman's ``--cpus`` takes it: 1500 millicores -> ``1.5``."""
    whole, frac = divmod(millis, 1000)
    return f"{whole}.{frac:03d}".rstrip("0").rstrip(".")


APPTAINER = ContainerEngine(
    name="apptainer",
    verb_with_command="exec",
    verb_without_command="run",
    after_verb=(),
    gpu_flags=("--nv",),
    env_flag=None,
    env_prefix="APPTAINERENV_",
    bind_flag="--bind",
    workdir_flag="--pwd",
    entrypoint_flag=None,
    cache_env="APPTAINER_CACHEDIR",
    default_image_prefix="docker://",
    local_images=True,
    singularity_annotations=True,
)
SINGULARITY = replace(APPTAINER, name="singularity", env_prefix="SINGULARITYENV_", cache_env="SINGULARITY_CACHEDIR")
PODMAN = ContainerEngine(
    name="podman",
    verb_with_command="run",
    verb_without_command="run",
    after_verb=("--rm",),
    gpu_flags=("--device", "nvidia.com/gpu=all"),
    env_flag="--env",
    env_prefix="",
    bind_flag="-v",
    workdir_flag="--workdir",
    entrypoint_flag="--entrypoint",
    cache_env=None,
    default_image_prefix="",
    local_images=False,
    singularity_annotations=False,
    label_flag="--label",
    memory_flag="--memory",
    cpus_flag="--cpus",
    image_check="image exists",
    exec_verb="exec",
)


@dataclass(frozen=True, slots=True)
class HostRuntime:
    """Runtime ``none``: the command runs on the host, in ``rootfs/<container>/`` where mounts are symlinks."""

    name: str = "none"
    binds: bool = False
    gpu_flags: tuple[str, ...] = ()
    cache_env: str | None = None
    singularity_annotations: bool = False

    def image(
        self, raw: str | NotAString | None, where: str, image_root: Callable[[], str | None], bc: pb.BuildConfig
    ) -> None:
        """Ignored (there is no container), but still a string if given: interLink's status echoes it."""
        if isinstance(raw, NotAString):
            raise PodRejected(where + ".image", f"must be a string, not {raw.type_name}")
        return None

    def commands(self, launch: Launch, pod: PodOptions) -> ContainerCommands:
        where = launch.where
        if not launch.command:
            raise PodRejected(where + ".command", "runtime 'none' runs the command on the host: it is required")
        if "=" in launch.command[0]:
            raise PodRejected(where + ".command[0]", "a program name with '=' cannot be run through env(1)")
        root = f"{layout.ROOTFS_DIR}/{launch.name}"
        cwd = root + launch.workdir.rstrip("/") if launch.workdir else root
        setup: list[SetupEntry] = []
        for mount in launch.mounts:
            target = root + mount.target.rstrip("/")
            if mount.under_job_dir:
                setup.append(LayoutLink(target, mount.source))
            else:
                setup.append(HostLink(target, mount.source, where))
        setup.append(LayoutDir(cwd))  # after the links: may be inside
        variables = [passthrough_word(name, "") for name in launch.passthrough]
        variables += [var.word("", where, launch.mask) for var in launch.env]
        variables.append(f'"{layout.ROOTFS_ENV}=$__job_dir/"{quote(root)}')
        program = [*launch.command_words, *launch.args_words]
        cd = f'cd -- "$__job_dir"/{quote_field(cwd, where)} || exit 126'
        if not launch.mpi and all(bash_can_export(var.name) for var in launch.env):
            # The script's own `export` then `exec`: one exec fewer per container than through env(1).
            body: tuple[str, ...] = (cd, "export " + " ".join(variables), "exec " + " ".join(program))
        else:  # mpirun's ranks, or names bash keeps for itself ('.', '-', SHLVL …): env(1) passes any name
            words = [*map(quote, launch.mpi), "env", "--", *variables, *program]
            body = (cd, "exec " + " ".join(words))
        return ContainerCommands(setup=tuple(setup), body=body)

    def stop_commands(self, pod: PodOptions) -> StopCommands:
        return StopCommands()  # host processes end with their process groups

    def exec_in(self, launch: Launch, pod: PodOptions, command: list[str]) -> tuple[str, ...]:
        """The container's own directory and environment, as its command gets them."""
        words = [quote(w) for w in command]
        beside = replace(launch, command=command, command_words=words, args_words=[], mpi=())
        return self.commands(beside, pod).body

    def still_running(self, launch: Launch, pod: PodOptions) -> str | None:
        return None  # the command is the process group's leader


HOST = HostRuntime()

RUNTIMES: dict[pb.ContainerRuntime, Runtime] = {
    pb.ContainerRuntime.APPTAINER: APPTAINER,
    pb.ContainerRuntime.SINGULARITY: SINGULARITY,
    pb.ContainerRuntime.PODMAN: PODMAN,
    pb.ContainerRuntime.NONE: HOST,
}
RUNTIME_NAMES = {kind: runtime.name for kind, runtime in RUNTIMES.items()}
