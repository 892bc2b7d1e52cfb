#!/usr/bin/env python3
"""Many instances on one host (issue 32, item 4): what one idle instance costs, server plus its
own Tor, and whether every instance still answers its source page in under a second.

    .venv/bin/python bench/instances.py [--steps 1,10,20,40] [--settle 60] [--window 300] [--tor private|live]

Instances are started as the template unit starts them (``twistd deaddrop`` with its own data
dir, listeners and launched Tor; here from this checkout's venv, the code the package ships),
in steps up to the last count. At each step, once every onion is published and the instances
have settled, it measures over WINDOW seconds each process's CPU time (utime + stime from
/proc, so other load on the machine does not count), then each process's memory (PSS, its
fair share of shared pages, from /proc/PID/smaps_rollup; and RSS), then asks every instance
for its source page (GET / on its loopback listener, where Tor delivers it): one instance at
a time, then all at once. ``--tor private`` (default) runs the Tors on the private network of
tests/integration/tornet.py (no Internet needed; its consensus is tiny, so Tor's memory there
is below what the live network's consensus costs); ``--tor live`` on the Tor network.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests._process import RawClient, free_port  # noqa: E402
from tests._support import short_tempdir, test_svs  # noqa: E402
from tests.integration import tornet  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Instance:
    name: str
    data_dir: str
    source_port: int
    journalist_port: int
    proc: subprocess.Popen | None = None
    cpu_start: dict[str, float] = field(default_factory=dict)

    def pids(self) -> dict[str, int]:
        """The server and the Tor it launched."""
        assert self.proc is not None
        found = {"server": self.proc.pid}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    with open(f"/proc/{entry}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if int(fields[1]) == self.proc.pid and comm == "tor":
                    found["tor"] = int(entry)
        return found


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def memory_kib(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in KiB."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in ("Pss:", "Rss:"):
                values[parts[0]] = int(parts[1])
    return values["Pss:"], values["Rss:"]


def start(instance: Instance, key: str, tor_args: list[str], log_dir: str) -> None:
    os.makedirs(instance.data_dir, mode=0o700)
    subprocess.run([os.path.join(VENV_BIN, "deaddrop-admin"), "ca", "init", "--data-dir", instance.data_dir],
                   check=True, capture_output=True)
    argv = [os.path.join(VENV_BIN, "twistd"), "--nodaemon", "--pidfile=", f"--logfile={log_dir}/{instance.name}.log",
            "deaddrop", "--data-dir", instance.data_dir, "--submission-key", key,
            "--source-listen", f"tcp:{instance.source_port}:interface=127.0.0.1",
            "--journalist-listen", f"tcp:{instance.journalist_port}:interface=127.0.0.1", "--tor", "launch", *tor_args]
    instance.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)


def published(instance: Instance, log_dir: str) -> bool:
    assert instance.proc is not None
    if instance.proc.poll() is not None:
        with open(os.path.join(log_dir, f"{instance.name}.log"), errors="replace") as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"instance {instance.name} exited ({instance.proc.returncode}):\n{tail}")
    return os.path.exists(os.path.join(instance.data_dir, "source-onion.txt"))


def page_seconds(instance: Instance) -> float:
    t0 = time.monotonic()
    response = RawClient(instance.source_port).get("/", timeout=60)
    assert response.status == 200, response.status
    return time.monotonic() - t0


def measure(instances: list[Instance], window: float) -> dict:
    pids = {i.name: i.pids() for i in instances}
    before = {(n, role): cpu_seconds(pid) for n, roles in pids.items() for role, pid in roles.items()}
    load_before = os.getloadavg()[0]
    time.sleep(window)
    cpu = {key: (cpu_seconds(pids[key[0]][key[1]]) - start_value) / window for key, start_value in before.items()}
    memory = {(n, role): memory_kib(pid) for n, roles in pids.items() for role, pid in roles.items()}
    one_by_one = [page_seconds(i) for i in instances]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(instances)) as pool:
        at_once = list(pool.map(page_seconds, instances))
    result = {"instances": len(instances), "load": (load_before, os.getloadavg()[0]),
              "one_by_one": one_by_one, "at_once": at_once}
    for role in ("server", "tor"):
        result[role] = {
            "cpu": statistics.mean(v for (n, r), v in cpu.items() if r == role),
            "pss": statistics.mean(v[0] for (n, r), v in memory.items() if r == role) / 1024,
            "rss": statistics.mean(v[1] for (n, r), v in memory.items() if r == role) / 1024,
        }
    return result


def report(r: dict) -> str:
    server, tor = r["server"], r["tor"]
    return (f"{r['instances']:4d} instances | server: CPU {server['cpu'] * 100:5.2f}% of a core, PSS {server['pss']:6.1f} MB,"
            f" RSS {server['rss']:6.1f} MB | tor: CPU {tor['cpu'] * 100:5.2f}%, PSS {tor['pss']:5.1f} MB, RSS"
            f" {tor['rss']:5.1f} MB | source page: one by one max {max(r['one_by_one']) * 1000:5.0f} ms,"
            f" all at once max {max(r['at_once']) * 1000:5.0f} ms | load {r['load'][0]:.1f}-{r['load'][1]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1,10,20,40", help="instance counts to measure at, increasing")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds after the last onion is published")
    parser.add_argument("--window", type=float, default=300.0, help="seconds of idle CPU measured")
    parser.add_argument("--tor", choices=("private", "live"), default="private")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    work = short_tempdir("dd-instances-")
    svs = test_svs()
    net = None
    tor_args: list[str] = []
    if args.tor == "private":
        net = tornet.TorNetwork().start()
        tor_args = [a for k, v in net.tor_options for a in ("--tor-option", f"{k}={v}")]
    instances: list[Instance] = []
    print(f"# bench/instances.py --steps {args.steps} --settle {args.settle:.0f} --window {args.window:.0f} "
          f"--tor {args.tor}; {os.cpu_count()} CPUs; started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          flush=True)
    try:
        for count in steps:
            t0 = time.monotonic()
            while len(instances) < count:
                i = Instance(f"i{len(instances) + 1}", os.path.join(work, f"i{len(instances) + 1}"), free_port(),
                             free_port())
                start(i, svs.public_key_path, tor_args, work)
                instances.append(i)
            deadline = time.monotonic() + 600
            while not all(published(i, work) for i in instances):
                if time.monotonic() > deadline:
                    raise SystemExit("not every onion was published within 600 s")
                time.sleep(1)
            print(f"  {count} instances up, every onion published, in {time.monotonic() - t0:.0f} s", flush=True)
            time.sleep(args.settle)
            print(report(measure(instances, args.window)), flush=True)
    finally:
        for i in instances:
            if i.proc is not None and i.proc.poll() is None:
                i.proc.terminate()
        for i in instances:
            if i.proc is not None:
                try:
                    i.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(i.proc.pid, 9)
        if net is not None:
            net.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
