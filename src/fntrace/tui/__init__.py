"""``fntrace tui``: a terminal browser of a trace file (textual)."""
