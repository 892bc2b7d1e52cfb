"""A corpus of hostile requests for the source listener, each with the answer it must get.

See ``cases.py``; ``tests/integration/test_hostile_input.py`` replays it against a real server.
"""
