"""Pod + interLink data + BuildConfig -> one self-contained bash script (pure: no I/O at render time).

Parses the pod dict as interLink sends it once (:mod:`.pod_parse`; no proto conversion: that costs more than
the whole render) into the typed model every step reads (:mod:`.pod_model`). Everything that is not supported
is rejected with :class:`PodRejected` naming the field; nothing is dropped silently except the fields listed as
ignored in docs/pod-support.md.

This module assembles the script; each concept has its own module: which fields are honoured
(:mod:`.allowed_fields`), the downward API (:mod:`.sources`), volumes and mounts
(:mod:`.volumes`), the environment and ``$(VAR)`` expansion (:mod:`.environment`), the annotations
(:mod:`.pod_annotations`) and each runtime's command line (:mod:`.runtimes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources as importlib_resources
from typing import Any

import jinja2
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout

from . import pod_annotations
from .context import RenderContext
from .environment import check_exec_size, container_env, expanded_words
from .errors import PodRejected, checked
from .fields import member
from .flavors import apply_flavor, select_flavor
from .hooks import HOOKS, ExecHandler, Handler, TcpSocketHandler, handler_body
from .job_array import JobOfPod, job_of
from .launch import HostLink, Launch, PodOptions, SetupEntry
from .limits import Limits
from .pod_group import PodGroupSpec, pod_group
from .pod_model import Container, Pod
from .pod_parse import parse_pod
from .pod_resources import GPU_RESOURCE, ContainerResources, pod_resources_from
from .quoting import quote, quote_field
from .runtimes import RUNTIMES
from .volumes import Volume, build_volume, container_mounts, volume_setup

__all__ = ["RenderedPod", "render_job", "render_pod"]

RT = pb.ContainerRuntime
DEFAULT_GRACE_SECONDS = 30


@dataclass(slots=True)
class ContainerPlan:
    """One container as the template sees it."""

    index: int
    name: str
    qname: str
    init: bool
    body: list[str]
    resources: ContainerResources
    hooks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Hook and probe functions' bodies by the template's prefix (``post``, ``pre``, ``startup``, ...), and ``up``:
    the runtime's test that the container still runs (``Runtime.still_running``), for the probe loop."""
    probe_words: str = ""
    """The script's ``__probes`` arguments; empty: the container has no probe."""


@dataclass(slots=True)
class PodPlan:
    """What the containers of one pod share while they are planned, and what they add to the pod's set-up."""

    ctx: RenderContext
    volumes: dict[str, Volume]
    options: PodOptions
    mpi: tuple[str, ...]  # main containers only
    group_env: tuple[str, ...] = ()  # a pod-group member's: passed from the script's environment into each container
    used: dict[str, Volume] = field(default_factory=dict)  # volumes some container mounts
    host_setup: list[SetupEntry] = field(default_factory=list)


def _container(plan: PodPlan, c: Container, index: int, init: bool) -> ContainerPlan:
    ctx, where = plan.ctx, c.where
    env, env_values = container_env(ctx, c)
    if not ctx.mask:  # a masked preview holds '***' for secrets: the gateway's render checks the real values
        check_exec_size(c, env)
    command, command_words = expanded_words(c.command, "command", where, env_values)
    _, args_words = expanded_words(c.args, "args", where, env_values)
    mounts = container_mounts(ctx, c, plan.volumes, env_values, plan.used, plan.host_setup)
    resources, runtime = c.resources, ctx.runtime
    if resources.gpus and runtime.gpu_flags and not ctx.bc.gpu_support:
        raise PodRejected(
            member(f"{where}.resources.{c.gpu_kind}", GPU_RESOURCE), "this pool offers no GPUs to the runtime"
        )
    launch = Launch(
        name=c.name,
        where=where,
        env=env,
        command=command,
        command_words=command_words,
        args_words=args_words,
        workdir=c.working_dir,
        mounts=[m.point() for m in mounts],
        resources=resources,
        mpi=() if init else plan.mpi,
        image=runtime.image(c.image, where, lambda: ctx.annotation(pod_annotations.IMAGE_ROOT), ctx.bc),
        mask=ctx.mask,
        engine_name="" if c.lifecycle is None and not c.probes else quote(f"il-{ctx.pod.metadata.uid}-{c.name}"),
        passthrough=tuple(n for n in plan.group_env if n not in env_values) if plan.group_env else (),  # own wins
    )
    commands = runtime.commands(launch, plan.options)
    plan.host_setup += commands.setup
    out = ContainerPlan(index, c.name, quote(c.name), init, list(commands.body), resources)
    handlers: list[tuple[str, Handler | TcpSocketHandler | None]] = []
    if c.lifecycle is not None:
        handlers += [(prefix, c.lifecycle.get(prefix)) for _, prefix in HOOKS]
    handlers += [(p.kind, p.handler) for p in c.probes]
    for prefix, handler in handlers:
        if handler is not None:
            exec_lines: tuple[str, ...] = ()
            if isinstance(handler, ExecHandler):
                handler_launch = replace(launch, where=handler.where)
                exec_lines = runtime.exec_in(handler_launch, plan.options, list(handler.command))
            out.hooks[prefix] = handler_body(handler, exec_lines)
    out.probe_words = " ".join(p.words() for p in c.probes)
    if "post" in out.hooks or any(p.kind in ("startup", "liveness") for p in c.probes):  # their failure stops it
        running = runtime.still_running(launch, plan.options)
        if running is not None:
            out.hooks["up"] = (running,)  # ``__up<index>``, which the script's ``__ended`` asks
    return out


_LAYOUT_NAMES = {
    "job_dir_env": layout.JOB_DIR_ENV,
    "containers_dir": layout.CONTAINERS_DIR,
    "changes_file": layout.CHANGES_FILE,
    "deadline_file": layout.DEADLINE_FILE,
    "started_suffix": layout.STARTED_SUFFIX,
    "exit_suffix": layout.EXIT_SUFFIX,
    "log_suffix": layout.LOG_SUFFIX,
    "jobs_file": layout.JOBS_FILE,
    "hook_suffix": layout.HOOK_SUFFIX,
    "ready_suffix": layout.READY_SUFFIX,
    "job_removes_layout_env": layout.JOB_REMOVES_LAYOUT_ENV,
}
"""Template names whose values never change. They are written into the template's text before it is
compiled, so a render looks up only what the pod decides (each lookup costs, per render, every time)."""
_LAYOUT_PATHS = {"ended_job_layout": layout.ENDED_JOB_LAYOUT}
"""Template names for lists of those names, written as shell words below the job directory."""


def _plain(name: str) -> str:
    assert name.replace(".", "").replace("-", "").replace("_", "").isalnum(), f"not a plain name: {name!r}"
    return name


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    """Compiled once per process; templates ship as package data."""
    text = importlib_resources.files(__package__).joinpath("templates/job.sh.j2").read_text(encoding="utf-8")
    for name, value in _LAYOUT_NAMES.items():
        text = text.replace("{{ " + name + " }}", _plain(value))
    for name, values in _LAYOUT_PATHS.items():
        text = text.replace("{{ " + name + " }}", " ".join(f'"$__job_dir"/{_plain(v)}' for v in values))
    env = jinja2.Environment(
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        comment_start_string="<#",
        comment_end_string="#>",  # bash uses {# (${#array[@]})
        keep_trailing_newline=True,
    )
    env.globals.clear()  # the template calls none (range, dict, …); each render would copy them into its context
    return env.from_string(text)


def _render_script(**variables: Any) -> str:
    """``_template().render(**variables)`` through Jinja's low-level API (``new_context``, ``root_render_func``).

    ``render`` copies the variables twice and merges in the globals (there are none: ``_template``
    clears them) before the same two calls: ~5 µs of every create's ~80 µs render. The exception
    handling is ``render``'s own, so an error reads the same.
    """
    template = _template()
    context = template.new_context(variables, shared=True)
    try:
        return "".join(template.root_render_func(context))
    except Exception:
        template.environment.handle_exception()


def _pod_options(ctx: RenderContext, uid: str) -> tuple[PodOptions, tuple[str, ...], list[str]]:
    """(what every container's command line gets, the mpi-flags words, JobScript.backend_flags)."""
    bc, runtime = ctx.bc, ctx.runtime
    mpi: list[str] = []
    text = ctx.annotation(pod_annotations.MPI_FLAGS)
    if text is not None and text.strip() != "true":
        mpi = pod_annotations.words(text, pod_annotations.MPI_FLAGS)
    global_options: list[str] = []
    options: list[str] = []
    if runtime.singularity_annotations:
        for key, slot in (
            (pod_annotations.SINGULARITY_COMMANDS, global_options),
            (pod_annotations.SINGULARITY_OPTIONS, options),
            (pod_annotations.SINGULARITY_MOUNTS, options),
        ):
            value = ctx.annotation(key)
            if value is not None:
                slot += [quote(w) for w in pod_annotations.words(value, key)]
    flags = ctx.annotation(pod_annotations.FLAGS)
    backend_flags = pod_annotations.slurm_flags(flags, bc) if flags is not None else []
    pod = PodOptions(
        executable=quote(bc.executable or runtime.name),
        runtime_flags=tuple(quote(f) for f in bc.runtime_flags),
        binds=tuple(quote(b) for b in bc.binds),
        global_options=tuple(global_options),
        options=tuple(options),
        pod_label=quote_field(f"{layout.LABEL_POD_UID}={uid}", "metadata.uid"),
    )
    return pod, tuple(mpi), backend_flags


def _layout_entry(entry: layout.LayoutEntry) -> pb.LayoutEntry:
    """``JobScript.layout``'s form of an entry the submitter makes before the script runs."""
    if isinstance(entry, layout.LayoutDir):
        return pb.LayoutEntry(kind=pb.LayoutEntryKind.DIRECTORY, path=entry.path, mode=entry.mode)
    return pb.LayoutEntry(kind=pb.LayoutEntryKind.SYMLINK, path=entry.path, target=entry.target)


def _prepared_test(entries: list[layout.LayoutEntry]) -> str:
    """The script's test that the submitter made its layout (``layout.PREPARED_FILE``), entry by entry with
    builtins, so it needs no marker (an inode made and freed per job): a directory with ``-d``, a link with
    ``-ef`` against its target, which holds only where the submitter's absolute link leads into the directory
    the script runs in. The marker only where a link's target is not one of the layout's directories (a
    ``subPath`` file the script writes later: ``-ef`` cannot test it yet)."""
    if layout.needs_marker(entries):
        return layout.PREPARED_TEST
    tests = [f"[ -d {layout.CONTAINERS_DIR} ]"]
    for e in entries:
        if isinstance(e, layout.LayoutDir):
            tests.append(f"[ -d {quote(e.path)} ]")
        else:
            tests.append(f"[ {quote(e.path)} -ef {quote(e.target)} ]")
    return " && ".join(tests)


def _setup_line(entry: SetupEntry) -> str:
    """The shell that makes one set-up entry when the submitter did not (``mkdir -p``, ``ln -sfn``)."""
    if isinstance(entry, layout.LayoutDir):
        assert entry.mode is None, "containers' set-up directories keep the umask's mode"
        return f"mkdir -p -- {quote(entry.path)}"
    parent = quote(entry.path.rsplit("/", 1)[0])
    if isinstance(entry, HostLink):
        source = quote_field(entry.source, entry.where)
    else:
        source = f'"$__job_dir"/{quote(entry.target)}'
    return f"mkdir -p -- {parent} && ln -sfn -- {source} {quote(entry.path)}"


@dataclass(frozen=True, slots=True)
class RenderedPod:
    """A rendered pod and the pod group it belongs to (``None``: a pod on its own)."""

    job: pb.JobScript
    group: PodGroupSpec | None
    owner: JobOfPod | None = None
    """The Kubernetes Job the pod belongs to (``job_array``): the gateway may coalesce its pods into an array."""


def render_job(
    pod_data: dict[str, Any], build_config: pb.BuildConfig | None = None, *, mask_secrets: bool = False
) -> pb.JobScript:
    """Render interLink's RetrievedPodData (or a bare pod) for a pool; raise PodRejected for what
    cannot run faithfully. ``mask_secrets`` replaces secret contents for display (the script is then not runnable)."""
    return render_pod(pod_data, build_config, mask_secrets=mask_secrets).job


def render_pod(
    pod_data: dict[str, Any] | Pod, build_config: pb.BuildConfig | None = None, *, mask_secrets: bool = False
) -> RenderedPod:
    """:func:`render_job`, and the pod's group read from the same parse (the gateway holds members by it).

    ``pod_data`` may be the pod already parsed (the gateway parses it once, at the door, before routing)."""
    pod = pod_data if isinstance(pod_data, Pod) else parse_pod(pod_data)
    group = pod_group(pod.metadata)
    bc = build_config if build_config is not None else pb.BuildConfig()
    runtime_kind = bc.runtime if bc.runtime != RT.UNSPECIFIED else RT.APPTAINER
    runtime = RUNTIMES[runtime_kind]
    meta, spec = pod.metadata, pod.spec
    uid = meta.uid
    ctx = RenderContext(pod, pod.data, bc, runtime, mask_secrets)

    volumes: dict[str, Volume] = {}
    for volume_spec in spec.volumes:
        vol = build_volume(ctx, volume_spec)
        volumes[vol.name] = vol

    limits = Limits.of(bc)
    for c in spec.containers:  # probes and hooks: main containers only
        limits.check_container(c)
    limits.check_deadline(checked(spec.active_deadline_seconds))
    options, mpi, backend_flags = _pod_options(ctx, uid)
    plan = PodPlan(ctx, volumes, options, mpi, layout.GROUP_ENV if group is not None else ())
    plans: list[ContainerPlan] = []
    for init, containers in ((True, spec.init_containers), (False, spec.containers)):
        for c in containers:
            plans.append(_container(plan, c, len(plans), init))

    init_plans = [p for p in plans if p.init]  # plans lists the init containers first
    main_plans = plans[len(init_plans) :]
    resources = pod_resources_from(
        [p.resources for p in main_plans],
        [p.resources for p in init_plans],
        spec.resources,
        spec.active_deadline_seconds,
    )
    flavor = select_flavor(bc, ctx.annotation(pod_annotations.FLAVOR), resources.gpus)
    backend_flags = apply_flavor(flavor, resources, backend_flags)
    setup = volume_setup(plan.used.values(), mask_secrets)
    entries = list(dict.fromkeys(plan.host_setup))
    # The submitter makes the job-dir layout before the script runs (no process per directory or link), but
    # not a link to a host path (it may run on another host): then the containers' set-up stays in the
    # script, after the hostPath lines as it needs them, and the submitter makes only the volume directories.
    host_links = any(isinstance(e, HostLink) for e in entries)
    prepared: list[layout.LayoutEntry] = list(setup.layout)
    if not host_links:
        prepared += [e for e in entries if not isinstance(e, HostLink)]
    layout_lines = [] if host_links else [_setup_line(e) for e in entries]
    host_lines = list(dict.fromkeys(setup.host_lines))
    if host_links:
        host_lines += [_setup_line(e) for e in entries]

    exports: list[tuple[str, str]] = []
    if bc.cache_dir and runtime.cache_env is not None:
        exports.append((runtime.cache_env, quote(bc.cache_dir)))
    grace = checked(spec.termination_grace_period_seconds)
    if grace is None or grace < 0:
        grace = DEFAULT_GRACE_SECONDS
    pre_exec = ctx.annotation(pod_annotations.PRE_EXEC) or ""
    stop = runtime.stop_commands(options)

    script = _render_script(
        runtime_name=runtime.name,
        prepared_test=_prepared_test(prepared),
        remove_layout=bool(prepared or entries),
        submitter_removes=bool(prepared),
        layout_lines=layout_lines,
        all_names=" ".join(p.qname for p in plans),
        grace_seconds=max(limits.grace(grace), 1),
        wall_seconds=int(resources.wall_time.total_seconds()) if resources.wall_time else 0,
        exports=exports,
        dirs=" ".join(setup.dirs),
        files=setup.files,
        dir_modes=[(m, " ".join(paths)) for m, paths in setup.dir_modes.items()],
        file_modes=[(m, " ".join(paths)) for m, paths in setup.file_modes.items()],
        host_lines=host_lines,
        site_dirs=any(line.startswith("__in_site_dir ") for line in host_lines),
        admin_pre_exec=bc.pre_exec.strip("\n"),
        pod_pre_exec=pre_exec.strip("\n"),
        containers=plans,
        kill_lines=stop.after_grace,
        leftover_lines=[f'[ "$__cancelled" = 0 ] || {line}' for line in stop.at_exit_if_cancelled],
        init_containers=init_plans,
        main_containers=main_plans,
        hooks=any(p.hooks for p in main_plans),
        post_start=any("post" in p.hooks for p in main_plans),
        pre_stop=any("pre" in p.hooks for p in main_plans),
        probes=any(p.probe_words for p in main_plans),
        http_get=any("__http_get" in line for p in main_plans for body in p.hooks.values() for line in body),
    )
    try:
        script.encode("utf-8")
    except UnicodeEncodeError:
        raise PodRejected("pod", "contains text that is not valid Unicode (lone surrogates)") from None
    job = pb.JobScript(
        pod=pb.PodRef(uid=uid, namespace=meta.namespace, name=meta.name),
        script=script,
        init_containers=[p.name for p in init_plans],
        containers=[p.name for p in main_plans],
        resources=resources,
        backend_flags=backend_flags,
        layout=[_layout_entry(e) for e in prepared],
        run_as_user=spec.run_as[0],
        run_as_group=spec.run_as[1],
        storage=[v.storage for v in sorted(plan.used.values(), key=lambda v: v.index) if v.storage is not None],
    )
    return RenderedPod(job, group, job_of(pod.metadata) if group is None else None)
