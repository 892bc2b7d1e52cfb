"""The offline Secure Viewing Station tool (``deaddrop-svs``): see ``cli.py`` and README-section.md."""
