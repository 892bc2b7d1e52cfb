# Every security event emitted while the suite runs is checked against docs/monitoring.md.
from tests._event_catalogue import install as _check_events_against_the_doc

_check_events_against_the_doc()
