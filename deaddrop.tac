# Start DeadDrop with `twistd -ny deaddrop.tac`, configured from the environment:
# every `twistd deaddrop` option --some-option maps to DEADDROP_SOME_OPTION
# (e.g. DEADDROP_DATA_DIR, DEADDROP_SUBMISSION_KEY, DEADDROP_TOR=none).
import os

from twisted.application import service

from deaddrop.config import from_environment
from deaddrop.tap import Options, makeService

options = Options()
argv = []
for name, value in from_environment(os.environ).items():
    if name in ("journalist-onion", "demo", "journalist-explain-missing-cert"):
        if value.lower() in ("1", "true", "yes"):
            argv.append(f"--{name}")
    elif name == "tor-options":
        for item in value.split(","):
            if item.strip():
                argv += ["--tor-option", item.strip()]
    else:
        argv += [f"--{name}", value]
options.parseOptions(argv)

application = service.Application("deaddrop")
makeService(options).setServiceParent(application)
