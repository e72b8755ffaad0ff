"""The files in docker/: compose files and Dockerfiles, checked by reading them (fast, no services).

Docker need not be installed: every check below parses the files itself (PyYAML for compose, a small
instruction reader for Dockerfiles). Where a `docker compose` (or `docker-compose`) binary works,
`test_docker_compose_config` also runs `docker compose -f F config -q` on each compose file; it is
skipped otherwise. Nothing is built or started.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILES = sorted([*DOCKER.glob("*.yaml"), *DOCKER.glob("*.yml")])
DOCKERFILES = sorted(DOCKER.glob("Dockerfile*"))
RUNNER_DOCKERFILES = [DOCKER / "Dockerfile.runner", DOCKER / "Dockerfile.runner-cuda"]
CONFIGURATION_MD = (ROOT / "docs" / "configuration.md").read_text()

# `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?message}`, `${VAR?message}`, `$VAR`.
VAR_RE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?[^}]*\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
# Secrets never go on a command line (docs/security.md, "Secrets"): `ps` shows it to every local user.
SECRET_FLAGS = re.compile(r"--token(\s|=|$)|--redis-url(\s|=|$)|redis://:|rediss://:|://[^/\s:@]+:[^/\s@]+@")
WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", "*", ""}
# Import name -> the distribution that provides it, where they differ.
DISTRIBUTIONS = {"PIL": "pillow", "pynvml": "nvidia-ml-py", "jinja2": "jinja2"}
# Imported behind try/except by code that works without it (GPU inventory on CPU hosts).
OPTIONAL_IMPORTS = {"pynvml"}
DJANGO_SIDE = {"django", "channels", "ninja", "celery", "daphne", "torch", "transformers", "psycopg"}


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not a mapping"
    return data


def services(path: Path) -> dict[str, dict]:
    return load(path)["services"]


def all_services() -> list[tuple[str, str, dict]]:
    return [(p.name, name, svc) for p in COMPOSE_FILES for name, svc in services(p).items()]


def command_args(svc: dict) -> list[str]:
    command = svc.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def is_celery(args: list[str], sub: str) -> bool:
    return "celery" in args[:3] and sub in args


def strings(node: object) -> list[str]:
    """Every string in a parsed YAML document (keys and values), for the ${VAR} scan."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*strings(k), *strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return []


def routed_queues() -> set[str]:
    queues = set()
    for route in settings.CELERY_TASK_ROUTES.values():
        queues.add(route["queue"] if isinstance(route, dict) else route)
    return queues


def default_queue() -> str:
    return getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")


# --- compose files -----------------------------------------------------------------------------------


def test_docker_holds_the_expected_files():
    names = {p.name for p in [*COMPOSE_FILES, *DOCKERFILES]}
    assert {
        "compose.yaml",
        "compose.node.yaml",
        "Dockerfile",
        "Dockerfile.runner",
        "Dockerfile.runner-cuda",
    } <= names


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_file_parses_and_depends_on_defined_services(path):
    svcs = services(path)
    assert svcs
    for name, svc in svcs.items():
        assert svc.get("image") or svc.get("build"), f"{path.name}: {name} has neither image nor build"
        depends = svc.get("depends_on") or []
        targets = list(depends) if isinstance(depends, (list, dict)) else []
        for target in targets:
            assert target in svcs, f"{path.name}: {name} depends on undefined service {target!r}"
        if isinstance(depends, dict):
            for target, cond in depends.items():
                assert cond.get("condition") in {
                    "service_started", "service_healthy", "service_completed_successfully",
                }, f"{path.name}: {name} -> {target}: bad condition {cond!r}"  # fmt: skip
                if cond.get("condition") == "service_healthy":
                    assert "healthcheck" in svcs[target], f"{path.name}: {target} has no healthcheck"
    volumes = set(load(path).get("volumes") or {})
    for name, svc in svcs.items():
        for mount in svc.get("volumes") or []:
            source = mount.split(":", 1)[0] if isinstance(mount, str) else mount.get("source", "")
            if source and not source.startswith((".", "/", "$", "~")):
                assert source in volumes, f"{path.name}: {name} mounts undeclared volume {source!r}"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_every_variable_has_a_default_or_is_documented(path):
    undocumented = set()
    for text in strings(load(path)):
        for match in VAR_RE.finditer(text.replace("$$", "")):
            var = match["braced"] or match["bare"]
            has_default = (match["op"] or "").lstrip(":") == "-"
            if not has_default and f"`{var}`" not in CONFIGURATION_MD:
                undocumented.add(var)
    assert not undocumented, f"{path.name}: document these in docs/configuration.md: {sorted(undocumented)}"


def test_worker_consumes_every_routed_queue():
    """Without `-Q jobs` every conversion job would stay queued for ever."""
    assert routed_queues(), "CELERY_TASK_ROUTES routes nothing: this test would prove nothing"
    workers = [(f, n, command_args(s)) for f, n, s in all_services() if is_celery(command_args(s), "worker")]
    assert workers, "no compose service runs a celery worker"
    for file, name, args in workers:
        queues = option(args, "-Q", "--queues")
        assert queues, f"{file}: {name} names no queues (-Q), so it consumes `celery` only"
        assert set(queues.split(",")) == routed_queues() | {default_queue()}, f"{file}: {name}"


def test_routed_tasks_and_beat_tasks_exist_and_land_on_consumed_queues():
    from console.celery import app

    app.loader.import_default_modules()
    consumed = routed_queues() | {default_queue()}
    for task in settings.CELERY_TASK_ROUTES:
        assert task in app.tasks, f"CELERY_TASK_ROUTES names an unknown task {task!r}"
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks, f"beat schedules an unknown task {entry['task']!r}"
        route = settings.CELERY_TASK_ROUTES.get(entry["task"], {"queue": default_queue()})
        assert route["queue"] in consumed


def test_beat_runs_exactly_once():
    svcs = services(DOCKER / "compose.yaml")
    beats = [
        name
        for name, svc in svcs.items()
        if is_celery(command_args(svc), "beat")
        or {"--beat", "-B"} & set(command_args(svc))
        and is_celery(command_args(svc), "worker")
    ]
    assert len(beats) == 1, f"compose.yaml: beat in {beats or 'no service'}"
    for svc in svcs.values():  # a replicated service would run beat once per replica
        assert (svc.get("deploy") or {}).get("replicas", 1) == 1 or svc is not svcs[beats[0]]


def test_migrations_finish_before_the_console_starts():
    svcs = services(DOCKER / "compose.yaml")
    migrate = [n for n, s in svcs.items() if command_args(s)[-3:-1] == ["manage.py", "migrate"]]
    assert migrate == ["migrate"]
    assert svcs["migrate"].get("restart") == "no"
    for name, svc in svcs.items():
        args = command_args(svc)
        if name == "console" or is_celery(args, "worker") or is_celery(args, "beat"):
            cond = svc["depends_on"]["migrate"]["condition"]
            assert cond == "service_completed_successfully", name


def test_healthchecks():
    svcs = services(DOCKER / "compose.yaml")
    assert "readyz" in " ".join(svcs["console"]["healthcheck"]["test"])
    assert "pg_isready" in svcs["postgres"]["healthcheck"]["test"]
    assert "ping" in svcs["redis"]["healthcheck"]["test"]


def test_no_secret_on_any_command_line():
    for file, name, svc in all_services():
        for part in (svc.get("command"), svc.get("entrypoint"), (svc.get("healthcheck") or {}).get("test")):
            if part is None:
                continue
            line = part if isinstance(part, str) else " ".join(map(str, part))
            assert not SECRET_FLAGS.search(line), f"{file}: {name}: secret on the command line: {line}"


def test_node_services_get_their_secrets_from_an_env_file_and_no_django_secrets():
    nodes = [(f, n, s) for f, n, s in all_services() if option(command_args(s), "--console")]
    assert {f for f, _, _ in nodes} == {"compose.yaml", "compose.node.yaml"}
    for file, name, svc in nodes:
        env_files = svc.get("env_file")
        assert env_files, f"{file}: {name}: the node token comes from an env file"
        env = svc.get("environment") or {}
        assert "LANTAU_NODE_TOKEN" not in env, f"{file}: {name}: token belongs in the env file"
        assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"} & set(env), f"{file}: {name}"
        dockerfile = (svc.get("build") or {}).get("dockerfile", "")
        assert Path(dockerfile).name in {p.name for p in RUNNER_DOCKERFILES}, f"{file}: {name}: {dockerfile}"


def test_runners_and_published_ports_bind_to_one_host_address():
    for file, name, svc in all_services():
        args = command_args(svc)
        for flag in ("--advertise-host", "--bind-host", "--host", "-b"):
            value = option(args, flag)
            assert value is None or value not in WILDCARD_HOSTS or name == "console", f"{file}: {name}"
        if option(args, "--console"):
            host = option(args, "--advertise-host")
            assert host, f"{file}: {name}: runners would listen on the agent's default"
            if svc.get("network_mode") == "host":  # on the host's interfaces: a variable, never a wildcard
                assert host.startswith("${"), f"{file}: {name}: --advertise-host {host}"
        for port in svc.get("ports") or []:
            spec = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}:"
            parts = spec.rsplit(":", 2)
            assert len(parts) == 3, f"{file}: {name}: port {spec} binds every interface"
            assert parts[0] not in WILDCARD_HOSTS, f"{file}: {name}: port {spec}"
            assert parts[0].startswith("${") or parts[0] in {"127.0.0.1", "[::1]"}, f"{file}: {name}"


def compose_command() -> list[str] | None:
    for candidate in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(candidate[0]) is None:
            continue
        try:
            ok = subprocess.run([*candidate, "version"], capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return candidate
    return None


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_docker_compose_config(path, tmp_path):
    command = compose_command()
    if command is None:
        pytest.skip("no working `docker compose` here; the structural tests above cover the file")
    env = {
        **os.environ,
        "SECRET_KEY": "x",
        "CONSOLE_URL": "https://console.example",
        "ADVERTISE_HOST": "10.0.0.2",
    }
    made = []
    env_file = path.parent / "node.env"
    if not env_file.exists():
        env_file.write_text("LANTAU_NODE_TOKEN=x\n")
        made.append(env_file)
    try:
        result = subprocess.run(
            [*command, "-f", str(path), "config", "-q"], env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        for file in made:
            file.unlink()
    assert result.returncode == 0, result.stderr


# --- Dockerfiles ---------------------------------------------------------------------------------------


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def copied(path: Path) -> list[str]:
    sources = []
    for op, args in instructions(path):
        if op == "COPY":
            parts = [a for a in shlex.split(args) if not a.startswith("--")]
            sources += parts[:-1]
    return sources


def pip_requirements(path: Path) -> dict[str, str]:
    """name -> specifier of every `pip install "name<spec>"` in RUN lines (not `pip install .`)."""
    reqs = {}
    for op, args in instructions(path):
        if op != "RUN":
            continue
        for segment in re.split(r"&&|;", args):
            words = shlex.split(segment)
            if len(words) > 2 and words[0] in {"pip", "pip3"} and words[1] == "install":
                for word in words[2:]:
                    if word.startswith("-") or word == ".":
                        continue
                    match = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?(.*)", word)
                    assert match, word
                    reqs[match[1].lower()] = match[2]
    return reqs


def entry_module(path: Path) -> str:
    for op, args in reversed(instructions(path)):
        if op in {"ENTRYPOINT", "CMD"} and args.startswith("["):
            argv = yaml.safe_load(args)
            if "-m" in argv:
                return argv[argv.index("-m") + 1]
            if argv[0] == "daphne":
                return argv[-1].split(":")[0]
    raise AssertionError(f"{path.name}: no python entry point")


def module_exists(module: str) -> bool:
    base = ROOT.joinpath(*module.split("."))
    return (base / "__main__.py").is_file() or base.with_suffix(".py").is_file()


def third_party_imports(files: list[Path]) -> set[str]:
    local = {"contract", "inference", "core", "console", "accounts"}
    found = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in local}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_existing_paths_and_starts_an_existing_module(path):
    for source in copied(path):
        assert (ROOT / source).exists(), f"{path.name}: COPY {source}: no such path"
    assert module_exists(entry_module(path)), f"{path.name}: {entry_module(path)}"
    assert any(op == "USER" for op, _ in instructions(path)), f"{path.name}: runs as root"


def test_console_image_copies_every_package_pyproject_installs():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    sources = set(copied(DOCKER / "Dockerfile"))
    assert packages | {"templates", "static", "manage.py", "pyproject.toml"} <= sources


@pytest.mark.parametrize("path", RUNNER_DOCKERFILES, ids=lambda p: p.name)
def test_runner_image_installs_what_agent_and_runner_import_and_no_django(path):
    reqs = pip_requirements(path)
    assert not DJANGO_SIDE & set(reqs), f"{path.name}: {sorted(DJANGO_SIDE & set(reqs))}"
    assert entry_module(path) == "inference.agent"
    files = [f for source in copied(path) for f in sorted((ROOT / source).rglob("*.py")) or [ROOT / source]]
    gpu = "cuda" in path.name
    for module in third_party_imports(files):
        dist = DISTRIBUTIONS.get(module, module)
        if dist == "onnxruntime" and gpu:
            dist = "onnxruntime-gpu"
        if module in OPTIONAL_IMPORTS and not gpu:
            continue
        assert dist.lower() in reqs, f"{path.name}: installs no {dist} (imported as {module})"
    if gpu:
        assert {"onnxruntime-gpu", "nvidia-ml-py"} <= set(reqs) and "onnxruntime" not in reqs
    # Same bounds as pyproject, so the images do not drift from what the suite tests.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*pyproject["dependencies"], *pyproject["optional-dependencies"]["gpu"]]
    for requirement in declared:
        match = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?(.*)", requirement)
        assert match
        name, spec = match[1].lower(), match[2].split(";")[0].strip()
        if name in reqs:
            assert reqs[name] == spec, f"{path.name}: {name}{reqs[name]} but pyproject says {name}{spec}"


@pytest.mark.parametrize("path", RUNNER_DOCKERFILES, ids=lambda p: p.name)
def test_runner_image_python_is_new_enough(path):
    base = next(args for op, args in instructions(path) if op == "FROM").split()[0]
    ubuntu_python = {"20.04": (3, 8), "22.04": (3, 10), "24.04": (3, 12)}
    if base.startswith("python:"):
        version = tuple(int(x) for x in re.match(r"python:(\d+)\.(\d+)", base).groups())
    else:
        release = re.search(r"ubuntu(\d+\.\d+)", base)
        assert release, f"{path.name}: cannot tell the Python of {base}"
        version = ubuntu_python[release[1]]
    assert version >= (3, 11), f"{path.name}: {base} has Python {version}; the code needs 3.11"


@pytest.mark.parametrize("path", RUNNER_DOCKERFILES, ids=lambda p: p.name)
def test_runner_image_files_import_without_the_rest_of_the_repository(path, tmp_path):
    """Copy what the Dockerfile COPYs, then import every module from there: nothing missing, no Django."""
    for source in copied(path):
        target = tmp_path / source
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / source, target)
    modules = sorted(
        ".".join(p.relative_to(tmp_path).with_suffix("").parts)
        for p in tmp_path.rglob("*.py")
        if p.name != "__main__.py"
    )
    script = (
        "import importlib, sys\n"
        f"root = {str(tmp_path)!r}\n"
        f"sys.path[:] = [root] + [p for p in sys.path if p not in ('', '.', {str(ROOT)!r})]\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name.removesuffix('.__init__'))\n"
        "    assert (module.__file__ or '').startswith(root), (name, module.__file__)\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if name.split('.')[0] in ('contract', 'inference'):\n"
        "        assert (getattr(module, '__file__', None) or root).startswith(root), (name, module)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{sorted(DJANGO_SIDE | {'console', 'core', 'accounts'})!r})\n"
        "assert not bad, bad\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "DJANGO_SETTINGS_MODULE"}}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
