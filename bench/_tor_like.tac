# Bench only (bench/abuse.py): `twistd -n -y bench/_tor_like.tac` with $DEADDROP_BENCH_ARGV set
# runs `twistd deaddrop ARGV` plus the Tor-only PROXY listener; see bench/_tor_like.py.
import os
import sys

from twisted.application import service

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _tor_like  # noqa: E402

application = service.Application("deaddrop")
_tor_like.build(_tor_like.argv_from_environment()).setServiceParent(application)
