"""The unit tier: no process, no socket server, no API server. Pure functions and
in-process objects (a replica manager on a temp dir, a coordinator driven directly), and
golden files. Fast: `make unit` runs it alone."""
