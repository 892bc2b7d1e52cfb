"""The offline Secure Viewing Station tool (``deaddrop-svs``): see ``cli.py`` and the README's section "The Secure Viewing Station"."""
