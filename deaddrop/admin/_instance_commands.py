"""``deaddrop-admin instance add|list``: instances of the Debian package's ``deaddrop@NAME``.

``instance add NAME`` (as root) makes what ``deaddrop@NAME.service`` needs and nothing else:
the system user ``deaddrop-NAME``, the data dir ``/var/lib/deaddrop/NAME`` (0700, that user's;
the server initialises it at its first start), ``/etc/deaddrop/NAME/`` for the instance's keys
and certificates, and ``/etc/deaddrop/NAME.conf`` with listeners no other instance uses. Each
step is skipped when already done, so running it again repairs rather than replaces. Instances
replace the single instance of ``deaddrop.service``: ``/var/lib/deaddrop`` becomes root's, 0711
(each instance's user may pass through it to its own folder, none may list it), which an
initialised single instance there forbids.
"""
from __future__ import annotations

import argparse
import os
import pwd
import re
import subprocess
from typing import Any

from deaddrop.admin import instances
from deaddrop.admin._datadir import is_initialised
from deaddrop.admin._output import AdminError, Output
from deaddrop.durable import create_exclusively

# The first ports an instance gets (deaddrop.service has 8080 and 8443); each next one takes
# the lowest that no options file in /etc/deaddrop names.
FIRST_SOURCE_PORT = 8081
FIRST_JOURNALIST_PORT = 8444
JOURNALIST_ADDRESS = "10.8.0.1"  # the journalist VPN's, as in deaddrop.conf
_PORT = re.compile(r"^DEADDROP_(?:SOURCE|JOURNALIST)_LISTEN=tcp:(\d+)", re.M)


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("instance", help="instances of the Debian package's deaddrop@NAME service")
    actions = parser.add_subparsers(dest="instance_command", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", parents=[common_parent],
                             help="(as root) the user, folders and options file of deaddrop@NAME")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--source-listen", metavar="ENDPOINT",
                     help="the instance's source listener (default: loopback, the next free port from 8081)")
    add.add_argument("--journalist-listen", metavar="ENDPOINT",
                     help=f"its journalist interface (default: {JOURNALIST_ADDRESS}, the next free port from 8444)")
    add.set_defaults(func=_add)
    listing = actions.add_parser("list", parents=[common_parent], help="the instances with an options file")
    listing.set_defaults(func=_list)


# -- the privileged steps (tests replace these) -----------------------------------------------


def is_root() -> bool:
    return os.geteuid() == 0


def chown(path: str, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)


def system_user(name: str, home: str) -> tuple[int, int, bool]:
    """The system user ``name`` (made with its own group, no shell, no home made) -> (uid, gid, made)."""
    try:
        entry = pwd.getpwnam(name)
        return entry.pw_uid, entry.pw_gid, False
    except KeyError:
        pass
    subprocess.run(["adduser", "--quiet", "--system", "--group", "--home", home, "--no-create-home",
                    "--shell", "/usr/sbin/nologin", name], check=True)
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid, True


# -- instance add -----------------------------------------------------------------------------


def _used_ports() -> set[int]:
    used = set()
    for name in os.listdir(instances.CONF_ROOT) if os.path.isdir(instances.CONF_ROOT) else []:
        if name.endswith(".conf"):
            with open(os.path.join(instances.CONF_ROOT, name), encoding="utf-8") as f:
                used |= {int(port) for port in _PORT.findall(f.read())}
    return used


def _next_port(first: int, used: set[int]) -> int:
    port = first
    while port in used:
        port += 1
    used.add(port)
    return port


def options_file(instance: instances.Instance, source_listen: str, journalist_listen: str) -> str:
    etc = instance.etc_dir
    return (f"# {instance.conf}: the options of {instance.unit} (deaddrop-admin instance add {instance.name}).\n"
            "# The format of /etc/deaddrop/deaddrop.conf: one NAME=VALUE a line, DEADDROP_SOME_OPTION for each\n"
            f"# `twistd deaddrop` option --some-option. The data dir is the unit's, {instance.data_dir}.\n"
            f"# After a change: systemctl restart {instance.unit}\n\n"
            f"DEADDROP_SUBMISSION_KEY={etc}/submission-public.asc\n"
            f"DEADDROP_JOURNALIST_CA={etc}/ca.pem\n"
            f"DEADDROP_JOURNALIST_CRL={etc}/crl.pem\n\n"
            "# Ports of this instance alone. Tor reaches the source interface through the data dir's\n"
            "# tor/source.sock; this loopback listener is for checks on the host.\n"
            f"DEADDROP_SOURCE_LISTEN={source_listen}\n"
            f"DEADDROP_JOURNALIST_LISTEN={journalist_listen}\n")


def _private_root(done: list[str]) -> None:
    """/var/lib/deaddrop: root's, 0711, unless it is deaddrop.service's initialised data dir."""
    root = instances.DATA_ROOT
    if is_initialised(root):
        raise AdminError(f"{root} is deaddrop.service's initialised data dir: instances live in its place "
                         "(back it up, restore it as an instance: deaddrop-admin restore FILE --instance NAME ...)")
    os.makedirs(root, mode=0o711, exist_ok=True)
    st = os.stat(root)
    if (st.st_uid, st.st_gid, st.st_mode & 0o7777) != (0, 0, 0o711):
        chown(root, 0, 0)
        os.chmod(root, 0o711)
        done.append(f"{root} is root's, 0711: each instance's user passes through it to its own folder, none lists it")


def _own_dir(path: str, uid: int, gid: int, mode: int, done: list[str]) -> None:
    if os.path.isdir(path):
        st = os.stat(path)
        if (st.st_uid, st.st_gid, st.st_mode & 0o7777) != (uid, gid, mode):
            raise AdminError(f"{path} exists with another owner or mode ({st.st_uid}:{st.st_gid}, "
                             f"{st.st_mode & 0o7777:o}; want {uid}:{gid}, {mode:o}): fix it or move it away")
        return
    os.mkdir(path, mode)
    chown(path, uid, gid)
    os.chmod(path, mode)  # mkdir's mode goes through the umask
    done.append(f"made {path} ({mode:o})")


def _add(args: argparse.Namespace, out: Output) -> int:
    instance = instances.instance(args.name)
    if not is_root():
        raise AdminError("instance add makes a system user and folders in /var/lib and /etc: run it as root")
    done: list[str] = []
    _private_root(done)
    uid, gid, made = system_user(instance.user, instance.data_dir)
    if made:
        done.append(f"made the system user {instance.user}")
    _own_dir(instance.data_dir, uid, gid, 0o700, done)
    os.makedirs(instances.CONF_ROOT, mode=0o755, exist_ok=True)
    _own_dir(instance.etc_dir, 0, gid, 0o750, done)
    used = _used_ports()
    source = args.source_listen or f"tcp:{_next_port(FIRST_SOURCE_PORT, used)}:interface=127.0.0.1"
    journalist = args.journalist_listen or f"tcp:{_next_port(FIRST_JOURNALIST_PORT, used)}:interface={JOURNALIST_ADDRESS}"
    if create_exclusively(instance.conf, options_file(instance, source, journalist).encode(), 0o644):
        done.append(f"wrote {instance.conf} (sources {source}, journalists {journalist})")
    else:
        done.append(f"kept {instance.conf} as it is")
    steps = [f"copy the SVS's submission-public.asc, the CA's ca.pem and crl.pem (and state.json) into "
             f"{instance.etc_dir}/ (install -m 640 -g {instance.user} ...)",
             f"systemctl enable --now {instance.unit}",
             f"runuser -u {instance.user} -- deaddrop-admin --instance {instance.name} journalist add NAME"]
    out.result({"instance": instance.name, "user": instance.user, "data_dir": instance.data_dir,
                "conf": instance.conf, "etc_dir": instance.etc_dir, "unit": instance.unit, "done": done,
                "next": steps},
               "\n".join([f"instance {instance.name}:"] + [f"  {line}" for line in done]
                         + ["next:"] + [f"  {i}. {step}" for i, step in enumerate(steps, 1)]))
    return 0


def _list(args: argparse.Namespace, out: Output) -> int:
    rows = [{"instance": i.name, "unit": i.unit, "user": i.user, "data_dir": i.data_dir, "conf": i.conf,
             "initialised": is_initialised(i.data_dir)} for i in instances.configured()]
    text = "\n".join(f"{r['instance']}: {r['unit']} as {r['user']}, data {r['data_dir']}"
                     f"{'' if r['initialised'] else ' (not started yet)'}" for r in rows)
    out.result({"instances": rows}, text or f"no instances (no NAME.conf in {instances.CONF_ROOT})")
    return 0
