"""The README is a guide that works: at most 300 lines, and every code block in it runs.

* Python blocks run in order as one script (they follow on from each other, as a reader
  goes), in a fresh process whose home and working directory are temporary, on the embedded
  CartPole dataset and a real in-process Reverb server the blocks start themselves.
* Shell blocks run command by command with the venv's `rlds-reverb` entry point, in a
  temporary working directory and home; `VAR=value` lines set variables for the commands
  after them. A `rlds-reverb serve` command, which serves until Ctrl-C, runs in the
  background until it says it is serving (the README says the commands after it run "in
  another terminal"); at the end of its block it gets SIGINT and must stop cleanly. Port
  8000 (and 8001) are replaced by free ports, so that parallel test runs do not collide.
* The install block's `python3.11 -m venv` and `pip install` lines are not run (the test
  runs in the venv they make); what they name must exist.
* `make` blocks are not run (they build a venv from nothing, run the demo or the whole
  suite); each `make TARGET` they name must be a target of the Makefile.

Relative links of the README and of docs/*.md must name files that exist (mkdocs --strict
checks the links inside docs/ again, anchors included: tests/system/test_docs.py).
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys

import portpicker
import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_README = _ROOT / 'README.md'
_MAX_LINES = 300
_BIN = pathlib.Path(sys.executable).parent
_FENCE = re.compile(r'^```(\w*)\n(.*?)^```', re.MULTILINE | re.DOTALL)
_LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
_SERVE_READY = 'Serving'
_COMMAND_TIMEOUT_S = 300
_NOT_RUN = ('python3.11 -m venv', 'pip install')  # This test already runs in the venv.


def _find_blocks(language: str) -> list[str]:
    """Returns the README's fenced code blocks of `language`, in order."""
    return [body for lang, body in _FENCE.findall(_README.read_text()) if lang == language]


def _is_make_block(block: str) -> bool:
    return all(line.startswith('make ') for line in _split_commands(block))


def _split_commands(block: str) -> list[str]:
    """Returns the commands of a shell block: continuations joined, comments dropped."""
    commands, pending = [], ''
    for line in block.splitlines():
        line = pending + line
        if line.endswith('\\'):
            pending = line[:-1]
            continue
        pending = ''
        command = line.split('#', 1)[0].strip()  # The README's commands quote no '#'.
        if command:
            commands.append(command)
    return commands


def _make_env(home: pathlib.Path) -> dict[str, str]:
    """Returns the environment of a README run: a fresh home, this venv, this checkout."""
    env = {k: v for k, v in os.environ.items() if k != 'RLDS_REVERB_DATA_DIR'}
    env.update(
        HOME=str(home),
        PATH=f'{_BIN}{os.pathsep}{env.get("PATH", "")}',
        PYTHONPATH=os.pathsep.join(filter(None, [str(_ROOT), env.get('PYTHONPATH')])),
        TF_CPP_MIN_LOG_LEVEL='2',
    )
    return env


def _pick_two_free_ports() -> int:
    """Returns a free port whose next port is free too (`serve --count 2` takes both)."""
    for _ in range(50):
        port = portpicker.pick_unused_port()
        if port < 65535 and portpicker.is_port_free(port + 1):
            return port
    raise RuntimeError('found no two neighbouring free ports')


def _assign(command: str, env: dict[str, str], cwd: pathlib.Path) -> None:
    """Sets the variable of a `VAR=value` line in `env`, as bash expands it."""
    name = command.split('=', 1)[0]
    expanded = subprocess.run(
        ['bash', '-c', f'{command}; printf %s "${name}"'],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    env[name] = expanded.stdout


def _start_server(command: str, env: dict[str, str], cwd: pathlib.Path) -> subprocess.Popen:
    """Starts a `rlds-reverb serve` command; returns once it says it is serving."""
    server = subprocess.Popen(
        ['bash', '-c', f'exec {command}'],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = []
    for line in server.stdout:
        output.append(line)
        if line.startswith(_SERVE_READY):
            return server
    _, err = server.communicate(timeout=_COMMAND_TIMEOUT_S)
    raise AssertionError(f'{command!r} exited {server.returncode}:\n{"".join(output)}{err}')


def _stop_server(server: subprocess.Popen, command: str) -> None:
    """Stops a served command with Ctrl-C's signal; it must stop cleanly."""
    server.send_signal(signal.SIGINT)
    out, err = server.communicate(timeout=60)
    assert server.returncode == 0 and 'Stopped.' in out, f'{command!r}:\n{out}{err}'


def _run_shell_block(block: str, env: dict[str, str], cwd: pathlib.Path, port: int) -> None:
    """Runs one shell block of the README command by command (see the module docstring)."""
    servers = []
    try:
        for command in _split_commands(block):
            command = command.replace('8000', str(port)).replace('8001', str(port + 1))
            if command.startswith(_NOT_RUN):
                continue  # The install block's venv: test_install_block_names_the_extras.
            if re.fullmatch(r'[A-Z_]+=\S+', command):
                _assign(command, env, cwd)
            elif command.startswith('rlds-reverb serve '):
                servers.append((_start_server(command, env, cwd), command))
            else:
                done = subprocess.run(
                    ['bash', '-c', command],
                    env=env,
                    cwd=cwd,
                    capture_output=True,
                    text=True,
                    timeout=_COMMAND_TIMEOUT_S,
                )
                assert done.returncode == 0, f'{command!r}:\n{done.stdout}{done.stderr}'
    finally:
        for server, command in servers:
            _stop_server(server, command)


def _list_make_targets() -> set[str]:
    makefile = (_ROOT / 'Makefile').read_text()
    return set(re.findall(r'^([\w-]+):', makefile, flags=re.MULTILINE))


def test_the_readme_is_a_guide_of_at_most_300_lines():
    lines = len(_README.read_text().splitlines())
    assert lines <= _MAX_LINES, f'README.md has {lines} lines; move reference text to docs/'


def test_every_code_block_is_python_or_shell():
    languages = [lang for lang, _ in _FENCE.findall(_README.read_text())]
    assert languages and set(languages) <= {'python', 'sh'}, languages


def test_make_blocks_name_makefile_targets():
    targets = _list_make_targets()
    named = [
        command.split()[1]
        for block in _find_blocks('sh')
        for command in _split_commands(block)
        if command.startswith('make ')
    ]
    assert named and set(named) <= targets, (named, targets)
    # Targets the prose names too.
    assert {'test-fast', 'docs', 'bench'} <= targets


def _list_relative_links(path: pathlib.Path) -> list[str]:
    text = _FENCE.sub('', path.read_text())
    return [
        link.split('#', 1)[0]
        for link in _LINK.findall(text)
        if not re.match(r'[a-z]+:', link) and not link.startswith('#')
    ]


def test_relative_links_of_the_readme_and_the_docs_resolve():
    missing = []
    for page in [_README, *sorted((_ROOT / 'docs').rglob('*.md'))]:
        for link in _list_relative_links(page):
            target = (page.parent / link).resolve()
            if link and not target.exists():
                missing.append(f'{page.relative_to(_ROOT)}: {link}')
    assert not missing, missing


@pytest.mark.slow
def test_python_blocks_run(tmp_path):
    script = '\n\n'.join(_find_blocks('python'))
    assert 'rlds_reverb.load' in script and 'reverb.Server' in script
    (tmp_path / 'home').mkdir()
    (tmp_path / 'readme.py').write_text(script)
    done = subprocess.run(
        [sys.executable, 'readme.py'],
        env=_make_env(tmp_path / 'home'),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=_COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'PushStats(' in done.stdout and 'valid' in done.stdout


@pytest.mark.slow
def test_shell_blocks_run(tmp_path):
    from rlds_reverb.examples import cartpole

    home = tmp_path / 'home'
    # The README's DATA: the embedded dataset where `make demo` builds it, under this home.
    cartpole.ensure_default_dataset(data_dir=home / '.cache' / 'rlds_reverb')
    env, port = _make_env(home), _pick_two_free_ports()
    blocks = [block for block in _find_blocks('sh') if not _is_make_block(block)]
    commands = [shlex.split(c)[0] for block in blocks for c in _split_commands(block)]
    assert 'rlds-reverb' in commands and 'pip' in commands
    for block in blocks:
        _run_shell_block(block, env, tmp_path, port)


def test_install_block_names_the_extras():
    """The install block is not run (it would build a venv); what it names must exist."""
    block = next(b for b in _find_blocks('sh') if 'pip install' in b)
    setup = (_ROOT / 'setup.py').read_text()
    for extra in re.findall(r'\.\[([\w,]+)\]', block):
        for name in extra.split(','):
            assert f"'{name}'" in setup, name
    assert '-c constraints.txt' in block and (_ROOT / 'constraints.txt').exists()
