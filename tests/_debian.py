"""What the Debian package tests share: building the packages (scripts/build-deb), a throwaway
release key and a signed repository (scripts/publish-apt), and a unit's ExecStart as systemd
would run it (for a machine where systemd is not PID 1)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
# What scripts/build-deb copies (its own list), and the folders it leaves out.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "venv", "_trial_temp*", "build", "dist", "*.egg-info",
                                    "__pycache__", "deaddrop-data", "deaddrop-demo", "dropin.cache", "bench", "tests")
BUILD_TOOLS = {"dpkg-buildpackage": "dpkg-dev", "dh": "debhelper", "dh_virtualenv": "dh-virtualenv",
               "lintian": "lintian", "aptly": "aptly", "gpg": "gnupg"}


def missing_tools() -> str | None:
    missing = sorted({package for tool, package in BUILD_TOOLS.items() if shutil.which(tool) is None})
    return f"apt-get install {' '.join(missing)} (.ci/run installs them)" if missing else None


def clean_env() -> dict[str, str]:
    """Never the test process's PYTHONPATH (trial -j sets it): pip would take the suite's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def start_build(checkout: Path, out: Path, log: Path, version: str | None = None,
                quick: bool = False) -> subprocess.Popen:
    argv = ["python3", str(checkout / "scripts" / "build-deb"), "--out", str(out)]
    argv += (["--version", version] if version else []) + (["--quick"] if quick else [])
    with open(log, "wb") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=clean_env())


# A second release for the upgrade test: two schema steps more. The first makes a table; the
# second fails while /etc/deaddrop/fail-test-migration exists, after the first has committed.
TEST_STEPS = '''

def _test_package_upgrade(conn):
    conn.execute("CREATE TABLE package_upgrade_test (note TEXT)")
    conn.execute("INSERT INTO package_upgrade_test VALUES ('made by the upgraded package')")


def _test_fails_on_request(conn):
    import os

    if os.path.exists("/etc/deaddrop/fail-test-migration"):
        raise RuntimeError("the test migration was told to fail")


STEPS += [(BASELINE + len(STEPS) + 1, _test_package_upgrade), (BASELINE + len(STEPS) + 2, _test_fails_on_request)]
'''


def checkout_with_test_migrations(dest: Path) -> Path:
    """A copy of this checkout whose schema has the two test steps (``TEST_STEPS``)."""
    shutil.copytree(ROOT, dest, symlinks=True, ignore=NOT_SOURCE)
    migrations = dest / "deaddrop" / "store" / "migrations.py"
    text = migrations.read_text()
    anchor = "\nCURRENT = BASELINE + len(STEPS)\n"
    assert anchor in text, "migrations.py no longer computes CURRENT from STEPS"
    migrations.write_text(text.replace(anchor, TEST_STEPS + anchor, 1))
    return dest


class ReleaseKey:
    """A throwaway release key in a gpg home of its own (the project's real key is not this)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(mode=0o700)
        self.env = dict(clean_env(), GNUPGHOME=str(home))
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "DeadDrop test release key (throwaway)",
                        "ed25519", "sign", "never"], env=self.env, check=True, capture_output=True)
        listing = subprocess.run(["gpg", "--list-keys", "--with-colons"], env=self.env, check=True,
                                 capture_output=True, text=True).stdout
        self.fingerprint = re.search(r"^fpr:+([0-9A-F]{40}):", listing, re.M).group(1)

    def publish(self, repo: Path, debs: list[Path]) -> str:
        proc = subprocess.run(["python3", str(ROOT / "scripts" / "publish-apt"), "--root", str(repo), "--key",
                               self.fingerprint, *map(str, debs)], env=self.env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def stop_agent(self) -> None:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.env, capture_output=True)


def environment_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= format, as far as DeadDrop's options files use it."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")) and "=" in line:
            key, value = line.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            found[key.strip()] = value
    return found


def unit_exec(unit: str, read: Callable[[str], str], instance: str | None = None) -> list[str]:
    """The argv that runs the unit's ExecStart as systemd would: as its User, in its
    WorkingDirectory, with exactly its Environment= and EnvironmentFile= (``read`` reads a
    file where the unit runs), for ``runuser`` and ``env`` on a machine without systemd."""
    text = unit.replace("\\\n", " ")
    if instance is not None:
        text = text.replace("%i", instance)
    settings = re.findall(r"^(\w+)=(.*)$", text, re.M)
    values = dict(settings)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for key, value in settings:
        if key == "Environment":
            env.update(item.split("=", 1) for item in shlex.split(value))
    for key, value in settings:
        if key == "EnvironmentFile":
            env.update(environment_file(read(value)))  # systemd: these override Environment=
    return ["runuser", "-u", values["User"], "--", "env", "-i", f"--chdir={values['WorkingDirectory']}",
            *[f"{k}={v}" for k, v in env.items()], *shlex.split(values["ExecStart"])]
