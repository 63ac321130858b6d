"""One module per command, `cmd_<command>`: its parameters (the signature typer reads), one call into
the library, and what it prints. nmt.cli.main registers them. The library (and torch with it) is
imported inside each command function, where it runs, so that `nmt --help` starts fast.
"""
