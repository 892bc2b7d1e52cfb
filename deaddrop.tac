# Start DeadDrop with `twistd -ny deaddrop.tac`, configured from the environment:
# every `twistd deaddrop` option --some-option is read from DEADDROP_SOME_OPTION
# (e.g. DEADDROP_DATA_DIR, DEADDROP_SUBMISSION_KEY, DEADDROP_TOR=none, DEADDROP_DEMO=1,
# DEADDROP_SOURCE_SESSION_MINUTES=60, DEADDROP_TOR_OPTION="KEY=VALUE,KEY=VALUE"). Another
# DEADDROP_* variable (a misspelt option) or a bad number stops it with one line.
import os
import sys

from twisted.application import service
from twisted.python import usage

from deaddrop.tap import Options, argv_from_environment, makeService

options = Options()
try:
    options.parseOptions(argv_from_environment(os.environ))
except usage.UsageError as e:
    sys.stderr.write(f"deaddrop: error: {e}\n")
    raise SystemExit(1)

application = service.Application("deaddrop")
makeService(options).setServiceParent(application)
