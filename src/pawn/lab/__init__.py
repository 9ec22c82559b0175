"""``pawn lab``: an MCP server through which an agent (or a person's assistant) starts, watches,
stops, resumes and compares PAWN experiments (spec: issue 24).

- :mod:`pawn.lab.tools`: the tools as plain functions (JSON in, JSON-ready dicts out; PAWN's
  one-line errors), reading runs only through :mod:`pawn.runs`;
- :mod:`pawn.lab.procs`: the processes the lab starts and the ``lab.json`` each leaves in its
  run directory (all the lab's state: a restarted lab sees every run without a recovery step);
- :mod:`pawn.lab.server`: the MCP server (official ``mcp`` SDK, extra ``pawn[lab]``).

Importing this package does not import the SDK; :func:`pawn.lab.server.build_server` does.
"""
