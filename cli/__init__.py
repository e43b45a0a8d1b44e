"""The ``floodmark`` command line (docs/operations.md "The floodmark CLI"): one module per
subcommand group, wired in ``main``.

The CLI is the operator's composition root. Only ``cluster`` imports ``chaos`` (the local
runner), lazily; the client library proper never imports ``chaos``.
"""
